"""An env with MCP tools trains 2 RL steps (issue 23.3): every MCP call is in the audit log, and a
denied MCP tool never runs (checked on the server's own record of the calls it received).

The env is ``calculator-v0`` configured as a user would, with ``env.kwargs.mcp_servers`` on the
command line, pointing at the real test server (tests/tools/mcp_server.py) over streamable HTTP.
Its oracle (the warm-up demonstrations) is the calculator oracle with one change: its first reply
calls the MCP tools ``add`` (allowed, read-only) and ``crash`` (no annotations: ``network`` by the
MCP defaults, so the default policy denies it), so the run surely makes MCP calls whatever the
tiny random policy does afterwards.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentic_rl.cli.main import main
from agentic_rl.envs import register
from agentic_rl.envs.calculator.env import CalculatorEnv
from agentic_rl.envs.registry import _REGISTRY
from agentic_rl.tools.mcp import mcp_unavailable_reason
from agentic_rl.trainer.records.run_dir import MetricsLog
from tests.tools.test_mcp import STARTUP_S, _calls, http_server  # noqa: F401 - a fixture
from tests.trainer.test_recipe_envs import SMOKE

ENV_ID = "mcp-calculator-test-v0"


class McpCalculatorEnv(CalculatorEnv):
    """calculator-v0 whose oracle first calls the MCP tools ``add`` and ``crash`` (test env)."""

    def oracle_reply(self) -> str | None:
        if self.mcp is None or self.task is None or self.episode.done or self._called:
            return super().oracle_reply()
        calls = [
            {"name": "add", "arguments": {"a": 40, "b": 2}},
            {"name": "crash", "arguments": {}},
        ]
        return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


@pytest.mark.slow
@pytest.mark.skipif(mcp_unavailable_reason() is not None, reason=str(mcp_unavailable_reason()))
def test_env_with_mcp_tools_trains_two_steps(http_server, tiny_model_dir, tmp_path):  # noqa: F811
    url, calls, _notes = http_server
    before = len(_calls(calls))
    register(ENV_ID, McpCalculatorEnv, "test: calculator-v0 with MCP tools, MCP-calling oracle")
    server = f"{{name = 'notes', url = '{url}', startup_timeout_s = {STARTUP_S}}}"
    sets = [
        f"model.path='{tiny_model_dir}'",
        f"output_dir='{tmp_path}'",
        *SMOKE,
        "warmup.env_kwargs={levels = ['direct']}",
        f"env.kwargs.mcp_servers=[{server}]",
    ]
    argv = ["train", "--env", ENV_ID]
    for item in sets:
        argv += ["--set", item]
    try:
        assert main(argv) == 0
    finally:
        del _REGISTRY[ENV_ID]
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    mcp_tools = {"add", "write_note", "sleep", "crash", "fail"}
    audit = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    mcp_records = [r for r in audit if r["tool"] in mcp_tools]
    received = _calls(calls)[before:]
    # the warm-up demonstrations called add and crash (3 demos); the policy may have called more
    assert sum(r["tool"] == "add" and r["decision"] == "allow" for r in mcp_records) >= 3
    assert sum(r["tool"] == "crash" and r["decision"] == "deny" for r in mcp_records) >= 3

    # every call the server received is an allowed call in the audit log, and every allowed call
    # that succeeded reached the server
    def key(tool: str, arguments: dict) -> str:
        return json.dumps([tool, arguments], sort_keys=True)

    got = Counter(key(c["tool"], c["arguments"]) for c in received)
    allowed = Counter(
        key(r["tool"], r["arguments"]) for r in mcp_records if r["decision"] == "allow"
    )
    succeeded = Counter(
        key(r["tool"], r["arguments"])
        for r in mcp_records
        if r["decision"] == "allow" and r["status"] == "ok"
    )
    assert got and not got - allowed and not succeeded - got
    assert not any(c["tool"] == "crash" for c in received)  # denied: it never ran
