"""Replay: a real calculator-v0 recording replays with zero divergences; a deliberately
non-deterministic env is caught at its first divergent turn; rescoring and policy drift."""

from __future__ import annotations

import random

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.base import Env
from agentic_rl.rewards import Rubric
from agentic_rl.trajectories import open_run_store
from agentic_rl.trajectories.replay import logprob_drift, replay, rescore
from agentic_rl.types import Action, Message, Observation
from tests.markers import env_params


class FlakyEnv(Env):
    """Turn 0 answers "ok"; turn 1 answers with unseeded randomness (the bug replay must find)."""

    def reset(self, seed=None, options=None):
        self.turn = 0
        return Observation((Message("system", "s"), Message("user", f"task {seed}"))), {}

    def step(self, action: Action):
        self.turn += 1
        if self.turn >= 3:
            return Observation(()), 1.0, True, False, {}
        text = "ok" if self.turn == 1 else f"noise {random.SystemRandom().random()}"
        return Observation((Message("tool", text),)), 0.0, False, False, {}

    def rubric(self, weights=None):
        return Rubric([], weights) if weights is not None else Rubric([])


def _record_flaky(chat):
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes

    env = FlakyEnv()
    env.env_id = "flaky-v0"
    [traj] = run_episodes(
        ScriptedPolicy(chat, lambda i, c: "step"),
        chat,
        [env],
        [7],
        ["g"],
        RolloutConfig(max_turns=5),
    )
    return traj


def test_recorded_calculator_run_replays_without_divergence(recorded_run):
    trajectories = list(open_run_store(recorded_run).read_trajectories())
    assert len(trajectories) == 6 and all(
        len(t.turns) == 2 for t in trajectories
    )  # call, then answer
    for traj in trajectories:
        result = replay(traj, make(traj.env_id))
        assert result.divergences == () and result.first_divergent_turn is None
        assert result.turns_replayed == len(traj.turns)


def test_non_deterministic_env_reports_first_divergent_turn(chat):
    traj = _record_flaky(chat)
    assert len(traj.turns) == 3 and traj.terminated
    result = replay(traj, FlakyEnv())
    assert result.first_divergent_turn == 1  # turn 0 ("ok") matches; turn 1's noise does not
    assert result.turns_replayed == 2
    [d] = result.divergences
    assert (
        d.what == "observation"
        and d.recorded[0][1].startswith("noise ")
        and d.recorded != d.replayed
    )


def test_changed_reset_and_raising_env_are_divergences(recorded_run):
    traj = next(open_run_store(recorded_run).read_trajectories())
    other_seed = replay(
        traj.__class__(**{**traj.__dict__, "seed": traj.seed + 12345}), make("calculator-v0")
    )
    assert other_seed.first_divergent_turn == -1 and other_seed.divergences[0].what == "observation"

    class Broken(FlakyEnv):
        def step(self, action):
            raise RuntimeError("boom")

    result = replay(traj, Broken())
    assert result.first_divergent_turn in (-1, 0)


def test_rescore_with_same_and_changed_rubric(recorded_run):
    from agentic_rl.rewards import RewardWeights

    store = open_run_store(recorded_run)
    traj = next(store.read_trajectories(phase="rl"))
    same = rescore(traj, make("calculator-v0").rubric())
    assert same.changed == () and same.reward_now == pytest.approx(traj.reward)
    moved = rescore(traj, make("calculator-v0").rubric(RewardWeights(outcome=2.0)))
    assert "total" in moved.changed and moved.reward_now != pytest.approx(traj.reward)


def test_logprob_drift_by_hand(make_trajectory):
    traj = make_trajectory()  # sampled logprobs: -0.123456789012345, -1e-9, -0.5, -2.25
    d = logprob_drift(traj, [-0.123456789012345, -1e-9, -1.0, -2.0])
    # differences: 0, 0, -0.5, +0.25 -> mean |Δ| = 0.75 / 4 = 0.1875, max 0.5, mean Δ = -0.0625
    assert d.num_tokens == 4
    assert d.mean_abs == pytest.approx(0.1875) and d.max_abs == pytest.approx(0.5)
    assert d.mean_diff == pytest.approx(-0.0625)
    with pytest.raises(ValueError, match="3 recomputed logprobs for 4 sampled tokens"):
        logprob_drift(traj, [0.0, 0.0, 0.0])


def _builtin_env_ids():
    from agentic_rl.envs import registered

    return [spec.env_id for spec in registered()]


@pytest.mark.parametrize("env_id", env_params(_builtin_env_ids()))
def test_every_builtin_env_replays_its_oracle_run_without_divergence(env_id, chat):
    """Record a real episode of each built-in env (its oracle through the rollout engine, or a
    fixed reply when it has none) and replay it in a fresh instance: zero divergences."""
    from agentic_rl.errors import EnvUnavailableError
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes

    try:
        env = make(env_id)
    except EnvUnavailableError as exc:
        pytest.skip(str(exc))
    policy = ScriptedPolicy(chat, lambda i, _c: env.oracle_reply() or "I do not know.")
    [traj] = run_episodes(
        policy,
        chat,
        [env],
        [3],
        ["g"],
        RolloutConfig(max_turns=6, max_new_tokens=256, max_total_tokens=8192),
    )
    env.close()
    assert traj.turns and traj.stop_reason.value != "error", traj.failure
    fresh = make(env_id)
    try:
        result = replay(traj, fresh)
    finally:
        fresh.close()
    assert result.divergences == (), result.divergences
    assert result.turns_replayed == len(traj.turns)


def test_a_reply_cut_by_the_token_budget_replays_without_being_stepped(chat):
    """The cut last turn was never given to the env: replay does not step it either."""
    import json

    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes
    from agentic_rl.types import StopReason

    env = make("calculator-v0")
    _, info = env.reset(seed=3)
    call = json.dumps({"name": "calculator", "arguments": {"expression": info["expression"]}})
    replies = [f"<tool_call>{call}</tool_call>", "So the answer is, after a long explanation, " * 4]
    policy = ScriptedPolicy(chat, lambda i, ctx: replies[ctx.count("<|im_start|>assistant") - 1])
    [traj] = run_episodes(
        policy, chat, [env], [3], ["g"], RolloutConfig(max_turns=4, max_new_tokens=40)
    )
    assert traj.stop_reason == StopReason.MAX_NEW_TOKENS and traj.turns[-1].truncated
    result = replay(traj, make("calculator-v0"))
    assert result.divergences == () and result.turns_replayed == 2
