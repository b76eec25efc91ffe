"""The skyrl/<env>-v0 adapter on the real skyrl-gym package (skipped without it): SkyRL's own envs
score the replies, tasks are generated offline per seed, and the env obeys both checkers and
trains for two RL steps with the tiny random model."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import gymnasium
import pytest

try:
    import skyrl_gym  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the extra
    pytest.skip(
        f"skyrl-gym is not installed ({exc}): pip install -e '.[skyrl]' (`make test` does)",
        allow_module_level=True,
    )

from gymnasium.utils.env_checker import check_env as gym_check_env

from agentic_rl.cli.main import main
from agentic_rl.envs import make
from agentic_rl.envs.adapters.skyrl import SkyRLEnv, make_task
from agentic_rl.envs.checker import check_env
from agentic_rl.envs.oracle_success import play_oracle
from agentic_rl.envs.registry import gymnasium_id, register_family_in_gymnasium
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.types import Action
from tests.recipe_settings import TWO_STEP_SMOKE

IDS = ["skyrl/gsm8k-v0", "skyrl/gsm8k_multi_turn-v0", "skyrl/aime-v0"]


def test_reset_and_step_on_skyrl_gsm8k():
    env = make("skyrl/gsm8k-v0")
    obs, info = env.reset(seed=4)
    assert isinstance(env._env, skyrl_gym.envs.base_text_env.BaseTextEnv)  # SkyRL's own env
    assert [m.role for m in obs.messages] == ["user"] and '"####"' in obs.messages[0].content
    assert info["level"].startswith("ops-") and info["expected"] == make_task(4).answer
    obs, reward, terminated, truncated, info = env.step(Action(f"#### {info['expected']}"))
    assert (reward, terminated, truncated, obs.messages) == (1.0, True, False, ())
    assert info["skyrl_outcome"] == 1.0 and info["skyrl_error"] is None


def test_same_seed_same_task_and_seeds_differ():
    first = [make("skyrl/gsm8k-v0").reset(seed=s) for s in (0, 1, 2)]
    again = [make("skyrl/gsm8k-v0").reset(seed=s) for s in (0, 1, 2)]
    assert first == again
    assert len({obs.messages[0].content for obs, _ in first}) == 3


@pytest.mark.parametrize("env_id", IDS)
def test_correct_answer_scores_one_and_wrong_answer_zero(env_id):
    env = make(env_id)
    # the oracle's episode (the checker's own episode builder), scored by the env's rubric
    _, components = env.rubric().score(play_oracle(env, seed=7, max_turns=5))
    assert components["skyrl_outcome"] == 1.0 and components["skyrl_errors"] == 0.0
    _, info = env.reset(seed=7)
    right = env.oracle_reply()
    assert right is not None and right.endswith(info["expected"])
    wrong = right.replace(info["expected"], str(int(info["expected"]) + 1))
    _, reward, terminated, truncated, step_info = env.step(Action(wrong))
    if env_id == "skyrl/aime-v0":
        assert reward == -1.0  # SkyRL's aime scores -1; the outcome maps [-1, 1] to [0, 1]
    elif env_id == "skyrl/gsm8k_multi_turn-v0":
        assert reward == pytest.approx(0.2 / 5)  # SkyRL's format score per turn, not an outcome
    else:
        assert reward == 0.0
    assert step_info["skyrl_outcome"] == 0.0 and not truncated
    assert terminated == (env_id != "skyrl/gsm8k_multi_turn-v0")  # multi-turn: SkyRL asks again


def test_malformed_action_scores_zero_without_crash():
    env = make("skyrl/gsm8k-v0")
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(Action("\x00 no answer here ####"))
    assert (reward, terminated, info["skyrl_outcome"]) == (0.0, True, 0.0)
    multi = make("skyrl/gsm8k_multi_turn-v0", max_turns=2)
    multi.reset(seed=3)
    obs, reward, terminated, truncated, _ = multi.step(Action(""))
    assert (reward, terminated, truncated) == (0.0, False, False) and obs.messages  # a retry prompt
    _, _, terminated, truncated, info = multi.step(Action("garbage"))
    assert terminated and info["skyrl_outcome"] == 0.0  # SkyRL's own max_turns ended it


def test_skyrl_step_that_raises_ends_the_episode_with_an_error_observation():
    env = make("skyrl/gsm8k-v0")
    env.reset(seed=3)
    obs, reward, terminated, _, info = env.step(Action(None))  # type: ignore[arg-type]
    assert (reward, terminated) == (0.0, True) and info["skyrl_error"].startswith("TypeError")
    assert "could not process" in obs.messages[0].content


def test_unsupported_and_unknown_ids_say_why():
    with pytest.raises(UnknownEnvError, match="retrieval server"):
        make("skyrl/search-v0")
    with pytest.raises(UnknownEnvError, match="gsm8k"):
        make("skyrl/nope-v0")
    with pytest.raises(ValueError, match="max_turns"):
        SkyRLEnv("gsm8k", max_turns=0)


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "skyrl_gym", None)  # import skyrl_gym now raises ImportError
    with pytest.raises(EnvUnavailableError, match=r"pip install 'agentic-rl\[skyrl\]'"):
        make("skyrl/gsm8k-v0")


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_check_env_passes(env_id):
    assert gymnasium_id(env_id) in register_family_in_gymnasium("skyrl/")
    env = gymnasium.make(gymnasium_id(env_id))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("env_id", IDS)
def test_agentic_rl_check_env_passes(env_id):
    report = check_env(env_id, seeds=range(4))
    assert "oracle" in report.passed and report.oracle_success == 1.0


def test_check_env_command(capsys):
    assert main(["check-env", "skyrl/aime-v0", "--seeds", "2"]) == 0
    assert "oracle success 100%" in capsys.readouterr().out


def test_train_two_rl_steps_on_skyrl_gsm8k(tiny_model_dir, tmp_path):
    argv = ["train", "--env", "skyrl/gsm8k-v0"]
    for item in [
        f"model.path='{tiny_model_dir}'",
        f"output_dir='{tmp_path}'",
        *TWO_STEP_SMOKE,
    ]:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)  # oracle demos
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0 and "rollout/reward/skyrl_outcome" in r
