"""Every registered game env passes check_env (determinism, contract, oracle success, rubric)."""

from __future__ import annotations

import pytest

from agentic_rl.envs.checker import EnvCheckError, check_env
from agentic_rl.envs.games import TEXTARENA_IDS, FrozenLakeTextEnv
from agentic_rl.errors import EnvUnavailableError

DETERMINISTIC = [
    "frozenlake-v0",
    "taxi-v0",
    "cliffwalking-v0",
    "gym-v0",
    *(
        TEXTARENA_IDS[g]
        for g in (
            "GuessTheNumber",
            "TowerOfHanoi",
            "Mastermind",
            "Minesweeper",
            "Sudoku",
            "Countdown",
        )
    ),
]


@pytest.mark.parametrize("env_id", DETERMINISTIC)
def test_game_env_passes_check_env(env_id):
    if env_id.startswith("ta-"):
        pytest.importorskip("textarena")
    report = check_env(env_id, seeds=range(4), max_turns=40)
    assert "reset_determinism" in report.passed and "oracle" in report.passed


def test_slippery_frozenlake_passes_check_env_against_its_declared_success():
    # the optimal policy wins only some slippery episodes (it often runs out of its 16 turns sliding
    # about); the env declares the exact probability per start and the checker tests the wins against it
    report = check_env("frozenlake-slippery-v0", seeds=range(4), max_turns=40)
    assert "oracle" in report.passed and report.oracle_success < 1.0
    # seeds 0-3: 0.147, 0.321, 0.509, 0.509 (value-iteration policy, dynamic programming over 16 turns)
    assert report.oracle_expected_success == pytest.approx(
        (0.147 + 0.321 + 0.509 + 0.509) / 4, abs=1e-3
    )


class OverclaimingLake(FrozenLakeTextEnv):
    """Slippery ice, but it declares that its oracle wins 99% of episodes."""

    oracle_expected_success = 0.99

    def __init__(self):
        super().__init__(is_slippery=True)


def test_check_env_fails_an_oracle_far_below_its_declared_success():
    with pytest.raises(EnvCheckError) as caught:
        check_env(OverclaimingLake, seeds=range(8), max_turns=40)
    assert {f.check for f in caught.value.failures} == {"oracle"}
    assert "far below its declared expected success 99%" in str(caught.value)


@pytest.mark.parametrize("env_id", [TEXTARENA_IDS["Wordle"], TEXTARENA_IDS["Hangman"]])
def test_games_without_offline_assets_are_a_clear_error(env_id, monkeypatch):
    nltk = pytest.importorskip("nltk")
    monkeypatch.setattr(nltk.data, "path", [])  # no local NLTK data at all
    with pytest.raises(EnvUnavailableError, match="NLTK data"):
        check_env(env_id, seeds=range(1))


def test_cli_check_env_on_games(capsys, monkeypatch):
    from agentic_rl.cli import main

    assert (
        main(["check-env", "taxi-v0", "--seeds", "2"]) == 0
    )  # Taxi's oracle needs more than 10 turns
    assert "taxi-v0: passed 10 checks" in capsys.readouterr().out
    assert (
        main(["check-env", "frozenlake-slippery-v0", "--seeds", "2"]) == 0
    )  # chance outcomes, declared
    assert "frozenlake-slippery-v0: passed 10 checks" in capsys.readouterr().out
    nltk = pytest.importorskip("nltk")
    monkeypatch.setattr(nltk.data, "path", [])
    assert main(["check-env", "ta-hangman-v0"]) == 2  # a user-facing error line, no traceback
    assert "NLTK data" in capsys.readouterr().err


def test_train_env_overrides_give_games_their_budgets():
    from agentic_rl.cli.main import env_overrides

    sets = env_overrides("frozenlake-v0", [])
    assert (
        "warmup.env_kwargs={}" in sets and "rollout.max_turns=16" in sets
    )  # the oracle needs <= 16 turns
    assert "rollout.max_total_tokens=8192" in env_overrides("ta-sudoku-v0", [])
    assert "rollout.max_turns=5" in env_overrides(
        "taxi-v0", ["rollout.max_turns=5"]
    )  # the user's value wins
