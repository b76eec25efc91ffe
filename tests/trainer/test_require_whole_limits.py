"""``tools.require_whole_sandbox_limits`` (issue 39, item 23): a run can refuse a host that cannot
bound a sandbox as a whole, and then every sandbox of the run requires its whole limits."""

from __future__ import annotations

import os

import pytest

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.tools.sandbox import limits
from agentic_rl.trainer.run import validate

REQUIRE = ["tools.require_whole_sandbox_limits=true"]


def test_a_host_without_whole_limits_is_refused_at_start(monkeypatch):
    # the host is the boundary here: this one may have both mechanisms, so it is made to lack one
    monkeypatch.delenv(limits.REQUIRE_VARIABLE, raising=False)
    monkeypatch.setattr(limits, "host_problems", lambda config=None: ["no cgroup here"])
    with pytest.raises(ConfigError, match="require_whole_sandbox_limits = true, but no cgroup"):
        validate(load_config(None, REQUIRE))
    assert limits.REQUIRE_VARIABLE not in os.environ
    validate(load_config(None, []))  # not required: runs (with per-process limits only)


@pytest.mark.skipif(bool(limits.host_problems()), reason=f"{limits.host_problems()}")
def test_a_host_with_them_switches_the_requirement_on_for_every_sandbox(monkeypatch):
    monkeypatch.delenv(limits.REQUIRE_VARIABLE, raising=False)
    validate(load_config(None, REQUIRE))
    assert os.environ[limits.REQUIRE_VARIABLE] == "1"
    with pytest.raises(ConfigError, match="require_whole_sandbox_limits"):
        load_config(None, ["tools.require_whole_sandbox_limits='yes'"])
