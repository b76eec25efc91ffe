"""Gymnasium spaces of chat observations and of agent actions (text + tool calls).

Gymnasium's built-in spaces hold arrays, numbers and strings; an agentic-rl env observes chat
messages and is acted on with text and parsed tool calls, so its spaces are two custom
:class:`gymnasium.spaces.Space` subclasses over the typed values of :mod:`agentic_rl.types`:

* :class:`ObservationSpace`: every :class:`~agentic_rl.types.Observation` whose messages are
  :class:`~agentic_rl.types.Message` values with a known role (system, user, assistant, tool)
  and ``str`` content, whose tool schemas are dicts with a string ``name``, and whose typed
  step data (tool results, risk and memory events, process reward, context reset) have their
  types (the per-value checks of :func:`agentic_rl.envs.contract.observation_problems`).
* :class:`ActionSpace`: every :class:`~agentic_rl.types.Action`: ``str`` text, a tuple of
  :class:`~agentic_rl.types.ToolCall` (string name and id, dict arguments, string raw text) and
  a tuple of :class:`~agentic_rl.types.ToolCallError`.

Neither space bounds the text length (the rollout engine's token budgets do). ``sample()``
draws from the space's own ``np_random`` (seed it with ``space.seed(n)``), like every
Gymnasium space: a random text of ``1..max_sample_length`` characters of ``charset`` (the
default is Gymnasium's :data:`gymnasium.spaces.text.alphanumeric` plus the space). A sampled
action is text only, never a tool call: it is a valid action (a final answer, or an invalid
move in a game), the one every env must accept. Both spaces are not flattenable to arrays
(``is_np_flattenable`` is False) and convert to and from JSON-able dicts
(``to_jsonable``/``from_jsonable``).

Reference: Gymnasium ``gymnasium/spaces/text.py`` (sampling) and ``gymnasium/spaces/space.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.spaces.text import alphanumeric

from agentic_rl.envs.contract import observation_problems
from agentic_rl.types import (
    Action,
    MemoryEvent,
    Message,
    Observation,
    RiskEvent,
    ToolCall,
    ToolCallError,
    ToolResult,
)

__all__ = ["DEFAULT_CHARSET", "ActionSpace", "ObservationSpace"]

#: characters of sampled text: ASCII letters, digits and the space
DEFAULT_CHARSET = "".join(sorted(alphanumeric)) + " "


class _TextSampling(Space[Any]):
    """Shared validation and random text of the two spaces (not a space users build)."""

    def __init__(
        self, max_sample_length: int = 32, charset: str = DEFAULT_CHARSET, seed: int | None = None
    ):
        if int(max_sample_length) < 1:
            raise ValueError(f"max_sample_length must be >= 1, got {max_sample_length}")
        if not charset:
            raise ValueError("charset must hold at least one character")
        self.max_sample_length = int(max_sample_length)
        self.charset = "".join(dict.fromkeys(charset))  # unique, in the given order
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """False: chat messages and tool calls have no fixed-size array form."""
        return False

    def _text(self) -> str:
        length = int(self.np_random.integers(1, self.max_sample_length + 1))
        chars = self.np_random.choice(np.array(list(self.charset)), size=length)
        return "".join(chars.tolist())

    @staticmethod
    def _no_mask(mask: Any, probability: Any) -> None:
        if mask is not None or probability is not None:
            raise ValueError(f"{mask=} / {probability=}: this space samples without masks")

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and self.max_sample_length == other.max_sample_length  # type: ignore[attr-defined]
            and self.charset == other.charset  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self), self.max_sample_length, self.charset))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_sample_length={self.max_sample_length})"


class ObservationSpace(_TextSampling):
    """The space of chat observations (module docstring).

    Args:
        max_sample_length: the longest message text :meth:`sample` draws (>= 1).
        charset: the characters :meth:`sample` draws from (non-empty).
        seed: seed of the space's ``np_random`` (None: a random one).

    Raises:
        ValueError: ``max_sample_length`` < 1 or an empty ``charset``.
    """

    def contains(self, x: Any) -> bool:
        """True when ``x`` is a well-formed :class:`~agentic_rl.types.Observation`. Never raises."""
        if observation_problems(x, "observation"):
            return False
        return isinstance(x.tools, tuple) and all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in x.tools
        )

    def sample(self, mask: Any = None, probability: Any = None) -> Observation:
        """A random observation: one user message of random text.

        Raises:
            ValueError: a ``mask`` or ``probability`` is given (not supported).
        """
        self._no_mask(mask, probability)
        return Observation(messages=(Message("user", self._text()),))

    def to_jsonable(self, sample_n: Sequence[Observation]) -> list[dict[str, Any]]:
        """Observations as JSON-able dicts (the dataclass fields; tools as given)."""
        return [
            {
                "messages": [{"role": m.role, "content": m.content} for m in o.messages],
                "tools": [copy.deepcopy(t) for t in o.tools],
                "tool_results": [asdict(r) for r in o.tool_results],
                "risk_events": [e.to_dict() for e in o.risk_events],
                "memory_events": [e.to_dict() for e in o.memory_events],
                "process_reward": o.process_reward,
                "context_reset": o.context_reset,
            }
            for o in sample_n
        ]

    def from_jsonable(self, sample_n: Iterable[dict[str, Any]]) -> list[Observation]:
        """The observations of :meth:`to_jsonable`'s dicts.

        Raises:
            KeyError, TypeError: a dict lacks a field or holds a wrong type.
        """
        return [
            Observation(
                messages=tuple(Message(m["role"], m["content"]) for m in d["messages"]),
                tools=tuple(dict(t) for t in d["tools"]),
                tool_results=tuple(ToolResult(**r) for r in d["tool_results"]),
                risk_events=tuple(RiskEvent.from_dict(e) for e in d["risk_events"]),
                memory_events=tuple(MemoryEvent.from_dict(e) for e in d["memory_events"]),
                process_reward=d["process_reward"],
                context_reset=bool(d["context_reset"]),
            )
            for d in sample_n
        ]


def _call_ok(call: Any) -> bool:
    return (
        isinstance(call, ToolCall)
        and isinstance(call.name, str)
        and isinstance(call.arguments, dict)
        and isinstance(call.raw, str)
        and isinstance(call.id, str)
    )


class ActionSpace(_TextSampling):
    """The space of agent actions: text and the tool calls parsed from it (module docstring).

    Args:
        max_sample_length: the longest text :meth:`sample` draws (>= 1).
        charset: the characters :meth:`sample` draws from (non-empty).
        seed: seed of the space's ``np_random`` (None: a random one).

    Raises:
        ValueError: ``max_sample_length`` < 1 or an empty ``charset``.
    """

    def contains(self, x: Any) -> bool:
        """True when ``x`` is a well-formed :class:`~agentic_rl.types.Action`. Never raises."""
        return (
            isinstance(x, Action)
            and isinstance(x.text, str)
            and isinstance(x.tool_calls, tuple)
            and all(_call_ok(c) for c in x.tool_calls)
            and isinstance(x.tool_call_errors, tuple)
            and all(
                isinstance(e, ToolCallError)
                and isinstance(e.raw, str)
                and isinstance(e.message, str)
                for e in x.tool_call_errors
            )
        )

    def sample(self, mask: Any = None, probability: Any = None) -> Action:
        """A random text-only action (no tool calls), drawn from the space's ``np_random``.

        Raises:
            ValueError: a ``mask`` or ``probability`` is given (not supported).
        """
        self._no_mask(mask, probability)
        return Action(text=self._text())

    def to_jsonable(self, sample_n: Sequence[Action]) -> list[dict[str, Any]]:
        """Actions as JSON-able dicts (text, tool calls, parser errors)."""
        return [
            {
                "text": a.text,
                "tool_calls": [asdict(c) for c in a.tool_calls],
                "tool_call_errors": [asdict(e) for e in a.tool_call_errors],
            }
            for a in sample_n
        ]

    def from_jsonable(self, sample_n: Iterable[dict[str, Any]]) -> list[Action]:
        """The actions of :meth:`to_jsonable`'s dicts.

        Raises:
            KeyError, TypeError: a dict lacks a field or holds a wrong type.
        """
        return [
            Action(
                text=d["text"],
                tool_calls=tuple(ToolCall(**c) for c in d["tool_calls"]),
                tool_call_errors=tuple(ToolCallError(**e) for e in d["tool_call_errors"]),
            )
            for d in sample_n
        ]
