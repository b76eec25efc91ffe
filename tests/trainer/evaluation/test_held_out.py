"""Evaluation: success, per-level aggregation and failed episodes, by hand and through rollouts."""

from __future__ import annotations

import math

import pytest

from agentic_rl.envs.calculator.tasks import make_task
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rewards import RewardWeights
from agentic_rl.rollout import RolloutConfig
from agentic_rl.trainer.evaluation.held_out import evaluate, is_success, summarize
from agentic_rl.types import StopReason, Trajectory


def _traj(level, reward, outcome, failed=False, generated=4) -> Trajectory:
    info = {"level": level}
    comps = {} if failed else {"outcome": outcome, "correct_answer": outcome, "cost": 0.01}
    return Trajectory(
        "x-v0",
        0,
        "g",
        "t",
        (),
        (),
        (1,) * generated,
        (1,) * generated,
        (0.0,) * generated,
        StopReason.TERMINATED,
        reward=None if failed else reward,
        reward_components=comps,
        info=info,
        failure="boom" if failed else None,
    )


def test_is_success():
    assert is_success(_traj("a", 1.0, 1.0))
    assert not is_success(_traj("a", 0.0, 0.0))
    assert not is_success(_traj("a", 0.0, 0.0, failed=True))


def test_summarize_by_hand():
    trajs = [
        _traj("direct", 0.99, 1.0, generated=2),
        _traj("direct", -0.01, 0.0, generated=4),
        _traj("word", 0.99, 1.0, generated=6),
        _traj("word", None, None, failed=True, generated=8),
    ]
    m = summarize(trajs, "eval")
    assert m["eval/success"] == 0.5  # 2 of 4 (the failed one counts as unsuccessful)
    assert m["eval/failed"] == 0.25
    assert m["eval/success/direct"] == 0.5 and m["eval/success/word"] == 0.5
    assert math.isclose(m["eval/reward_total"], (0.99 - 0.01 + 0.99) / 3)  # over the 3 scored ones
    assert math.isclose(m["eval/reward/outcome"], 2 / 3) and math.isclose(
        m["eval/reward/cost"], 0.01
    )
    assert m["eval/generated_tokens"] == 5.0  # (2 + 4 + 6 + 8) / 4
    assert m["eval/turns"] == 0.0 and m["eval/tool_calls"] == 0.0


def test_summarize_empty():
    m = summarize([], "x")
    assert m["x/success"] == 0.0 and "x/reward_total" not in m


def _answering(chat, seeds, offset):
    """Answer each task directly (no tool) with its reference answer + offset."""
    by_question = {make_task(s).question: make_task(s).answer for s in seeds}

    def reply(_i, context):
        question = context.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
        return f"<answer>{by_question[question] + offset}</answer>"

    return ScriptedPolicy(chat, reply)


@pytest.mark.parametrize("offset, success", [(0, 1.0), (7, 0.0)])
def test_evaluate_through_rollouts(chat, offset, success):
    seeds = range(100, 105)
    metrics, trajs = evaluate(
        _answering(chat, seeds, offset),
        chat,
        "calculator-v0",
        {},
        seeds,
        RolloutConfig(),
        RewardWeights(),
        batch_size=2,
    )  # 3 chunks: 2 + 2 + 1
    assert [t.seed for t in trajs] == list(seeds)
    assert [t.group_id for t in trajs] == [f"eval-{s}" for s in seeds]
    assert metrics["eval/success"] == success
    assert metrics["eval/turns"] == 1.0 and metrics["eval/tool_calls"] == 0.0
    assert {k for k in metrics if k.startswith("eval/success/")} == {
        "eval/success/direct",
        "eval/success/multi_op",
        "eval/success/word",
    }
    # no tool call -> computed_calls 0; an answer without a call is grounded only when correct
    assert (
        metrics["eval/reward/grounded_answer"] == success
        and metrics["eval/reward/computed_calls"] == 0.0
    )
