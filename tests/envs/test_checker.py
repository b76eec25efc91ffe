"""check_env: calculator-v0 passes; one deliberately broken env per check fails with its name."""

from __future__ import annotations

import dataclasses
import random

import pytest

from agentic_rl.envs import CalculatorEnv, make
from agentic_rl.envs.checker import (
    CHECKS,
    EnvCheckError,
    check_env,
    play_oracle,
    tool_schema_problems,
)
from agentic_rl.errors import UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, Rubric
from agentic_rl.types import Message, Observation
from tests.markers import env_params


def test_calculator_passes_every_check():
    report = check_env("calculator-v0", seeds=range(4))
    assert report.passed == CHECKS
    assert report.oracle_success == 1.0
    assert report.seeds == (0, 1, 2, 3)


def test_accepts_an_instance_and_a_factory():
    assert check_env(CalculatorEnv(), seeds=[7]).oracle_success == 1.0
    assert check_env(lambda: CalculatorEnv(levels=("word",)), seeds=[1, 2]).passed == CHECKS


def test_unknown_id_and_empty_seeds_are_user_errors():
    with pytest.raises(UnknownEnvError, match="no-such-v0"):
        check_env("no-such-v0")
    with pytest.raises(ValueError, match="at least one seed"):
        check_env("calculator-v0", seeds=[])


def _failed(factory, seeds=(0, 1)) -> EnvCheckError:
    with pytest.raises(EnvCheckError) as info:
        check_env(factory, seeds=seeds)
    return info.value


def _checks(error: EnvCheckError) -> set[str]:
    return {f.check for f in error.failures}


def test_make_failure():
    def factory():
        raise RuntimeError("no disk")

    error = _failed(factory)
    assert _checks(error) == {"make"}
    assert "no disk" in str(error)


class NoStartGuard(CalculatorEnv):
    def step(self, action):
        if self.task is None:
            return Observation(()), 0.0, True, False, {}
        return super().step(action)


def test_step_before_reset_must_raise():
    error = _failed(NoStartGuard)
    assert _checks(error) == {"step_before_reset"}
    assert "EpisodeNotStartedError" in str(error)


class RandomTask(CalculatorEnv):
    def reset(self, seed=None, options=None):
        return super().reset(seed=random.randrange(10**9), options=options)


def test_same_seed_must_give_same_task():
    error = _failed(RandomTask)
    assert "reset_determinism" in _checks(error)
    assert "same seed gave different first observations" in str(error)


class BadRole(CalculatorEnv):
    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed, options)
        return Observation((Message("robot", obs.messages[1].content),), obs.tools), info


def test_observation_roles_are_checked():
    error = _failed(BadRole)
    assert _checks(error) == {"observation"}
    assert "role 'robot'" in str(error)


class BadSchema(CalculatorEnv):
    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed, options)
        tool = {**obs.tools[0], "parameters": {"type": "objekt", "properties": {}}}
        return Observation(obs.messages, (tool,)), info


def test_tool_schemas_must_be_valid_json_schema():
    error = _failed(BadSchema)
    assert _checks(error) == {"tool_schemas"}
    assert "not a valid JSON Schema" in str(error)


def test_tool_schema_problems_names_each_problem():
    good = {"name": "t", "description": "d", "parameters": {"type": "object", "properties": {}}}
    assert tool_schema_problems((good,)) == []
    assert "duplicate tool names: t" in tool_schema_problems((good, good))
    assert tool_schema_problems(
        ({"name": "u", "description": "d", "parameters": {"type": "string"}},)
    ) == ['tool \'u\': parameters must have "type": "object"']
    assert tool_schema_problems(({"description": "d", "parameters": {"type": "object"}},)) == [
        "tool 0 has no string 'name'"
    ]


