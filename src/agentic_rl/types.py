"""Typed, frozen data that flows between the layers of agentic-rl.

The data flow is: task -> ``Env.reset`` -> context builder -> ``Policy.generate`` -> tool-call
parser -> ``Env.step`` -> ``Turn`` -> ``Trajectory`` -> rubric -> advantages -> loss.

Token-level fields follow one convention everywhere (see docs/design.md, decision 1): a trajectory
holds one flat list of token ids, the exact ids the policy was fed and sampled, with a parallel
``loss_mask`` (1 = sampled by the policy, 0 = template, tool or environment text) and
``logprobs`` (log-probability of the token under the sampling policy for sampled tokens, 0.0
elsewhere). Nothing downstream re-tokenizes decoded text. Imports only the standard library.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate (U+D800–U+DFFF) replaced by U+FFFD, the replacement character.

    A Python ``str`` may hold lone surrogates (from ``chr(0xd800)`` printed by a tool, or a ``"\\ud800"`` escape
    in a model's JSON); they cannot be encoded as UTF-8, so a tokenizer, the audit log or the trajectory store
    would raise on them. Every other code point is valid text and is kept (NUL included); a surrogate pair held
    as two code points becomes the one character it encodes. This is the one boundary function for text entering
    agentic-rl from tools and from the model's tool calls (see :mod:`agentic_rl.tools.definition.parser` and
    :mod:`agentic_rl.tools.definition.tool`). Returns ``text`` itself when it is already valid. Never raises.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class StopReason(str, enum.Enum):
    """Why an episode ended.

    ``TERMINATED``: the task ended. Truncations (a budget ran out): ``TRUNCATED`` (the env's own
    limit), ``MAX_TURNS``, ``MAX_TOKENS`` (the episode's token budget), ``MAX_NEW_TOKENS`` (a
    reply hit the per-turn token budget before the policy ended its turn; the cut reply was not
    given to the env). ``ERROR`` marks an episode that failed for an infrastructure reason (env
    or tool crash, failed request) and must be excluded from training.
    """

    TERMINATED = "terminated"
    TRUNCATED = "truncated"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    MAX_NEW_TOKENS = "max_new_tokens"
    ERROR = "error"

    @property
    def truncated(self) -> bool:
        """True when a budget, not the task, ended the episode."""
        return self in (
            StopReason.TRUNCATED,
            StopReason.MAX_TURNS,
            StopReason.MAX_TOKENS,
            StopReason.MAX_NEW_TOKENS,
        )


@dataclass(frozen=True)
class ToolCall:
    """One tool call parsed from an assistant message.

    Attributes:
        name: tool name as written by the model.
        arguments: decoded JSON object of arguments.
        raw: the exact text of the call between the tags (for audit and viewers).
        id: position-based id, unique within the episode (``call_<turn>_<k>``, ``k`` = the
            position of its ``<tool_call>`` block among all blocks of the message).
    """

    name: str
    arguments: dict[str, Any]
    raw: str = ""
    id: str = ""


@dataclass(frozen=True)
class ToolCallError:
    """A tool call the parser could not accept (malformed JSON, missing name, bad arguments).

    It becomes an error observation for the model, never an exception.
    """

    raw: str
    message: str


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, as shown to the policy.

    Attributes:
        call_id: id of the ``ToolCall`` it answers; for a parser error, the id of its place in the
            message (``call_<turn>_<k>``), or "" where that is not known.
        name: tool name ("" when unknown).
        content: text shown to the model.
        ok: False when the call failed (unknown tool, bad arguments, tool raised).
    """

    call_id: str
    name: str
    content: str
    ok: bool = True


