"""TextArena single-player games: oracles, determinism, invalid moves, RNG isolation, missing assets."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.games import TEXTARENA_IDS
from agentic_rl.envs.games.textarena_games import countdown_generator, mastermind_feedback
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.types import Action

pytest.importorskip("textarena")

OFFLINE_GAMES = [
    "GuessTheNumber",
    "TowerOfHanoi",
    "Mastermind",
    "Minesweeper",
    "Sudoku",
    "Countdown",
]
OFFLINE_IDS = [TEXTARENA_IDS[g] for g in OFFLINE_GAMES]


def _play(env, seed: int, reply=lambda env: f"My move: {env.oracle_reply()}"):
    obs, _ = env.reset(seed=seed)
    steps = []
    while True:
        step = env.step(Action(reply(env)))
        steps.append(step)
        if step[2] or step[3]:
            return obs, steps


@pytest.mark.parametrize("env_id", OFFLINE_IDS)
def test_oracle_wins(env_id):
    env = make(env_id)
    for seed in range(3):
        _, steps = _play(env, seed)
        *_, (obs, reward, terminated, truncated, info) = steps
        assert terminated and info["won"] and reward == 1.0 and obs.process_reward == 0.0, (
            env_id,
            seed,
            obs,
        )
        assert all(s[4]["valid_action"] for s in steps)
        assert all(s[1] == 0.0 for s in steps[:-1])  # TextArena scores only the end
        assert "The game is over" in obs.messages[0].content


def test_tower_of_hanoi_oracle_is_optimal():
    _, steps = _play(make("ta-towerofhanoi-v0"), 0)
    assert len(steps) == 2**3 - 1


@pytest.mark.parametrize("env_id", OFFLINE_IDS)
def test_same_seed_same_game_even_when_interleaved(env_id):
    a, b, other = make(env_id), make(env_id), make(env_id)
    obs_a, _ = a.reset(seed=11)
    other.reset(seed=12)  # another episode drawing from TextArena's global RNG in between
    obs_b, _ = b.reset(seed=11)
    assert obs_a == obs_b
    for _ in range(3):
        move_a, move_b = a.oracle_reply(), b.oracle_reply()
        assert move_a == move_b
        other.step(Action(other.oracle_reply() or "[0]"))
        step_a, step_b = a.step(Action(move_a)), b.step(Action(move_b))
        assert step_a == step_b
        if step_a[2] or step_a[3] or other.episode.done:
            break


def test_seeds_give_different_games():
    env = make("ta-countdown-v0")
    boards = {env.reset(seed=s)[0].messages[1].content for s in range(5)}
    assert len(boards) == 5


def test_callers_global_random_state_is_untouched():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    env = make("ta-guessthenumber-v0")
    env.reset(seed=5)
    env.step(Action("[10]"))
    assert random.random() == expected


@pytest.mark.parametrize("env_id", OFFLINE_IDS)
def test_invalid_moves_never_crash(env_id):
    env = make(env_id)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step(Action("I am not sure what to do."))
    assert (
        info["valid_action"] is False
        and not terminated
        and reward == 0.0
        and obs.process_reward == -1.0
    )
    assert "invalid move" in obs.messages[0].content.lower()
    # a second invalid move in a row ends the game (TextArena's rule), with a score in [0, 1)
    obs, reward, terminated, truncated, info = env.step(Action("[[[ ]]] \x00 [-1 x]"))
    assert terminated and info["valid_action"] is False and not info["won"] and 0.0 <= reward < 1.0


def test_horizon_truncates():
    env = make("ta-towerofhanoi-v0", max_steps=2)  # the optimal solution needs 7 moves
    _, steps = _play(env, 0)
    assert len(steps) == 2 and not steps[-1][2] and steps[-1][3]
    assert "turn limit" in steps[-1][0].messages[0].content


def test_mastermind_feedback_by_hand():
    # code 1 2 3 4, guess 1 3 2 6: 1 in place (black); 2 and 3 present elsewhere (white)
    assert mastermind_feedback((1, 2, 3, 4), (1, 3, 2, 6)) == (1, 2)
    assert mastermind_feedback((1, 1, 2, 2), (2, 1, 1, 1)) == (1, 2)


def test_countdown_generator_plan_reaches_the_target():
    for seed in range(20):
        kwargs, data = countdown_generator(seed)
        pool = list(kwargs["numbers"])
        for a, b, op in data["plan"]:
            pool.remove(a)
            pool.remove(b)
            pool.append({"+": a + b, "-": a - b, "*": a * b}[op])
        assert pool[-1] == kwargs["target"] and 100 <= kwargs["target"] <= 999


def test_unknown_game_and_bad_horizon():
    from agentic_rl.envs.games import TextArenaEnv

    with pytest.raises(ValueError, match="unknown TextArena game"):
        TextArenaEnv("Chess")
    with pytest.raises(ValueError, match="max_steps"):
        TextArenaEnv("Sudoku", max_steps=0)


_OFFLINE_PROBE = textwrap.dedent("""
    import socket, sys, nltk
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in this test")
    socket.socket.connect = refuse
    socket.create_connection = refuse
    nltk.download = lambda *a, **k: attempts.append(("nltk.download", a)) or False
    nltk.data.path[:] = [sys.argv[2]]  # an empty data folder: the corpora are missing
    from agentic_rl.envs import make
    from agentic_rl.errors import EnvUnavailableError
    try:
        make(sys.argv[1])
    except EnvUnavailableError as exc:
        print("ERROR", exc)
    print("ATTEMPTS", len(attempts))
""")


@pytest.mark.parametrize(
    "env_id,resource",
    [("ta-wordle-v0", "averaged_perceptron_tagger_eng"), ("ta-hangman-v0", "words")],
)
def test_missing_corpus_fails_at_make_time_without_network(env_id, resource, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _OFFLINE_PROBE, env_id, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "ATTEMPTS 0"  # no socket connection, no download attempted
    assert len([line for line in lines if line.startswith("ERROR")]) == 1
    assert resource in lines[0] and "nltk.downloader" in lines[0]


def test_missing_textarena_package_is_a_clear_error(monkeypatch):
    from agentic_rl.envs.games import TextArenaEnv

    monkeypatch.setitem(sys.modules, "textarena", None)  # import textarena now raises ImportError
    with pytest.raises(EnvUnavailableError, match=r"agentic-rl\[games\]"):
        TextArenaEnv("Sudoku")


def test_a_game_that_raises_on_a_reply_is_an_invalid_move_not_a_crash():
    env = make("ta-sudoku-v0")
    env.reset(seed=0)

    def broken_step(move):
        raise IndexError("list index out of range")

    env._env.step = broken_step  # a TextArena bug triggered by an odd reply
    obs, reward, terminated, truncated, info = env.step(Action("[9 9 9 9]"))
    assert info["valid_action"] is False and info["game_error"].startswith("IndexError")
    assert reward == 0.0 and not terminated and "could not apply" in obs.messages[0].content
