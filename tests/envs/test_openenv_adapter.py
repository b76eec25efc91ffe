"""The openenv/<module>-v0 adapter on the real openenv-core package (skipped without it).

The envs are tests/envs/openenv_envs/products_env (text actions) and products_tools_env (an MCP
env: tools only), written in OpenEnv's own API (openenv-core 0.3.0 ships no runnable env). Each
env instance serves its module with uvicorn in its own process on a free local port and talks to
it through OpenEnv's GenericEnvClient; the tests check the mappings, that no process or port
outlives close() or a dropped env, that foreign errors are loud, both checkers, and a 2-step RL
run with the tiny random model."""

from __future__ import annotations

import gc
import json
import math
import os
import re
import socket
import sys
import warnings
from pathlib import Path

import gymnasium
import pytest

try:
    import openenv.core.generic_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the extra
    pytest.skip(
        f"openenv-core is not installed ({exc}): pip install -e '.[openenv]' (`make test` does)",
        allow_module_level=True,
    )

from gymnasium.utils.env_checker import check_env as gym_check_env

from agentic_rl.cli.main import main
from agentic_rl.envs import make
from agentic_rl.envs.adapters.openenv import (
    OpenEnvEnv,
    OpenEnvError,
    _action_field,
    register_openenv_oracle,
    render_observation,
    resolve_openenv_id,
)
from agentic_rl.envs.checker import check_env
from agentic_rl.envs.oracle_success import play_oracle
from agentic_rl.envs.registry import gymnasium_id, register_family_in_gymnasium
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.types import Action, ToolCall, ToolCallError
from tests.killed_owner import pid_alive, run_and_kill, wait_until
from tests.recipe_settings import TWO_STEP_SMOKE

ENV_ID = "openenv/products_env-v0"
ENVS_DIR = Path(__file__).parent / "openenv_envs"


def products_oracle(observation: dict) -> str | None:
    """A scripted policy on products_env's observation: read the question, answer the product."""
    m = re.search(r"What is (\d+) \* (\d+)\?", observation.get("prompt", ""))
    return f"{m.group(1)} * {m.group(2)} = {int(m.group(1)) * int(m.group(2))}" if m else None