@dataclass(frozen=True)
class RiskEvent:
    """One risk event of a turn: a refused tool call or a risk detector's hit.

    Produced by :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (denials and the
    tools' risk detectors) and by envs (e.g. test tampering); counted by the risk components of
    :mod:`agentic_rl.rewards.risk`.

    Attributes:
        category: what kind of risk (``"denied"``, ``"sandbox_limit"``,
            ``"path_outside_workspace"``, an env's own category, ...).
        tool: name of the tool involved ("" when none).
        reason: human-readable explanation.
        call_id: id of the ``ToolCall`` involved ("" when none).
        rule: the permission rule or limit that fired ("" when none).
        denied: True when the permission policy refused the call.
    """

    category: str
    tool: str = ""
    reason: str = ""
    call_id: str = ""
    rule: str = ""
    denied: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RiskEvent:
        """The event of a plain dict (a stored record, a user risk detector's output).

        Keys other than the fields are ignored; missing ones take their defaults.

        Raises:
            TypeError: ``d`` is not a mapping, or has no string ``category``.
        """
        if not isinstance(d, Mapping) or not isinstance(d.get("category"), str):
            raise TypeError(f"a risk event must be a dict with a str 'category', got {d!r}")
        return cls(
            category=d["category"],
            tool=str(d.get("tool", "")),
            reason=str(d.get("reason", "")),
            call_id=str(d.get("call_id", "")),
            rule=str(d.get("rule", "")),
            denied=bool(d.get("denied", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-serialisable dict (inverse of :meth:`from_dict`). Never raises."""
        return {
            "category": self.category,
            "tool": self.tool,
            "reason": self.reason,
            "call_id": self.call_id,
            "rule": self.rule,
            "denied": self.denied,
        }


@dataclass(frozen=True)
class MemoryEvent:
    """One memory tool call, as the memory toolkit reports it (see :mod:`agentic_rl.memory.tools`).

    Attributes:
        op: ``"write"``, ``"search"``, ``"update"`` or ``"delete"``.
        ok: False when the call failed.
        entry_ids: ids of the entries written, returned, updated or deleted.
        hits: for a search, the number of entries returned (0 otherwise).
        store_size: entries in the store after the call.
    """

    op: str
    ok: bool
    entry_ids: tuple[int, ...] = ()
    hits: int = 0
    store_size: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryEvent:
        """The event of a plain dict (a stored record).

        Raises:
            TypeError: ``d`` is not a mapping, or has no string ``op``.
        """
        if not isinstance(d, Mapping) or not isinstance(d.get("op"), str):
            raise TypeError(f"a memory event must be a dict with a str 'op', got {d!r}")
        return cls(
            op=d["op"],
            ok=bool(d.get("ok", False)),
            entry_ids=tuple(int(i) for i in d.get("entry_ids", ())),
            hits=int(d.get("hits", 0)),
            store_size=int(d.get("store_size", 0)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-serialisable dict (inverse of :meth:`from_dict`). Never raises."""
        return {
            "op": self.op,
            "ok": self.ok,
            "entry_ids": list(self.entry_ids),
            "hits": self.hits,
            "store_size": self.store_size,
        }


@dataclass(frozen=True)
class Message:
    """One chat message (``role`` in system, user, assistant, tool)."""

    role: str
    content: str


@dataclass(frozen=True)
class Observation:
    """What the environment shows the policy after ``reset`` or ``step``.

    Besides the text, a step's observation carries the typed step data that other layers read
    (the rollout engine copies it onto the ``Turn``); ``info`` holds env-specific extras only.

    Attributes:
        messages: new messages to append to the conversation (on reset: system and task).
        tools: JSON schemas of the tools available (set on reset; empty means unchanged).
        tool_results: results of the step's tool calls, in order (the tool messages' source).
        risk_events: risk events of the step (denials, detector hits, env checks), in order.
        memory_events: memory tool calls of the step, in order.
        process_reward: the env's per-turn process reward for the step, None when it gives none
            (credit assignment then uses a generic tool-health signal).
        context_reset: True when the env wiped the conversation: ``messages`` start a new
            context after the system message (see :mod:`agentic_rl.rollout.context`).
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    risk_events: tuple[RiskEvent, ...] = ()
    memory_events: tuple[MemoryEvent, ...] = ()
    process_reward: float | None = None
    context_reset: bool = False


@dataclass(frozen=True)
class Action:
    """What the policy did in one turn: its text and the tool calls parsed from it.

    Attributes:
        text: the assistant message text (decoded sampled tokens, end-of-turn token removed).
        tool_calls: calls the parser accepted, in order.
        tool_call_errors: calls the parser rejected, in order.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_errors: tuple[ToolCallError, ...] = ()


@dataclass(frozen=True)
class Turn:
    """One policy turn and the environment's answer to it.

    Token fields cover the span this turn appended to the trajectory's token list: first the
    context tokens fed before sampling (``loss_mask`` 0), then the sampled tokens (``loss_mask``
    1). Shapes: ``token_ids``, ``loss_mask`` and ``logprobs`` all have the same length.

    Attributes:
        index: 0-based turn number.
        action: the parsed action.
        observation: what the env answered (None after the last turn).
        reward: the env's per-step reward for this turn.
        tool_results: results of the turn's tool calls, in order.
        token_ids, loss_mask, logprobs: this turn's span of the token stream.
        info: env ``info`` dict of this step (JSON-serialisable).
        truncated: the reply was cut by a token budget (``max_new_tokens``, or what was left
            of ``max_total_tokens``) before the policy sampled its end-of-turn token. Such a
            turn is the episode's last: the env was not stepped with it (``reward`` 0, no
            observation, no tool calls parsed or run) and the episode ends truncated.
        risk_events, memory_events, process_reward, context_reset: the step's typed data, as
            the env's ``Observation`` gave them (see :class:`Observation`).
    """

    index: int
    action: Action
    observation: Observation | None
    reward: float
    tool_results: tuple[ToolResult, ...]
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    info: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    risk_events: tuple[RiskEvent, ...] = ()
    memory_events: tuple[MemoryEvent, ...] = ()
    process_reward: float | None = None
    context_reset: bool = False

    @classmethod
    def from_step(
        cls,
        index: int,
        action: Action,
        observation: Observation,
        reward: float,
        info: dict[str, Any],
        token_ids: tuple[int, ...] = (),
        loss_mask: tuple[int, ...] = (),
        logprobs: tuple[float, ...] = (),
    ) -> Turn:
        """The turn of one ``env.step``: the step's typed data (tool results, risk and memory
        events, process reward, context reset) copied from its ``observation``, which is kept
        only when it has messages. ``info`` is copied; the token spans default to empty (a
        text-only turn)."""
        return cls(
            index,
            action,
            observation if observation.messages else None,
            float(reward),
            observation.tool_results,
            token_ids,
            loss_mask,
            logprobs,
            dict(info),
            risk_events=observation.risk_events,
            memory_events=observation.memory_events,
            process_reward=observation.process_reward,
            context_reset=observation.context_reset,
        )

    @property
    def num_generated_tokens(self) -> int:
        """Number of tokens sampled by the policy in this turn."""
        return sum(self.loss_mask)


_INT64 = 2**63


def request_seed(seed: int, stream: int, turn: int) -> int:
    """The sampling seed of turn ``turn`` of the episode with index ``stream`` in a round sampled
    with ``seed``: the first 8 bytes (little-endian) of BLAKE2b(``"{seed}:{stream}:{turn}"``), an
    int in [0, 2**64). The rollout engine gives it to the policy with each request
    (``GenerationRequest.sample_seed``), so every request has a random stream of its own that
    does not depend on which others share its batch. Never raises."""
    digest = hashlib.blake2b(f"{seed}:{stream}:{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass(frozen=True)
class RolloutSampling:
    """How the policy sampled one rollout: what made the G members of a group differ, and what
    re-samples one of them.

    The members of a group share the round's ``seed`` and differ by ``stream``; the request of
    turn t was sampled with :func:`request_seed` ``(seed, stream, t)``. Re-sampling a member:
    ``run_episodes(..., sample_seed=seed, first_index=stream)`` with the same policy weights
    (``Trajectory.policy_version``), temperature and budgets gives the same tokens with a policy
    that honours per-request seeds (the in-process samplers do; a server does as far as it
    honours the ``seed`` field of its completions API).

    Attributes:
        seed: the round's sampling seed; None when the policy's shared RNG was used (the draw
            depends on the batch: such a rollout cannot be re-sampled by seed).
        stream: the episode's index in its round (>= 0).
        temperature: T of softmax(logits / T) (> 0).
        greedy: argmax decoding (evaluation).
        max_new_tokens: the most tokens one reply could have.

    Raises:
        ValueError: on construction, ``seed`` outside a signed 64-bit int, ``stream`` < 0,
            ``temperature`` not > 0 or ``max_new_tokens`` < 1.
    """

    seed: int | None
    stream: int
    temperature: float
    greedy: bool = False
    max_new_tokens: int = 256

    def __post_init__(self) -> None:
        if self.seed is not None and not -_INT64 <= self.seed < _INT64:
            raise ValueError(f"sampling seed must fit a signed 64-bit int, got {self.seed}")
        if self.stream < 0 or not self.temperature > 0 or self.max_new_tokens < 1:
            raise ValueError(
                f"bad rollout sampling: stream {self.stream}, temperature {self.temperature}, "
                f"max_new_tokens {self.max_new_tokens}"
            )

    def turn_seed(self, turn: int) -> int | None:
        """The seed of turn ``turn``'s request (:func:`request_seed`), None without a seed."""
        return None if self.seed is None else request_seed(self.seed, self.stream, turn)


@dataclass(frozen=True)
class Trajectory:
    """One episode: the turns, the exact token stream, and the scored reward.

    ``token_ids``/``loss_mask``/``logprobs`` are the concatenation of the turns' spans plus any
    trailing environment tokens; length T each.

    Segments: when the context was rebuilt during the episode (an env's context reset, or a
    context budget that elided history; see :mod:`agentic_rl.rollout.context`), the stream is
    a concatenation of *segments*, each a sequence the policy was fed from scratch: segment k
    is ``token_ids[segment_starts[k]:segment_starts[k + 1]]`` and its first tokens are its
    rebuilt prompt (loss mask 0). Each sampled token was conditioned on its own segment's
    prefix only, so training scores every segment as its own sequence. One segment (the
    default ``(0,)``) is the ordinary case.

    Attributes:
        env_id: registered id of the env, e.g. ``calculator-v0``.
        seed: seed passed to ``reset`` (same seed ⇒ same task).
        group_id: id shared by the G rollouts of one task.
        trajectory_id: unique id.
        messages: the whole conversation as messages (system, task, assistant, tool, ...).
        turns: the policy turns.
        token_ids, loss_mask, logprobs: flat token stream, length T each.
        stop_reason: why the episode ended.
        reward: total scored reward (None until scored).
        reward_components: named component values (unweighted) from the rubric.
        info: free metadata of the env (its reset ``info``: task level, answer, ...; see ``level``).
        segment_starts: ascending token indices where segments start; the first is 0.
        failure: why the episode must be excluded from training (an env, tool, request or
            reward function error), None when it did not fail.
        policy_version: optimizer updates the sampling policy had received, None when unknown;
            with ``token_versions`` recorded, the oldest version among the sampled tokens.
        token_versions: per token of ``token_ids``, the policy version that sampled it (-1 for
            tokens the policy did not sample: prompts, env text); empty when not recorded. An
            episode in flight across a weight update (async training's partial rollouts) holds
            several versions.
        sampling: how it was sampled (seed, stream, temperature, ...: :class:`RolloutSampling`),
            as the rollout engine or the chat-completions runner recorded it (a scripted
            oracle's episode through the engine records the engine's settings too); None when
            built otherwise or stored before the field existed.
    """

    env_id: str
    seed: int
    group_id: str
    trajectory_id: str
    messages: tuple[Message, ...]
    turns: tuple[Turn, ...]
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: StopReason
    reward: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    segment_starts: tuple[int, ...] = (0,)
    failure: str | None = None
    policy_version: int | None = None
    token_versions: tuple[int, ...] = ()
    sampling: RolloutSampling | None = None

    @property
    def segments(self) -> tuple[tuple[int, int], ...]:
        """``[start, end)`` token ranges of the segments, in order (one ``(0, T)`` without resets)."""
        ends = (*self.segment_starts[1:], len(self.token_ids))
        return tuple(zip(self.segment_starts, ends))

    @property
    def terminated(self) -> bool:
        """True when the task ended the episode (not a budget)."""
        return self.stop_reason == StopReason.TERMINATED

    @property
    def truncated(self) -> bool:
        """True when a budget ended the episode."""
        return self.stop_reason.truncated

    @property
    def failed(self) -> bool:
        """True when the episode must be excluded from training (infra or reward error)."""
        return self.stop_reason == StopReason.ERROR or self.failure is not None

    @property
    def num_generated_tokens(self) -> int:
        """Total tokens sampled by the policy."""
        return sum(self.loss_mask)

    @property
    def level(self) -> str | None:
        """The task's difficulty level as text (the env's reset ``info["level"]``), or None."""
        return None if self.info.get("level") is None else str(self.info["level"])

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """All accepted tool calls, in order."""
        return tuple(c for t in self.turns for c in t.action.tool_calls)
