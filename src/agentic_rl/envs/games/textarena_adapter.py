"""TextArena single-player games (``textarena`` 0.7.4, extra ``games``) as text POMDPs.

Observation
    On reset: a system message (the game, the move syntax, the horizon) and a user message with
    the game's own prompt and board. After each turn: one user message with the game's new
    messages (hints, board, the reason of an invalid move), without TextArena's echo of the
    reply; on the last turn, how the game ended.
Action syntax
    The game's bracket move, e.g. ``[A C]`` (Tower of Hanoi) or ``[3 2]`` (Minesweeper); the
    last ``[...]`` of the reply is passed to the game (the whole reply when it has none).
Invalid actions
    TextArena's rules: an invalid move gets a warning observation; a second one in a row ends
    the game with the game's partial score. ``info["valid_action"]`` is False for such turns; a
    game that raises on a reply counts as an invalid move (``info["game_error"]``), never a crash.
Reward
    TextArena scores only the end: 1 for a win, else a partial score in [0, 1) (e.g. the share
    of cells solved). ``step`` returns it on the last turn and 0 before (``Turn.reward``);
    ``won`` is a final score of 1 without an invalid-move ending. Rubric:
    :func:`agentic_rl.envs.games.rubric.game_rubric`.
Horizon
    The game's turn limit (it ends the game: terminated) and our ``max_steps`` turns, counting
    invalid ones (truncated).
Randomness
    TextArena draws from the global ``random`` module; each env keeps its own generator state
    and swaps it in around every call, so the same seed gives the same game even when episodes
    interleave, and the caller's global ``random`` state is left untouched.
Missing assets
    Wordle and Hangman need NLTK corpora that TextArena downloads at import time. ``make`` checks
    for them locally (``nltk.data.find``, no network) and raises
    :class:`~agentic_rl.errors.EnvUnavailableError` naming them; when they are installed, NLTK's
    downloader is disabled while the game runs so nothing reaches the network.
"""

from __future__ import annotations

import contextlib
import importlib
import random
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentic_rl.envs.base import Env
from agentic_rl.envs.games.rubric import game_rubric
from agentic_rl.envs.games.text import last_bracketed
from agentic_rl.envs.games.textarena_games import GAMES, TextArenaGame
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Action, Message, Observation

T = TypeVar("T")
_PLAYER_ACTION = "PLAYER_ACTION"


def _require_textarena() -> None:
    try:
        importlib.import_module("textarena")
    except ImportError as exc:
        raise EnvUnavailableError(
            f"TextArena games need the 'textarena' package ({exc}); install it with "
            "pip install 'agentic-rl[games]'"
        ) from None


def check_nltk_resources(game: str, resources: tuple[str, ...]) -> None:
    """Raise if an NLTK resource the game needs is not installed locally (no network is used).

    Raises:
        EnvUnavailableError: names the missing resources and how to install them offline.
    """
    if not resources:
        return
    import nltk

    missing = []
    for path in resources:
        try:
            nltk.data.find(path)
        except LookupError:
            missing.append(path.split("/")[-1])
    if missing:
        raise EnvUnavailableError(
            f"{game} needs NLTK data that is not installed here ({', '.join(missing)}) and is not downloaded "
            f"at run time; on a machine with network run: python -m nltk.downloader {' '.join(missing)} "
            f"(then copy the nltk_data folder here or point NLTK_DATA at it)"
        )


@contextlib.contextmanager
def _no_nltk_download(active: bool) -> Iterator[None]:
    """Replace ``nltk.download`` by a no-op (the resources were checked locally)."""
    if not active:
        yield
        return
    import nltk

    original = nltk.download
    nltk.download = lambda *args, **kwargs: True
    try:
        yield
    finally:
        nltk.download = original


def _final_score(state: Any) -> float:
    """The game's final score for player 0; 0.0 when it is not a number (Countdown 0.7.4 swaps
    the score and the reason of an invalid-move ending)."""
    try:
        return float((state.rewards or {}).get(0, 0.0))
    except (TypeError, ValueError):
        return 0.0