class NanReward(CalculatorEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if terminated else reward, terminated, truncated, info


class SetInInfo(CalculatorEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "seen": {1, 2}}


def test_step_rewards_must_be_finite_and_info_serialisable():
    assert _checks(_failed(NanReward)) == {"step_return"}
    error = _failed(SetInInfo)
    assert _checks(error) == {"step_return"}
    assert "not JSON-serialisable" in str(error)


class WrongOracle(CalculatorEnv):
    def oracle_reply(self):
        reply = super().oracle_reply()
        return "<answer>-1</answer>" if reply and reply.startswith("<answer>") else reply


class SilentOracle(CalculatorEnv):
    def oracle_reply(self):
        return None


def test_oracle_must_reach_full_success():
    error = _failed(WrongOracle)
    assert _checks(error) == {"oracle"}
    assert "did not succeed" in str(error)
    assert "returned None" in str(_failed(SilentOracle))


class HalfOracle(CalculatorEnv):
    """Wrong on odd seeds: like an env whose outcome is partly chance."""

    def reset(self, seed=None, options=None):
        self.seed = seed
        return super().reset(seed, options)

    def oracle_reply(self):
        reply = super().oracle_reply()
        if reply and reply.startswith("<answer>") and self.seed % 2:
            return "<answer>-1</answer>"
        return reply


def test_oracle_success_floor_for_chance_envs():
    error = _failed(HalfOracle, seeds=range(4))
    assert "did not succeed on seed 1" in str(error) and "success 50%, needs 100%" in str(error)
    assert check_env(HalfOracle, seeds=range(4), min_oracle_success=0.5).oracle_success == 0.5

    class Declared(HalfOracle):
        oracle_min_success = 0.5

    assert check_env(Declared, seeds=range(4)).oracle_success == 0.5


def test_declared_expected_success_is_tested_with_a_binomial_bound():
    class Declared95(HalfOracle):  # wins 4 of 8: P(X <= 4 | n=8, p=0.95) = 3.7e-4 < 1e-3
        oracle_expected_success = 0.95

    error = _failed(Declared95, seeds=range(8))
    assert _checks(error) == {"oracle"} and "far below its declared expected success 95%" in str(
        error
    )
    assert "P(X <= 4) = 0.00037" in str(error)

    class Declared80(HalfOracle):  # wins 2 of 4: P(X <= 2 | n=4, p=0.8) = 0.18, not improbable
        oracle_expected_success = 0.8

    report = check_env(Declared80, seeds=range(4))
    assert report.oracle_success == 0.5 and report.oracle_expected_success == 0.8

    class NotAProbability(CalculatorEnv):
        oracle_expected_success = 1.5

    assert "must be a probability in [0, 1], got 1.5" in str(
        _failed(NotAProbability, seeds=range(1))
    )


def test_success_tail_by_hand():
    from agentic_rl.envs.checker import success_tail

    assert success_tail([0.5, 0.5], 0) == pytest.approx(0.25)  # both fail: 0.5 · 0.5
    assert success_tail([0.2, 0.5], 0) == pytest.approx(0.4)  # 0.8 · 0.5
    assert success_tail([0.2, 0.5], 1) == pytest.approx(0.9)  # 1 − P(both) = 1 − 0.1
    assert success_tail([0.2, 0.5], 2) == pytest.approx(1.0)
    # binomial n=8, p=0.95: P(X<=4) = Σ_{k<=4} C(8,k) 0.95^k 0.05^(8-k) = 3.5635e-4 (k=4) + 1.5004e-5 (k=3) + 3.9e-7
    assert success_tail([0.95] * 8, 4) == pytest.approx(3.7175e-4, rel=1e-4)
    assert success_tail([1.0, 1.0], 1) == 0.0  # a sure success that failed


class NoEndGuard(CalculatorEnv):
    def step(self, action):
        self.restore_episode(dataclasses.replace(self.episode, done=False))
        return super().step(action)


def test_step_after_end_must_raise():
    error = _failed(NoEndGuard)
    assert _checks(error) == {"step_after_end"}
    assert "EpisodeEndedError" in str(error)


class SkewedRubric(Rubric):
    def score(self, trajectory):
        total, comps = super().score(trajectory)
        return total + 0.5, comps


class SkewedTotal(CalculatorEnv):
    def rubric(self, weights=CalculatorEnv.rubric.__defaults__[0]):
        return SkewedRubric(super().rubric(weights).functions, weights)


class NanComponent(CalculatorEnv):
    def rubric(self, weights=CalculatorEnv.rubric.__defaults__[0]):
        nan = RewardFunction("nan", RewardGroup.PROCESS, lambda t: float("nan"))
        return Rubric([*super().rubric(weights).functions, nan], weights)


def test_rubric_components_must_sum_to_the_total():
    error = _failed(SkewedTotal)
    assert _checks(error) == {"rubric"}
    assert "!= Σ sign·λ·group" in str(error)
    error = _failed(NanComponent)
    assert "rubric" in _checks(error)
    assert "returned nan" in str(error)


class DoubleClose(CalculatorEnv):
    closed = False

    def close(self):
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


def test_close_twice_is_safe():
    error = _failed(DoubleClose)
    assert _checks(error) == {"close"}


def test_every_failure_is_listed_in_one_error():
    class Broken(NoStartGuard, WrongOracle):
        pass

    error = _failed(Broken)
    assert _checks(error) == {"step_before_reset", "oracle"}
    assert str(error).count("\n  [") == len(error.failures)


def test_play_oracle_builds_a_scored_trajectory():
    env = make("calculator-v0")
    trajectory = play_oracle(env, 3)
    assert trajectory.terminated and len(trajectory.turns) == 2
    assert trajectory.messages[-1].role == "assistant"
    total, comps = env.rubric().score(trajectory)
    assert comps["correct_answer"] == 1.0
    env.close()


def test_cli_check_env(capsys):
    from agentic_rl.cli import main

    assert main(["check-env", "calculator-v0", "--seeds", "2"]) == 0
    assert "passed" in capsys.readouterr().out
    assert main(["check-env", "nope-v0"]) == 2
    assert "unknown env id 'nope-v0'" in capsys.readouterr().err


def _builtin_ids() -> list[str]:
    from agentic_rl.envs import registered

    return [spec.env_id for spec in registered()]


@pytest.mark.parametrize("env_id", env_params(_builtin_ids()))
def test_every_builtin_env_passes(env_id):
    from agentic_rl.errors import EnvUnavailableError

    try:
        make(env_id).close()
    except EnvUnavailableError as exc:  # e.g. Wordle and Hangman need NLTK corpora offline
        pytest.skip(str(exc))
    report = check_env(env_id, seeds=range(2))
    if report.oracle_expected_success is None or report.oracle_expected_success == 1.0:
        assert report.oracle_success == 1.0
    else:  # chance outcomes (slippery ice): optimal play still loses some episodes
        assert "oracle" in report.passed
