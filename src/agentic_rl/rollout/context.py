"""The context builder: system prompt, task, memory results and history within a token budget.

:class:`ContextBuilder` turns the parts of an agent's context into the message list the policy
is fed, such that ``count_tokens(render(messages)) <= max_tokens``::

    builder = ContextBuilder(count_tokens=lambda text: len(chat.encode(text)),
                             render=chat.render_prompt, max_tokens=960, max_tool_output_tokens=200)
    built = builder.build(system, task, history, memory=["[3] Alice: codeword falcon"])
    built.messages     # (system, task, [memory], [elision marker], recent history ...)
    built.num_tokens   # count_tokens(render(built.messages)), <= max_tokens
    built.rewritten    # True when history was elided or truncated

Rules, in order:

1. The system prompt and the task are never dropped or shortened. If they alone (rendered)
   exceed the budget, :class:`ContextBudgetError` is raised.
2. Tool outputs longer than ``max_tool_output_tokens`` are cut to fit it, ending with the
   visible marker ``…[tool output truncated: K of N tokens kept]``.
3. Memory results (given best first) follow the task as one ``user`` message, ``Relevant
   memory:`` and one line per result; the lowest-ranked results are dropped first if the
   history's newest message would not fit otherwise (a marker line says how many).
4. History is kept newest first: the oldest messages are elided as a block, replaced by one
   ``user`` message ``[N earlier messages elided to fit the context budget]``. Elision starts
   at a message boundary and never separates an assistant message from the tool results
   that answer it (a block starts at a non-tool message).
5. If even the newest history block does not fit, its last message's content is cut with the
   marker ``…[message truncated: K of N tokens kept]``.

Context resets. An env may set ``Observation.context_reset = True`` in a step: the conversation is
wiped except the system message, and the step's observation messages start the new one (the
first is the new task). The engine then builds ``builder.build(system, obs.messages[0],
obs.messages[1:])`` (``memory-recall-v0`` does this between sessions).

Token-in/token-out consistency (docs/design.md, decision 1). Building a context *rewrites* history
whenever ``built.rewritten`` is True or after a context reset: the new prompt is then not a
continuation of the token stream the policy has been fed so far.
The rollout engine must therefore never splice a rebuilt prompt into the running stream, nor
re-tokenize the old stream. Instead it closes the current *segment* (the ids, loss mask and
logprobs recorded so far stay exactly as sampled) and starts a new segment whose first tokens
are ``chat.encode(chat.render_prompt(built.messages))`` with loss mask 0; sampling continues
from there. Training scores every segment as its own sequence (each sampled token conditioned
on exactly the prefix it was sampled from) and gives all segments of a trajectory the
trajectory's advantage. When ``built.rewritten`` is False and no reset happened, the engine
keeps appending continuations as before (the builder's output then equals the appended history).
This is implemented by :mod:`agentic_rl.rollout.engine` (budget: ``RolloutConfig.context_max_tokens``),
recorded as ``Trajectory.segment_starts`` and scored per segment by :mod:`agentic_rl.trainer.learning.scoring`.

This module is pure: tokenization and rendering are passed in, so it is testable without a
tokenizer or torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentic_rl.types import Message

__all__ = [
    "BuiltContext",
    "ContextBudgetError",
    "ContextBuilder",
    "ELISION_MARKER",
    "render_chatml",
]

ELISION_MARKER = "[{n} earlier messages elided to fit the context budget]"
TOOL_TRUNCATION_MARKER = "…[tool output truncated: {kept} of {total} tokens kept]"
MESSAGE_TRUNCATION_MARKER = "…[message truncated: {kept} of {total} tokens kept]"
MEMORY_HEADER = "Relevant memory:"


class ContextBudgetError(ValueError):
    """The system prompt and task alone exceed the token budget (nothing can be elided)."""


def render_chatml(messages: Sequence[Message]) -> str:
    """The ChatML prompt text of ``messages`` (as :meth:`agentic_rl.policy.chat.ChatFormat.render_prompt`)."""
    from agentic_rl.policy.chat import ChatFormat

    return ChatFormat(None).render_prompt(messages)


@dataclass(frozen=True)
class BuiltContext:
    """A context within the budget.

    Attributes:
        messages: what the policy is fed: system, task, optional memory message, optional
            elision marker, then the kept history.
        num_tokens: ``count_tokens(render(messages))``.
        elided_messages: history messages replaced by the elision marker.
        truncated_messages: messages (tool outputs or the newest message) cut with a marker.
        dropped_memory: memory results left out for lack of room.
    """

    messages: tuple[Message, ...]
    num_tokens: int
    elided_messages: int = 0
    truncated_messages: int = 0
    dropped_memory: int = 0

    @property
    def rewritten(self) -> bool:
        """True when the history was changed (elided or truncated): start a new segment."""
        return bool(self.elided_messages or self.truncated_messages)


class ContextBuilder:
    """Builds contexts within a token budget (rules in the module docstring).

    Args:
        count_tokens: ``text -> number of tokens`` (e.g. ``len(chat.encode(text))``).
        max_tokens: the budget of the rendered prompt (leave room for the reply yourself).
        render: ``messages -> prompt text`` (default: ChatML with the assistant header).
        max_tool_output_tokens: longest tool output kept whole (None: no per-output limit).

    Raises:
        ValueError: ``max_tokens`` or ``max_tool_output_tokens`` < 1.
    """

    def __init__(
        self,
        count_tokens: Callable[[str], int],
        max_tokens: int,
        *,
        render: Callable[[Sequence[Message]], str] = render_chatml,
        max_tool_output_tokens: int | None = None,
    ):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if max_tool_output_tokens is not None and max_tool_output_tokens < 1:
            raise ValueError(
                f"max_tool_output_tokens must be >= 1 or None, got {max_tool_output_tokens}"
            )
        self.count_tokens = count_tokens
        self.max_tokens = max_tokens
        self.render = render
        self.max_tool_output_tokens = max_tool_output_tokens

    def tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the rendered ``messages``."""
        return int(self.count_tokens(self.render(messages)))

    def build(
        self,
        system: Message,
        task: Message,
        history: Sequence[Message] = (),
        memory: Sequence[str] = (),
    ) -> BuiltContext:
        """Fit system, task, memory results and history into the budget.

        Args:
            system: the system message (kept whole).
            task: the task message (kept whole).
            history: the conversation after the task, oldest first.
            memory: retrieved memory results, best first (one line each).

        Raises:
            ContextBudgetError: system + task alone exceed ``max_tokens``.
        """
        fixed = [system, task]
        if self.tokens(fixed) > self.max_tokens:
            raise ContextBudgetError(
                f"system prompt and task take {self.tokens(fixed)} tokens, "
                f"over the context budget of {self.max_tokens}"
            )
        history, truncated = self._cap_tool_outputs(history)
        blocks = _blocks(history)
        for n_memory in range(len(memory), -1, -1):  # keep as many memory results as still fit
            head = fixed + _memory_message(memory, n_memory)
            if self.tokens(head) > self.max_tokens:
                continue
            newest = (
                ([_marker(len(history) - len(blocks[-1]))] if len(blocks) > 1 else []) + blocks[-1]
                if blocks
                else []
            )
            if n_memory == 0 or self.tokens(head + newest) <= self.max_tokens:
                break
        kept, elided = self._fit_history(head, blocks)
        messages = head + kept
        if not kept and history:  # not even the newest block fits: cut its last message
            messages, cut = self._cut_last(head, history, elided)
            truncated += cut
            elided = len(history) - cut if cut else len(history)
        return BuiltContext(
            tuple(messages), self.tokens(messages), elided, truncated, len(memory) - n_memory
        )

    def _cap_tool_outputs(self, history: Sequence[Message]) -> tuple[list[Message], int]:
        if self.max_tool_output_tokens is None:
            return list(history), 0
        out, cut = [], 0
        limit = self.max_tool_output_tokens
        for message in history:
            if message.role == "tool" and self.count_tokens(message.content) > limit:
                total = self.count_tokens(message.content)
                content = self._truncate(
                    message.content,
                    TOOL_TRUNCATION_MARKER,
                    lambda text: self.count_tokens(text) <= limit,
                )
                message = dataclasses.replace(
                    message,
                    content=content
                    if content is not None
                    else TOOL_TRUNCATION_MARKER.format(kept=0, total=total),
                )
                cut += 1
            out.append(message)
        return out, cut

    def _fit_history(
        self, head: list[Message], blocks: list[list[Message]]
    ) -> tuple[list[Message], int]:
        """Keep the longest suffix of blocks that fits (with a marker if any are elided)."""
        total = sum(len(b) for b in blocks)
        if self.tokens(head + [m for b in blocks for m in b]) <= self.max_tokens:
            return [m for b in blocks for m in b], 0
        low, high = 1, len(blocks)  # number of oldest blocks elided; fits(high) is not guaranteed
        best: tuple[list[Message], int] = ([], total)
        while low <= high:  # the kept suffix shrinks as more blocks are elided: binary search
            mid = (low + high) // 2
            kept = [m for b in blocks[mid:] for m in b]
            candidate = [_marker(total - len(kept))] + kept if kept else []
            if kept and self.tokens(head + candidate) <= self.max_tokens:
                best, high = (candidate, total - len(kept)), mid - 1
            else:
                low = mid + 1
        return best

    def _cut_last(
        self, head: list[Message], history: list[Message], elided: int
    ) -> tuple[list[Message], int]:
        last = history[-1]
        marker = [_marker(len(history) - 1)] if len(history) > 1 else []
        content = self._truncate(
            last.content,
            MESSAGE_TRUNCATION_MARKER,
            lambda text: (
                self.tokens(head + marker + [dataclasses.replace(last, content=text)])
                <= self.max_tokens
            ),
        )
        if content is None:  # not even the marker fits: show only that history was elided
            only_marker = [_marker(len(history))]
            return (
                head + only_marker if self.tokens(head + only_marker) <= self.max_tokens else head
            ), 0
        return head + marker + [dataclasses.replace(last, content=content)], 1

    def _truncate(self, text: str, template: str, fits: Callable[[str], bool]) -> str | None:
        """Longest prefix of ``text`` plus marker for which ``fits`` holds (binary search over
        characters); None when not even the marker alone fits."""
        total = self.count_tokens(text)
        best, low, high = None, 0, len(text)
        while low <= high:
            mid = (low + high) // 2
            prefix = text[:mid]
            candidate = prefix + template.format(kept=self.count_tokens(prefix), total=total)
            if fits(candidate):
                best, low = candidate, mid + 1
            else:
                high = mid - 1
        return best if best is not None else (text if fits(text) else None)


def _marker(n: int) -> Message:
    return Message("user", ELISION_MARKER.format(n=n))


def _memory_message(memory: Sequence[str], n: int) -> list[Message]:
    if not memory:
        return []
    lines = [MEMORY_HEADER, *(f"- {m}" for m in memory[:n])]
    if n < len(memory):
        lines.append(
            f"[{len(memory) - n} lower-ranked memory results left out to fit the context budget]"
        )
    return [Message("user", "\n".join(lines))]


def _blocks(history: Sequence[Message]) -> list[list[Message]]:
    """Split history into blocks that start at a non-tool message (tool results stay with their call)."""
    blocks: list[list[Message]] = []
    for message in history:
        if blocks and message.role == "tool":
            blocks[-1].append(message)
        else:
            blocks.append([message])
    return blocks
