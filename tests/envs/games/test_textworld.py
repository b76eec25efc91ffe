"""textworld-v0: generated games, admissible commands, intermediate rewards, walkthrough oracle."""

from __future__ import annotations

import sys

import pytest

from agentic_rl.envs.games.textworld_env import TextWorldEnv, clean_feedback
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.types import Action

NO_TEXTWORLD = (
    "the 'textworld' extra is not installed: pip install -e '.[textworld]' (`make test` does)"
)

BANNER = r"""
                    ________  ________  __    __  ________
                   |        \|        \|  \  |  \|        \
                    \$$$$$$$$| $$$$$$$$| $$  | $$ \$$$$$$$$

Welcome to TextWorld! Find the key.

-= Kitchen =-
You are in a kitchen.

>                                                         -= Kitchen =-0/1
"""


def test_clean_feedback_drops_banner_prompt_and_restart_line():
    assert (
        clean_feedback(BANNER)
        == "Welcome to TextWorld! Find the key.\n\n-= Kitchen =-\nYou are in a kitchen."
    )
    assert (
        clean_feedback(
            "You win.\n\n\n\nWould you like to RESTART, RESTORE a saved game, QUIT or UNDO"
        )
        == "You win."
    )


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(EnvUnavailableError, match=r"agentic-rl\[textworld\]"):
        TextWorldEnv()


def test_bad_sizes():
    pytest.importorskip("textworld", reason=NO_TEXTWORLD)
    with pytest.raises(ValueError, match="must be >= 1"):
        TextWorldEnv(quest_length=0)


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory):
    pytest.importorskip("textworld", reason=NO_TEXTWORLD)
    return tmp_path_factory.mktemp("tw-games")


def test_textworld_passes_check_env(games_dir):
    from agentic_rl.envs.checker import check_env

    report = check_env(
        "textworld-v0", seeds=range(2), env_kwargs={"games_dir": str(games_dir)}, max_turns=30
    )
    assert "oracle" in report.passed and report.oracle_success == 1.0
    assert len(list(games_dir.glob("*.z8"))) == 2  # one generated game per seed, cached


def test_walkthrough_rewards_sum_to_the_max_score(games_dir):
    env = TextWorldEnv(games_dir=str(games_dir))
    _, info = env.reset(seed=0)
    rewards = []
    while True:
        obs, reward, terminated, truncated, step_info = env.step(Action(env.oracle_reply()))
        rewards.append(reward)
        assert obs.process_reward == 0.0 and step_info["valid_action"]
        if terminated or truncated:
            break
    assert terminated and step_info["won"] and sum(rewards) == info["max_score"] > 0
    assert "Admissible commands" not in obs.messages[0].content  # none after the end


def test_invalid_command_never_reaches_the_game(games_dir):
    env = TextWorldEnv(games_dir=str(games_dir), max_steps=2)
    first, _ = env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(Action("<action>fly to the moon</action>"))
    assert (
        not info["valid_action"] and obs.process_reward == -1.0 and reward == 0.0 and not terminated
    )
    text = obs.messages[0].content
    assert text.startswith("Invalid action") and "Admissible commands:" in text
    _, _, terminated, truncated, _ = env.step(Action("xyzzy"))
    assert truncated and not terminated  # the horizon of 2 turns
    assert env.reset(seed=1)[0] == first  # same seed, same game and opening
    env.close()
    env.close()
