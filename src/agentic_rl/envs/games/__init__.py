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

import importlib
from typing import Any

from agentic_rl.envs.games.textarena_games import TEXTARENA_IDS

#: public name -> the module that defines it (imported on first access: importing this package
#: imports no game module, so listing env ids stays cheap)
_LAZY = {
    "GymTextEnv": "gym_adapter",
    "FrozenLakeTextEnv": "gym_games",
    "TaxiTextEnv": "gym_games",
    "CliffWalkingTextEnv": "gym_games",
    "gym_text_env": "gym_games",
    "game_rubric": "rubric",
    "TextArenaEnv": "textarena_adapter",
    "TextWorldEnv": "textworld_env",
}


def __getattr__(name: str) -> Any:
    """The public names of the game modules, imported on first access (PEP 562).

    Raises:
        AttributeError: not a public name of this package.
    """
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "CliffWalkingTextEnv",
    "FrozenLakeTextEnv",
    "GymTextEnv",
    "TEXTARENA_IDS",
    "TaxiTextEnv",
    "TextArenaEnv",
    "TextWorldEnv",
    "game_rubric",
    "gym_text_env",
]
