"""``textworld-v0``: TextWorld text adventures generated offline (``textworld`` 1.7.0, extra ``textworld``).

Game files
    Each seed is its own game: ``world_size`` rooms, ``nb_objects`` objects and a quest of
    ``quest_length`` steps, generated with TextWorld's generator and compiled with the Inform 7
    tools inside the ``textworld`` wheel (what ``tw-make custom --world-size … --seed …`` does;
    about 7 s a game), then cached as ``<games_dir>/<spec>-s<seed>.z8`` (default
    ``$AGENTIC_RL_CACHE/textworld`` or ``~/.cache/agentic-rl/textworld``) and reused.
Observation
    On reset: a system message (goal, action syntax, horizon) and a user message with the
    game's opening text (objective and room) and the admissible commands. After each turn: the
    game's feedback, the score and the admissible commands.
Action syntax
    ``<action>COMMAND</action>`` (or the bare reply) where COMMAND is one of the admissible
    commands listed (case and spacing are normalised). Anything else is an invalid action: the
    game never sees it, the observation says so and lists the commands again.
Reward
    Intermediate rewards: each turn's score gain (``step``'s reward, so
    ``Turn.reward``); won = TextWorld's ``won``. Rubric:
    :func:`agentic_rl.envs.games.rubric.game_rubric`.
Horizon
    ``max_steps`` turns (truncated); the game ends itself when won or lost (terminated).
Oracle
    TextWorld's walkthrough from the current state (``policy_commands``).
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.envs.games.rubric import game_rubric
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.types import Action, Message, Observation

_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)


def _textworld() -> Any:
    try:
        import textworld
    except ImportError as exc:
        raise EnvUnavailableError(
            f"textworld-v0 needs the 'textworld' package ({exc}); install it with "
            "pip install 'agentic-rl[textworld]' (it compiles jericho with gcc)"
        ) from None
    return textworld


def default_games_dir() -> Path:
    """``$AGENTIC_RL_CACHE/textworld``, else ``~/.cache/agentic-rl/textworld``."""
    root = os.environ.get("AGENTIC_RL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "agentic-rl"
    )
    return Path(root) / "textworld"


def _normalise(command: str) -> str:
    return " ".join(command.lower().split())


def clean_feedback(text: str) -> str:
    """TextWorld's feedback without the ASCII-art banner, the ``>`` prompt with its status bar,
    and the end-of-game RESTART/RESTORE prompt; runs of blank lines become one."""
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(">") or "RESTART, RESTORE" in stripped:
            continue
        if stripped and not any(c.isalnum() for c in stripped):
            continue  # a banner line: only $ \\ | _ / and the like
        if stripped or (kept and kept[-1]):
            kept.append(stripped)
    return "\n".join(kept).strip()


class TextWorldEnv(Env):
    """A generated TextWorld game per seed (module docstring).

    Args:
        world_size: rooms; nb_objects: objects; quest_length: steps of the quest.
        max_steps: horizon in turns.
        games_dir: where generated games are cached (default :func:`default_games_dir`).

    Raises:
        ValueError: a size below 1.
        EnvUnavailableError: textworld is not installed.
    """

    description = (
        "TextWorld: a generated text adventure per seed (admissible commands, intermediate rewards)"
    )

    def __init__(
        self,
        world_size: int = 3,
        nb_objects: int = 5,
        quest_length: int = 3,
        max_steps: int = 30,
        games_dir: str | None = None,
    ):
        if min(world_size, nb_objects, quest_length, max_steps) < 1:
            raise ValueError("world_size, nb_objects, quest_length and max_steps must be >= 1")
        self._tw_module = _textworld()
        self.world_size, self.nb_objects, self.quest_length = (
            int(world_size),
            int(nb_objects),
            int(quest_length),
        )
        self.max_steps = int(max_steps)
        self.games_dir = Path(games_dir) if games_dir else default_games_dir()
        self._tw: Any = None
        self._state: Any = None
        self._score = 0.0

    def game_file(self, seed: int) -> Path:
        """The game of ``seed``, generated and compiled on first use (module docstring)."""
        path = (
            self.games_dir
            / f"w{self.world_size}-o{self.nb_objects}-q{self.quest_length}-s{seed}.z8"
        )
        if path.is_file():
            return path
        tw = self._tw_module
        from textworld.generator import compile_game, make_game

        self.games_dir.mkdir(parents=True, exist_ok=True)
        options = tw.GameOptions()
        options.seeds = seed
        options.nb_rooms, options.nb_objects, options.quest_length = (
            self.world_size,
            self.nb_objects,
            self.quest_length,
        )
        with tempfile.TemporaryDirectory(
            dir=self.games_dir
        ) as tmp:  # build aside, then move: no half-written game
            options.path = os.path.join(tmp, path.name)
            options.file_ext = ".z8"
            built = Path(compile_game(make_game(options), options))
            for sibling in built.parent.glob(built.stem + ".*"):  # the .z8 and its .json metadata
                os.replace(sibling, self.games_dir / sibling.name)
        return path

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the game of ``seed`` (drawn from ``np_random`` in [0, 2**16) if None; generated
        on first use)."""
        drawn = seed is None
        seed = self.start_episode(seed, options)
        if drawn:
            seed %= 2**16  # few distinct games, each generated once (game_file caches them)
        self.close()
        infos = self._tw_module.EnvInfos(
            feedback=True,
            admissible_commands=True,
            policy_commands=True,
            score=True,
            max_score=True,
            won=True,
            lost=True,
        )
        path = str(self.game_file(int(seed)))
        with (
            warnings.catch_warnings()
        ):  # Jericho's own score detection is off; TextWorld's wrapper scores
            warnings.filterwarnings("ignore", message=".*is not fully supported.*")
            self._tw = self._tw_module.start(path, request_infos=infos)
        self._state = self._tw.reset()
        self._score = 0.0
        system = (
            "You are playing a text adventure. Reach the objective the game gives you. Each turn, reply with "
            "one command as <action>COMMAND</action>, choosing COMMAND from the admissible commands listed "
            f"(for example <action>look</action>). You have at most {self.max_steps} turns."
        )
        messages = (
            Message("system", system),
            Message("user", self._state_text(self._state["feedback"])),
        )
        return Observation(messages=messages), {
            "game": "textworld",
            "max_score": float(self._state["max_score"]),
        }

    def admissible_commands(self) -> list[str]:
        """The commands the game accepts in the current state ([] before reset)."""
        return list(self._state["admissible_commands"] or []) if self._state is not None else []

    def _state_text(self, feedback: str, with_commands: bool = True) -> str:
        text = clean_feedback(feedback)
        return (
            f"{text}\nAdmissible commands: {', '.join(self.admissible_commands())}"
            if with_commands
            else text
        )

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Play the reply's command if it is admissible (module docstring)."""
        self.begin_step(self._tw is not None)
        match = _TAG.search(action.text)
        command = _normalise(match.group(1) if match else action.text)
        admissible = {_normalise(c): c for c in self.admissible_commands()}
        reward, terminated, won = 0.0, False, False
        if command not in admissible:
            text = (
                f"Invalid action: {command[:60]!r} is not an admissible command.\n"
                + self._state_text("")
            )
        else:
            self._state, score, terminated = self._tw.step(admissible[command])
            reward, self._score = float(score) - self._score, float(score)
            won = bool(self._state["won"])
            text = (
                self._state_text(self._state["feedback"], with_commands=not terminated)
                + f"\nScore: {score:g} of {self._state['max_score']:g}."
            )
        truncated = not terminated and self.episode.turn >= self.max_steps
        if terminated:
            text += "\nThe game is over: you won." if won else "\nThe game is over: you lost."
        elif truncated:
            text += "\nThe turn limit is reached."
        if terminated or truncated:
            self.end_episode()
        valid = command in admissible
        info = {
            "valid_action": valid,
            "won": won,
            "game_return": self._score,
            "command": command[:60],
        }
        return (
            Observation(
                messages=(Message("user", text.strip()),), process_reward=0.0 if valid else -1.0
            ),
            reward,
            bool(terminated),
            truncated,
            info,
        )

    def oracle_reply(self) -> str | None:
        """The next command of TextWorld's walkthrough from the current state, or None."""
        if self._tw is None or self.episode.done:
            return None
        plan = self._state["policy_commands"] or []
        return f"<action>{plan[0]}</action>" if plan else None

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """The games' default rubric (:func:`agentic_rl.envs.games.rubric.game_rubric`)."""
        return game_rubric(weights)

    def close(self) -> None:
        """Close the game (safe to call twice)."""
        if self._tw is not None:
            self._tw.close()
            self._tw = None
