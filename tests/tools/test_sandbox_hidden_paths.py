"""SandboxConfig.hidden_paths: host directories covered by an empty tmpfs inside the sandbox
(the behaviour inside a real sandbox is tested with the HumanEval package in
tests/envs/test_code_repair.py::test_dataset_is_hidden_in_the_sandboxes)."""

from __future__ import annotations

import sys

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available, sandbox_command
from tests.markers import BWRAP_SKIP_REASON


def test_relative_hidden_path_rejected():
    with pytest.raises(ValueError, match="hidden_paths"):
        SandboxConfig(hidden_paths=("relative/dir",))
    assert SandboxConfig(hidden_paths=["/abs"]).hidden_paths == ("/abs",)  # a list becomes a tuple


@pytest.mark.skipif(not bwrap_available(), reason=BWRAP_SKIP_REASON)
def test_hidden_directory_is_covered_after_the_prefix_mounts(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    cmd = sandbox_command(
        SandboxConfig(hidden_paths=(str(secret), "/no/such/dir")), tmp_path, ["python"]
    )
    at = cmd.index(str(secret))
    prefix_binds = [
        i
        for i, a in enumerate(cmd)
        if a == "--ro-bind" and cmd[i + 1] in (sys.prefix, sys.base_prefix)
    ]
    assert cmd[at - 1] == "--tmpfs" and at > max(prefix_binds)
    assert "/no/such/dir" not in cmd  # a missing directory has nothing to hide
