"""Shared fixtures: the default model's tokenizer and a tiny random Llama for fast trainer tests.

``model_dir``/``tokenizer``/``chat`` load only the tokenizer of the converted SmolLM2-135M
checkpoint (the conversion runs once per machine, ~40 s). ``tiny_model_dir`` is a 2-layer,
32-wide random Llama with SmolLM2's tokenizer and vocabulary (49,152 ids): it loads real
weights through the normal code path, but in well under a second, so trainer tests stay light.
Tests that load the real 135M weights are marked ``slow``.

Never run the suite beside another torch job on a 2-core machine: two processes each using both
cores slow each other down by an order of magnitude (set ``OMP_NUM_THREADS=1`` if you must).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from tests.skip_summary import pytest_terminal_summary as skip_summary  # noqa: E402
from tests.tiny_models import save_random_llama  # noqa: E402

_FREE_AT_START = pytest.StashKey[float]()


def _free_gib(path: str) -> float:
    import shutil

    return shutil.disk_usage(path).free / 2**30


def pytest_report_header(config):
    """Free disk where the suite writes (its tmp_path scratch, the repository's virtualenvs).

    A full run holds up to about 2 GB of scratch at a time (each passing test's ``tmp_path`` is
    deleted when it ends); on a nearly full shared disk every test that writes fails at setup, so
    the header says how much room there was.
    """
    import tempfile

    tmp = tempfile.gettempdir()
    return f"free disk: {_free_gib(tmp):.1f} GiB at {tmp}, {_free_gib(str(config.rootpath)):.1f} GiB at the repository"


def pytest_sessionstart(session):
    import tempfile

    session.config.stash[_FREE_AT_START] = _free_gib(tempfile.gettempdir())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """End the run with its skipped tests by reason and the free disk before and after it."""
    import tempfile

    skip_summary(terminalreporter, exitstatus, config)
    start = config.stash.get(_FREE_AT_START, float("nan"))
    end = _free_gib(tempfile.gettempdir())
    terminalreporter.write_line(
        f"free disk at the temp dir: {start:.1f} GiB at the start, {end:.1f} GiB at the end"
    )


@pytest.fixture(scope="session")
def model_dir():
    from agentic_rl.policy.model_loading import resolve_model_dir

    return resolve_model_dir("default")


@pytest.fixture(scope="session")
def tokenizer(model_dir):
    from agentic_rl.policy.model_loading import load_tokenizer

    return load_tokenizer(model_dir)


@pytest.fixture(scope="session")
def chat(tokenizer):
    from agentic_rl.policy.chat import ChatFormat

    return ChatFormat(tokenizer)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    return save_random_llama(tokenizer, tmp_path_factory.mktemp("tiny-llama"))