def products_tools_oracle(observation: dict) -> str | None:
    """The MCP env's scripted policy: submit the product through the submit tool."""
    m = re.search(r"What is (\d+) \* (\d+)\?", observation.get("prompt", ""))
    if m is None:
        return None
    call = {"name": "submit", "arguments": {"answer": int(m.group(1)) * int(m.group(2))}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


register_openenv_oracle("products_env", products_oracle)
register_openenv_oracle("products_tools_env", products_tools_oracle)


@pytest.fixture(autouse=True)
def products_env_importable(monkeypatch):
    """The server's Python finds products_env through PYTHONPATH (it is not installed)."""
    paths = [str(ENVS_DIR), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_reset_and_step_on_the_real_server_then_close_frees_process_and_port():
    env = make(ENV_ID)
    assert env.server.process is None  # lazy: nothing runs before the first reset
    obs, info = env.reset(seed=3)
    process, port = env.server.process, env.server.port
    assert process.pid != os.getpid() and process.poll() is None and port_open(port)
    assert env.action_field == "message"  # found in the server's /schema
    assert [m.role for m in obs.messages] == ["user"]
    assert obs.messages[0].content == info["openenv_observation"]["prompt"]
    assert obs.messages[0].content.startswith("What is 5 * 11?")
    obs, reward, terminated, truncated, info = env.step(Action("I think 54"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "too low" in obs.messages[0].content and info["openenv_outcome"] == 0.0
    obs, reward, terminated, truncated, info = env.step(Action("so it is 55"))
    assert (reward, terminated, truncated, obs.messages) == (1.0, True, False, ())
    assert info["openenv_outcome"] == 1.0 and info["openenv_reward"] == 1.0
    env.close()
    env.close()  # twice is fine
    assert process.poll() is not None and not port_open(port)


def test_a_dropped_env_stops_its_server():
    env = make(ENV_ID)
    env.reset(seed=1)
    process, port = env.server.process, env.server.port
    del env
    gc.collect()
    assert process.poll() is not None and not port_open(port)


def test_a_killed_trainer_leaves_no_server_or_port():
    # SIGKILL (the OOM killer's signal) runs no close() and no finalizer: the watchdog stops it
    code = (
        f"from agentic_rl.envs import make\nenv = make({ENV_ID!r})\nenv.reset(seed=1)\n"
        "state = {'pid': env.server.process.pid, 'port': env.server.port}\n"
    )
    state = run_and_kill(code)
    assert wait_until(lambda: not pid_alive(state["pid"]) and not port_open(state["port"]), 10)


def test_foreign_errors_are_loud_and_the_horizon_truncates():
    env = make(ENV_ID, max_turns=2)
    try:
        env.reset(seed=2)
        with pytest.raises(OpenEnvError, match="asked to raise"):
            env.step(Action("raise"))  # products_env raises on this reply
        _, _, terminated, truncated, info = env.step(Action("no number"))
        assert (terminated, truncated) == (False, False)
        _, _, terminated, truncated, info = env.step(Action("1"))
        assert (terminated, truncated, info["openenv_outcome"]) == (False, True, 0.0)
    finally:
        env.close()


def test_same_seed_same_task_and_the_oracle_wins():
    env = make(ENV_ID)
    try:
        first = [env.reset(seed=s)[0] for s in (0, 1, 0)]
        assert first[0] == first[2] and first[0] != first[1]
        _, components = env.rubric().score(play_oracle(env, seed=4, max_turns=3))
        assert components["openenv_outcome"] == 1.0 and components["openenv_return"] == 1.0
    finally:
        env.close()


def test_a_module_that_is_no_openenv_env_fails_to_start_with_the_reason():
    env = make("openenv/no_such_openenv_module-v0")
    with pytest.raises(EnvUnavailableError, match="no_such_openenv_module"):
        env.reset(seed=0)
    assert env.server.process is None  # stopped and forgotten
    env.close()


def test_ids_mapping_helpers_and_missing_package(monkeypatch):
    with pytest.raises(UnknownEnvError, match="openenv/<module>-v0"):
        make("openenv/products_env-v1")
    with pytest.raises(ValueError, match="max_turns"):
        OpenEnvEnv("products_env", max_turns=0)
    # an env without a registered oracle trains without warm-up and guidance
    assert resolve_openenv_id("openenv/other_env-v0").recipe_overrides["warmup.enabled"] is False
    assert "warmup.enabled" not in resolve_openenv_id(ENV_ID).recipe_overrides
    assert _action_field({"properties": {"metadata": {}, "code": {"type": "string"}}}) == "code"
    with pytest.raises(UnknownEnvError, match="action_field"):
        _action_field({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
    assert render_observation({"prompt": "hi", "tries_left": 2, "done": False}) == "hi"
    assert render_observation({"x": 1, "y": [2]}) == "x: 1\ny: [2]"
    monkeypatch.setitem(sys.modules, "openenv.core.generic_client", None)
    with pytest.raises(EnvUnavailableError, match=r"pip install 'agentic-rl\[openenv\]'"):
        make(ENV_ID)


def test_an_mcp_env_maps_tools_to_tool_calls_and_audits_them(tmp_path):
    audit = tmp_path / "audit.jsonl"
    env = make("openenv/products_tools_env-v0", audit_path=str(audit), run_id="run-1")
    try:
        obs, _ = env.reset(seed=3, options={"trajectory_id": "t-1"})
        assert env.mcp and [m.role for m in obs.messages] == ["system", "user"]
        assert [t["name"] for t in obs.tools] == ["multiply", "submit"]
        assert obs.tools[0]["parameters"]["required"] == ["a", "b"]
        assert '"name": "submit"' in obs.messages[0].content  # schemas in the system prompt
        assert obs.messages[1].content.startswith("What is 254 * 86?")
        obs, reward, terminated, _, info = env.step(Action("I will just answer 21844"))
        assert (reward, terminated, info["tool_calls"]) == (0.0, False, 0)
        assert "tool calls only" in obs.messages[0].content
        calls = (
            ToolCall("multiply", {"a": 254, "b": 86}, id="c0"),
            ToolCall("nope", {}, id="c1"),
            ToolCall("multiply", {"a": "x", "b": 2}, id="c2"),
        )
        bad = (ToolCallError('{"name": ', "malformed JSON"),)
        obs, reward, terminated, _, info = env.step(Action("x", calls, tool_call_errors=bad))
        by_id = {r.call_id: r for r in obs.tool_results}
        assert sorted(r.ok for r in obs.tool_results) == [False, False, False, True]
        assert by_id["c0"].content == "21844" and "unknown tool" in by_id["c1"].content
        assert [m.role for m in obs.messages] == ["tool"] * 4
        assert (reward, terminated, info["tool_errors"]) == (0.0, False, 3)
        assert info["openenv_calls"][0]["result"]["structured_content"] == {"result": 21844}
        last = (
            ToolCall("submit", {"answer": 21844}, id="c3"),
            ToolCall("multiply", {"a": 1, "b": 2}, id="c4"),
        )
        obs, reward, terminated, _, info = env.step(Action("x", last))
        assert (reward, terminated, info["openenv_outcome"]) == (1.0, True, 1.0)
        assert "not run: the episode ended" in obs.tool_results[1].content
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        assert {(r["run_id"], r["trajectory_id"]) for r in records} == {("run-1", "t-1")}
        assert {"c0", "c3", "c4"} <= {r["call_id"] for r in records}  # every call is audited
    finally:
        env.close()


def test_check_env_passes_on_the_mcp_env():
    report = check_env("openenv/products_tools_env-v0", seeds=range(1))
    assert "tool_schemas" in report.passed and report.oracle_success == 1.0


def test_gymnasium_check_env_passes():
    assert gymnasium_id(ENV_ID) in register_family_in_gymnasium("openenv/")
    env = gymnasium.make(gymnasium_id(ENV_ID))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gym_check_env(env.unwrapped)
        assert [str(w.message) for w in caught] == []
    finally:
        env.close()


def test_check_env_command_passes_with_the_oracle(capsys):
    assert main(["check-env", ENV_ID, "--seeds", "1"]) == 0
    assert "oracle success 100%" in capsys.readouterr().out


def test_train_two_rl_steps_on_openenv(tiny_model_dir, tmp_path):
    argv = ["train", "--env", ENV_ID]
    for item in [f"model.path='{tiny_model_dir}'", f"output_dir='{tmp_path}'", *TWO_STEP_SMOKE]:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)  # oracle demos
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0 and "rollout/reward/openenv_outcome" in r
