"""Shared pytest marks."""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.tools.sandbox.bwrap import bwrap_available

#: tests that run tools in the bubblewrap sandbox; skipped where bwrap is missing (CI installs it)
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason="bubblewrap missing or unusable (CI installs it)",
)

#: built-in envs whose tools run in the sandbox
SANDBOXED_ENVS = {"code-repair-v0"}


def env_params(env_ids: list[str]) -> list:
    """``env_ids`` as pytest params, the sandboxed ones marked :data:`needs_bwrap`."""
    return [pytest.param(e, marks=needs_bwrap) if e in SANDBOXED_ENVS else e for e in env_ids]