class TextArenaEnv(Env):
    """One single-player TextArena game as a text POMDP (module docstring).

    Args:
        game: a key of :data:`~agentic_rl.envs.games.textarena_games.GAMES`, e.g. ``"TowerOfHanoi"``.
        max_steps: horizon in turns (default: the game's).
        **game_kwargs: override the game's constructor arguments (e.g. ``num_disks=4``).

    Raises:
        ValueError: unknown game or ``max_steps`` < 1.
        EnvUnavailableError: textarena is not installed, or the game's offline assets are missing.
    """

    description = "A TextArena single-player game"

    def __init__(self, game: str, max_steps: int | None = None, **game_kwargs: Any):
        if game not in GAMES:
            raise ValueError(f"unknown TextArena game {game!r}; known: {', '.join(sorted(GAMES))}")
        self.game_spec: TextArenaGame = GAMES[game]
        self.game = game
        self.max_steps = int(max_steps if max_steps is not None else self.game_spec.max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        self.game_kwargs = {**self.game_spec.kwargs, **game_kwargs}
        _require_textarena()
        check_nltk_resources(game, self.game_spec.nltk_resources)
        module, _, name = self.game_spec.entry_point.partition(":")
        with _no_nltk_download(bool(self.game_spec.nltk_resources)):
            self._cls = getattr(importlib.import_module(module), name)
        self._env: Any = None
        self._data: dict[str, Any] = {}
        self._rng: Any = None

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` with this env's ``random`` state swapped in (module docstring)."""
        outer = random.getstate()
        random.setstate(self._rng)
        try:
            with _no_nltk_download(bool(self.game_spec.nltk_resources)):
                return fn()
        finally:
            self._rng = random.getstate()
            random.setstate(outer)

    def system_prompt(self) -> str:
        """The instructions shown on reset."""
        return (
            f"You are playing {self.game_spec.title}. The rules follow. Each turn, reply with one move in square "
            f"brackets, for example {self.game_spec.example}; the last [...] in your reply is your move.\n"
            f"You have at most {self.max_steps} turns."
        )

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the game of ``seed`` (drawn from ``np_random`` if None): same seed, same game."""
        seed = self.start_episode(seed, options)
        seed = int(seed)
        kwargs, self._data = dict(self.game_kwargs), {}
        if self.game_spec.generator is not None:
            generated, self._data = self.game_spec.generator(seed)
            kwargs = {**generated, **kwargs}
        self._rng = random.Random(seed).getstate()

        def start() -> Any:
            env = self._cls(**kwargs)
            env.reset(num_players=1, seed=seed)
            return env

        self._env = self._call(start)
        text = self._observation_text()
        messages = (Message("system", self.system_prompt()), Message("user", text))
        return Observation(messages=messages), {"game": self.game}

    def _observation_text(self) -> str:
        _, messages = self._env.get_observation()
        # keep the game's messages; drop the echo of the reply (and Countdown 0.7.4's malformed
        # echo, whose fields are shifted: its "text" is the player id)
        return "\n".join(
            text
            for _, text, kind in messages
            if isinstance(text, str) and hasattr(kind, "name") and kind.name != _PLAYER_ACTION
        ).strip()

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Pass the reply's last bracketed move to the game (module docstring)."""
        self.begin_step(self._env is not None)
        move = last_bracketed(action.text) or action.text
        info: dict[str, Any] = {}
        try:
            done, _ = self._call(lambda: self._env.step(move))
            state = self._env.state
            invalid = state.error_count > 0 or bool(state.game_info[0].get("invalid_move"))
        except Exception as exc:  # noqa: BLE001 - a reply that breaks the game is an invalid move
            done, invalid = False, True
            info["game_error"] = f"{type(exc).__name__}: {exc}"
        text = self._observation_text()
        if "game_error" in info:
            text = (
                text + "\n" if text else ""
            ) + f"Invalid move: the game could not apply {move[:60]!r}."
        reward, won = 0.0, False
        if done:
            state = self._env.state
            reward = _final_score(state)
            won = reward >= 1.0 and not state.game_info[0].get("invalid_move")
            text += f"\nThe game is over: {state.game_info[0].get('reason', '')}"
        truncated = not done and self.episode.turn >= self.max_steps
        if truncated:
            text += "\nThe turn limit is reached."
        if done or truncated:
            self.end_episode()
        info.update(
            {
                "valid_action": not invalid,
                "won": won,
                "game_return": reward,
                "move": move if len(move) <= 60 else move[:57] + "...",
            }
        )
        return (
            Observation(
                messages=(Message("user", text.strip()),), process_reward=-1.0 if invalid else 0.0
            ),
            reward,
            bool(done),
            truncated,
            info,
        )

    def oracle_reply(self) -> str | None:
        """The game's reference move (see :mod:`agentic_rl.envs.games.textarena_games`), or None."""
        if self._env is None or self.episode.done or self.game_spec.oracle is None:
            return None
        return self.game_spec.oracle(self._env, self._data)

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """The games' default rubric (:func:`agentic_rl.envs.games.rubric.game_rubric`)."""
        return game_rubric(weights)

    def close(self) -> None:
        """Drop the game (safe to call twice)."""
        self._env = None
