"""``train --agent``: the recipe trains an agent program through the policy server (tiny model).

The agent is examples/calculator_agent.py, a plain ``openai``-client tool loop; its RL rollouts
and held-out evaluations are its own runs against the run's policy server.
"""

from __future__ import annotations

import json
import math

import pytest

from agentic_rl.cli.main import main
from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.recipe import train, validate
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from tests.recipe_settings import TWO_STEP_SMOKE

pytest.importorskip("fastapi", reason="agent runs need the 'serve' extra")
pytest.importorskip("openai", reason="the example agent uses the openai client")

AGENT = "examples.calculator_agent:run"


def test_two_step_agent_run_records_trains_evaluates_and_reports(tiny_model_dir, tmp_path, capsys):
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            *TWO_STEP_SMOKE,
            "optim.skip_zero_advantage=false",  # the random model earns no reward: train anyway
            f"agent.function='{AGENT}'",
            f"output_dir='{tmp_path}'",
        ],
    )
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) and r["rollout/agent_timeout"] == 0 for r in rl)
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["warmup", "final"]
    records = list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    assert len(records) == 2 * 2 * 2  # steps × tasks × G
    for rec in records:
        assert rec["env_id"] == f"agent:{AGENT}" and not rec["failure"]
        assert rec["reward"] == 0.0 and sum(rec["loss_mask"]) > 0
        assert rec["sampling"]["temperature"] == config.rollout.temperature
    groups = {}
    for rec in records:
        groups.setdefault(rec["group_id"], []).append(rec)
    assert all(len(g) == 2 for g in groups.values())  # G = 2 runs of each task form a group
    evals = list(TrajectoryStore(run_dir / "trajectories").read(phase="eval"))
    assert len(evals) == 2 * 2 and all(r["sampling"]["greedy"] for r in evals)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["success"]) == {"warmup", "final"}
    assert (run_dir / "report.html").is_file()
    # the viewer shows the agent's trajectories; replay runs the env ones and says which it cannot
    assert main(["view", str(run_dir)]) == 0 and AGENT in (run_dir / "view.html").read_text()
    assert main(["replay", str(run_dir), "--phase", "rl", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["not_replayable"] == summary["trajectories"] == 8 and summary["diverged"] == 0


def test_a_wrong_agent_fails_before_any_work(tiny_model_dir, tmp_path):
    for spec, needle in (
        ("no_such_module:run", "cannot import no_such_module"),
        ("examples.calculator_agent:nope", "has no function 'nope'"),
    ):
        config = load_config(
            None,
            [
                f"model.path='{tiny_model_dir}'",
                f"agent.function='{spec}'",
                f"output_dir='{tmp_path}'",
            ],
        )
        with pytest.raises(ConfigError, match=needle):
            validate(config)
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            f"agent.function='{AGENT}'",
            "algorithm.max_off_policy_steps=1",
        ],
    )
    with pytest.raises(ConfigError, match="not supported with agents"):
        validate(config)
    assert not list(tmp_path.iterdir())  # nothing was written
