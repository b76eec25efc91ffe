"""The side virtualenvs' interpreters come from the project root or a configured path only
(issue 39, item 25).

Before, ``.venv-vllm/bin/python`` and ``.venv-verifiers/bin/python`` were looked up in the working
directory and every parent of it: one planted in ``/tmp`` (or any shared parent) was what the
trainer, often root, executed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentic_rl.envs.adapters.verifiers import PYTHON_ENV_VAR as VF_VAR
from agentic_rl.envs.adapters.verifiers import find_verifiers_python
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.policy.vllm_server import PYTHON_ENV_VAR as VLLM_VAR
from agentic_rl.policy.vllm_server import VLLMServerError, find_vllm_python
from agentic_rl.venvs import project_root, venv_python


def _plant(folder: Path, venv: str) -> Path:
    python = folder / venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\ntouch planted-python-ran\n")
    python.chmod(0o755)
    return python


def _found(find, error) -> Path | None:
    try:
        return find()
    except error:
        return None


@pytest.mark.parametrize(
    ("venv", "var", "find", "error"),
    [
        (".venv-vllm", VLLM_VAR, find_vllm_python, VLLMServerError),
        (".venv-verifiers", VF_VAR, find_verifiers_python, EnvUnavailableError),
    ],
)
def test_a_venv_planted_in_a_parent_of_the_working_directory_is_not_used(
    tmp_path, monkeypatch, venv, var, find, error
):
    planted = _plant(tmp_path, venv)
    work = tmp_path / "shared" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv(var, raising=False)
    found = _found(find, error)
    assert found != planted
    assert found is None or found == project_root() / venv / "bin" / "python"
    _plant(work, venv)  # nor one in the working directory itself
    assert _found(find, error) == found


def test_the_project_root_is_the_checkout_of_the_package(tmp_path):
    root = Path(__file__).resolve().parents[1]
    assert project_root() == root  # the tests run from the checkout
    fake = tmp_path / "proj"
    (fake / "src" / "agentic_rl").mkdir(parents=True)
    assert project_root(fake / "src" / "agentic_rl") is None  # no pyproject.toml, no Makefile
    (fake / "pyproject.toml").write_text("")
    (fake / "Makefile").write_text("")
    assert project_root(fake / "src" / "agentic_rl") == fake
    site = tmp_path / "lib" / "python3.11" / "site-packages" / "agentic_rl"
    site.mkdir(parents=True)
    assert project_root(site) is None  # an installed package has no project root


def test_lookup_order(tmp_path, monkeypatch):
    fake = tmp_path / "proj"
    package = fake / "src" / "agentic_rl"
    package.mkdir(parents=True)
    (fake / "pyproject.toml").write_text("")
    (fake / "Makefile").write_text("")
    var = "AGENTIC_RL_TEST_PYTHON"
    monkeypatch.delenv(var, raising=False)
    path, why = venv_python(None, var, ".venv-x", package=package)
    assert path is None and ".venv-x" in why and f"${var}" in why
    in_project = _plant(fake, ".venv-x")
    assert venv_python(None, var, ".venv-x", package=package) == (in_project, "")
    configured = _plant(tmp_path / "opt", ".venv-x")
    monkeypatch.setenv(var, str(configured))
    assert venv_python(None, var, ".venv-x", package=package) == (configured, "")
    given = _plant(tmp_path / "given", ".venv-x")
    assert venv_python(str(given), var, ".venv-x", package=package) == (given, "")
    monkeypatch.setenv(var, str(tmp_path / "missing"))
    path, why = venv_python(None, var, ".venv-x", package=package)
    assert path is None and "missing" in why  # a wrong configured path is an error, no fallback
    assert not Path("planted-python-ran").exists() and os.getcwd()  # nothing was executed
