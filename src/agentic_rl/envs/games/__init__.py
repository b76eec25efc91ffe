"""Text games as multi-turn POMDP environments: Gymnasium toy-text and TextArena games.

Registered ids (see each module's docstring for observation text, action syntax, reward and
horizon):

=========================  ==================================================================
``frozenlake-v0``          FrozenLake, not slippery, a random solvable 4×4 map per seed
``frozenlake-slippery-v0`` FrozenLake, slippery ice
``taxi-v0``                Taxi-v4
``cliffwalking-v0``        CliffWalking-v1
``gym-v0``                 any Gymnasium id with discrete actions (``env.kwargs.gym_id``)
``ta-guessthenumber-v0``   TextArena GuessTheNumber (1–20, 10 guesses)
``ta-towerofhanoi-v0``     TextArena TowerOfHanoi (3 disks)
``ta-mastermind-v0``       TextArena Mastermind (4 of 6 digits)
``ta-minesweeper-v0``      TextArena Minesweeper (5×5, 5 mines)
``ta-sudoku-v0``           TextArena Sudoku (75 clues)
``ta-countdown-v0``        TextArena Countdown (a seeded, solvable target)
``ta-wordle-v0``           TextArena Wordle (needs NLTK corpora; fails at make time offline)
``ta-hangman-v0``          TextArena Hangman (needs the NLTK words corpus)
``textworld-v0``           a generated TextWorld adventure per seed (extra ``textworld``)
=========================  ==================================================================

Other Gymnasium ids play through ``gym-v0`` (``make("gym-v0", gym_id="Blackjack-v1")``) or
:class:`GymTextEnv` directly.
The TextArena games need the ``games`` extra (``pip install 'agentic-rl[games]'``); without it
their ids stay registered and ``make`` says what to install.

Per-turn rewards: every game env returns the game's reward of each turn as ``step``'s reward,
so it is kept on each ``Turn`` (``Turn.reward``), and an invalid action's process reward
(−1) as ``Observation.process_reward``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from agentic_rl.envs.games.gym_adapter import GymTextEnv
from agentic_rl.envs.games.gym_games import (
    CliffWalkingTextEnv,
    FrozenLakeTextEnv,
    TaxiTextEnv,
    gym_text_env,
)
from agentic_rl.envs.games.rubric import game_rubric
from agentic_rl.envs.games.textarena_adapter import TextArenaEnv
from agentic_rl.envs.games.textarena_games import GAMES
from agentic_rl.envs.games.textworld_env import TextWorldEnv

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


def register_game_envs(register: Callable[..., None]) -> None:
    """Register the game envs with ``register(env_id, factory, description, **kwargs)``."""
    register(
        "frozenlake-v0",
        FrozenLakeTextEnv,
        "FrozenLake (not slippery): walk from S to G on a random 4x4 map",
    )
    register(
        "frozenlake-slippery-v0",
        FrozenLakeTextEnv,
        "FrozenLake on slippery ice (random 4x4 map)",
        is_slippery=True,
    )
    register("taxi-v0", TaxiTextEnv, TaxiTextEnv.description)
    register("cliffwalking-v0", CliffWalkingTextEnv, CliffWalkingTextEnv.description)
    register("textworld-v0", TextWorldEnv, TextWorldEnv.description + " (extra 'textworld')")
    register(
        "gym-v0",
        gym_text_env,
        "Any Gymnasium env with discrete actions, by env.kwargs.gym_id (default CliffWalking-v1)",
    )
    for game, env_id in TEXTARENA_IDS.items():
        needs = " (needs NLTK corpora installed locally)" if GAMES[game].nltk_resources else ""
        factory = functools.partial(TextArenaEnv, game)
        factory.recipe_overrides = GAMES[game].recipe_overrides  # type: ignore[attr-defined]
        register(env_id, factory, f"TextArena {game} (single player){needs}")


__all__ = [
    "GymTextEnv",
    "FrozenLakeTextEnv",
    "TaxiTextEnv",
    "CliffWalkingTextEnv",
    "TextArenaEnv",
    "TextWorldEnv",
    "TEXTARENA_IDS",
    "game_rubric",
    "gym_text_env",
    "register_game_envs",
]
