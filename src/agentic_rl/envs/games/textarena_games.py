"""The TextArena single-player games we register, their settings, and their oracles.

Each oracle reads the game's internal state (they are reference policies for demonstrations and
the environment checker, not fair players) and returns the next move in the game's own bracket
syntax:

* GuessTheNumber — binary search on the interval left by the higher/lower hints.
* TowerOfHanoi — the optimal recursive plan, computed from the current position.
* Mastermind — the first code consistent with every feedback so far (no privileged reads).
* Minesweeper — privileged: an unrevealed cell that holds no mine (the centre on the first move).
* Sudoku — privileged: the first empty cell and its value in the hidden solution.
* Countdown — the seeded generator builds the target from a known sequence of operations; the
  oracle replays it.

Wordle and Hangman need NLTK corpora (``words``; Wordle also the ``averaged_perceptron_tagger_eng``
tagger) that TextArena downloads when the game module is imported; offline they cannot run.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: oracle(textarena_env, game_data) -> next move, e.g. "[A C]"; None when it has no move
Oracle = Callable[[Any, dict[str, Any]], "str | None"]
#: seed -> (constructor kwargs, game data the oracle may use)
Generator = Callable[[int], "tuple[dict[str, Any], dict[str, Any]]"]

#: TextArena game -> registered id
TEXTARENA_IDS = {
    "GuessTheNumber": "ta-guessthenumber-v0",
    "TowerOfHanoi": "ta-towerofhanoi-v0",
    "Mastermind": "ta-mastermind-v0",
    "Minesweeper": "ta-minesweeper-v0",
    "Sudoku": "ta-sudoku-v0",
    "Countdown": "ta-countdown-v0",
    "Wordle": "ta-wordle-v0",
    "Hangman": "ta-hangman-v0",
}


@dataclass(frozen=True)
class TextArenaGame:
    """How to build and play one TextArena game.

    Attributes:
        title: the game's name in the instructions.
        entry_point: ``module:Class`` of the TextArena env.
        kwargs: constructor arguments.
        max_steps: our horizon in turns (TextArena's own turn limit also ends the game).
        example: an example move shown in the instructions.
        oracle: reference policy, or None.
        generator: per-seed constructor kwargs (for games that draw their puzzle in ``__init__``).
        nltk_resources: NLTK resources that must be installed locally (paths for ``nltk.data.find``).
        token_budget: ``rollout.max_total_tokens`` of ``agentic-rl train --env`` (a full episode).
    """

    title: str
    entry_point: str
    kwargs: dict[str, Any]
    max_steps: int
    example: str
    oracle: Oracle | None = None
    generator: Generator | None = None
    nltk_resources: tuple[str, ...] = field(default=())
    token_budget: int = 4096

    @property
    def recipe_overrides(self) -> dict[str, Any]:
        """Rollout budgets of ``agentic-rl train --env`` for this game."""
        return {
            "rollout.max_turns": self.max_steps,
            "rollout.max_new_tokens": 32,
            "rollout.max_total_tokens": self.token_budget,
        }


def guess_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """Binary search: the middle of the interval the hints leave."""
    lo, hi = env.min_number, env.max_number
    for guess, hint in env.state.game_state["guess_history"]:
        if hint == "higher":
            lo = max(lo, guess + 1)
        else:
            hi = min(hi, guess - 1)
    return f"[{(lo + hi) // 2}]" if lo <= hi else None


def _hanoi_move(pos: dict[int, str], disk: int, target: str) -> tuple[str, str] | None:
    """Next move of the optimal plan that puts disks 1..disk on ``target`` (pos: disk -> peg)."""
    if disk == 0:
        return None
    if pos[disk] == target:
        return _hanoi_move(pos, disk - 1, target)
    spare = ({"A", "B", "C"} - {pos[disk], target}).pop()
    return _hanoi_move(pos, disk - 1, spare) or (pos[disk], target)


def hanoi_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """The optimal next move from the current position (2^n − 1 moves from the start)."""
    towers = env.state.game_state["towers"]
    pos = {d: peg for peg, disks in towers.items() for d in disks}
    move = _hanoi_move(pos, env.num_disks, "C")
    return None if move is None else f"[{move[0]} {move[1]}]"


def mastermind_feedback(code: tuple[int, ...], guess: tuple[int, ...]) -> tuple[int, int]:
    """(black, white) pegs: black = right digit, right place; white = right digit, wrong place."""
    black = sum(c == g for c, g in zip(code, guess))
    common = sum(min(code.count(d), guess.count(d)) for d in set(guess))
    return black, common - black


def mastermind_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """The first code (lexicographic) consistent with all feedback so far."""
    gs = env.state.game_state
    digits = range(1, gs["num_numbers"] + 1)
    codes = (
        itertools.product(digits, repeat=gs["code_length"])
        if gs["duplicate_numbers"]
        else itertools.permutations(digits, gs["code_length"])
    )
    history = [(tuple(h["guess"]), (h["black"], h["white"])) for h in gs["history"]]
    for code in codes:
        if all(mastermind_feedback(code, g) == fb for g, fb in history):
            return "[" + " ".join(map(str, code)) + "]"
    return None


def minesweeper_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """Privileged: the centre on the first move, then the first unrevealed cell with no mine."""
    if env.first_move:
        return f"[{env.rows // 2} {env.cols // 2}]"
    for r in range(env.rows):
        for c in range(env.cols):
            if not env.revealed[r][c] and env.grid[r][c] != -1:
                return f"[{r} {c}]"
    return None


def sudoku_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """Privileged: the first empty cell (1-based row, column) and its value in the solution."""
    board = env.state.game_state["board"]
    for r in range(9):
        for c in range(9):
            if board[r][c] == 0:
                return f"[{r + 1} {c + 1} {env.full_grid[r][c]}]"
    return None


_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def countdown_generator(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Six numbers (two large, four small) and a target in [100, 999] reachable by a known plan.

    The plan combines random pairs with +, −, × (subtracting the smaller from the larger) until
    an intermediate result lands in [100, 999]; that result is the target. Returns
    ``({"numbers": ..., "target": ...}, {"plan": [(a, b, op), ...]})``.
    """
    rng = random.Random(seed)
    while True:
        numbers = rng.sample([25, 50, 75, 100], 2) + rng.sample(list(range(1, 11)) * 2, 4)
        pool, plan = numbers[:], []
        while len(pool) > 1:
            a, b = rng.sample(pool, 2)
            a, b = max(a, b), min(a, b)
            op = rng.choice("+-*")
            result = _OPS[op](a, b)
            if result <= 0 or result > 100_000:
                continue
            pool.remove(a)
            pool.remove(b)
            pool.append(result)
            plan.append((a, b, op))
            if 100 <= result <= 999:
                return {"numbers": numbers, "target": result}, {"plan": plan}


def countdown_oracle(env: Any, data: dict[str, Any]) -> str | None:
    """Replay the generator's plan: the next step whose two operands are on the board."""
    numbers = list(env.numbers)
    done = len(env.move_history)
    plan = data.get("plan", [])
    if done >= len(plan):
        return None
    a, b, op = plan[done]
    if a not in numbers:
        return None
    i = numbers.index(a)
    rest = [k for k, v in enumerate(numbers) if v == b and k != i]
    return f"[{i} {rest[0]} {op}]" if rest else None


GAMES: dict[str, TextArenaGame] = {
    "GuessTheNumber": TextArenaGame(
        "Guess The Number",
        "textarena.envs.GuessTheNumber.env:GuessTheNumberEnv",
        {"min_number": 1, "max_number": 20, "max_turns": 10},
        12,
        "[10]",
        guess_oracle,
        token_budget=2048,
    ),
    "TowerOfHanoi": TextArenaGame(
        "Tower of Hanoi",
        "textarena.envs.TowerOfHanoi.env:TowerOfHanoiEnv",
        {"num_disks": 3, "max_turns": 14},
        16,
        "[A C]",
        hanoi_oracle,
        token_budget=2048,
    ),
    "Mastermind": TextArenaGame(
        "Mastermind",
        "textarena.envs.Mastermind.env:MastermindEnv",
        {"code_length": 4, "num_numbers": 6, "max_turns": 20, "duplicate_numbers": False},
        22,
        "[1 2 3 4]",
        mastermind_oracle,
    ),
    "Minesweeper": TextArenaGame(
        "Minesweeper",
        "textarena.envs.Minesweeper.env:MinesweeperEnv",
        {"rows": 5, "cols": 5, "num_mines": 5, "max_turns": 30},
        32,
        "[2 2]",
        minesweeper_oracle,
    ),
    "Sudoku": TextArenaGame(
        "Sudoku",
        "textarena.envs.Sudoku.env:SudokuEnv",
        {"clues": 75, "max_turns": 30},
        32,
        "[1 3 5]",
        sudoku_oracle,
        token_budget=8192,
    ),
    "Countdown": TextArenaGame(
        "Countdown",
        "textarena.envs.Countdown.env:CountdownEnv",
        {"max_turns": 12},
        14,
        "[0 2 *]",
        countdown_oracle,
        countdown_generator,
    ),
    "Wordle": TextArenaGame(
        "Wordle",
        "textarena.envs.Wordle.env:WordleEnv",
        {"hardcore": False, "word_length": 5, "num_guesses": 6},
        8,
        "[crane]",
        nltk_resources=("corpora/words", "taggers/averaged_perceptron_tagger_eng"),
    ),
    "Hangman": TextArenaGame(
        "Hangman",
        "textarena.envs.Hangman.env:HangmanEnv",
        {"hardcore": False},
        30,
        "[e]",
        nltk_resources=("corpora/words",),
    ),
}
