"""Shared pytest marks."""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.tools.sandbox.bwrap import bwrap_unavailable_reason

#: why the sandbox tests skip here: bwrap not installed (`make test` installs it as root) or unable
#: to create namespaces, with what to do; the empty string where the sandbox works
BWRAP_SKIP_REASON = bwrap_unavailable_reason() or ""

#: tests that run tools in the bubblewrap sandbox; skipped where it cannot run, with the reason
needs_bwrap = pytest.mark.skipif(bool(BWRAP_SKIP_REASON), reason=BWRAP_SKIP_REASON)

#: tests that run Coq (coq-proof-v0); skipped where Debian's coq is missing
needs_coq = pytest.mark.skipif(
    shutil.which("coqtop") is None or shutil.which("coqc") is None,
    reason="Coq (coqtop, coqc) missing: apt-get install coq (`make test` installs it as root)",
)

#: built-in envs whose tools run in the sandbox
SANDBOXED_ENVS = {"code-repair-v0", "coq-proof-v0", "swe-repo-v0"}


def env_params(env_ids: list[str]) -> list:
    """``env_ids`` as pytest params, the sandboxed ones marked :data:`needs_bwrap`."""
    return [pytest.param(e, marks=needs_bwrap) if e in SANDBOXED_ENVS else e for e in env_ids]
