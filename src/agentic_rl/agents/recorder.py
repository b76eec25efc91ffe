"""The calls of one rollout become one trajectory, token-in/token-out.

An agent calls ``POST /rollouts/<id>/v1/chat/completions`` once per turn with the whole
conversation so far. :class:`RolloutRecorder` turns those calls into one
:class:`~agentic_rl.types.Trajectory` whose token stream is exactly what the policy was fed and
what it sampled (docs/design.md, decision 1):

1. The request's messages are rendered with the model's chat format (:func:`to_messages`):
   an assistant message the server returned earlier in this rollout is replaced by the reply
   *as sampled* (reasoning and tool-call markup included), never by the agent's copy of it; the
   request's tool schemas are listed in the system prompt as the envs list theirs
   (:func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt`; a template with a
   tools block gets them there).
2. When the call's messages extend the previous call's conversation with one of the replies it
   returned (the usual agent loop: the reply, then tool results or a user message), the reply's
   sampled ids join the stream (loss mask 1, with their logprobs) and the new messages are
   rendered as the span after them (loss mask 0): the difference between the chat format's
   rendering of the whole conversation and the text the segment already holds, as
   :meth:`~agentic_rl.policy.chat_template.TemplateChatFormat.next_context` does for envs.
3. Otherwise the agent rewrote its history (dropped, summarised or edited messages, retried a
   call, or the template shows earlier turns differently): the previous reply still joins the
   stream as sampled, and the call starts a new *segment* whose prompt is the rendering of its
   messages (``Trajectory.segment_starts``, as a context reset does in
   :mod:`agentic_rl.rollout.context`); training scores each segment as its own sequence.

With ``n`` > 1 a call returns several choices; the one the next call continues joins the stream
(the others are counted in ``info["unused_choices"]``); for the last call, the choice the reward
names (default 0). Every change happens in :meth:`RolloutRecorder.record`, after sampling
succeeded: a call that fails (a bad request, a prompt over the budget, a policy error) changes
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.agents.api import ApiError, ChatRequest, choice_message
from agentic_rl.policy.base import Generation, GenerationRequest
from agentic_rl.tools.definition.prompt import render_tool_system_prompt, split_tool_system_prompt
from agentic_rl.types import (
    Action,
    Message,
    Observation,
    RolloutSampling,
    StopReason,
    ToolCall,
    ToolResult,
    Trajectory,
    Turn,
)

__all__ = ["Budget", "CallPlan", "Choice", "RolloutRecorder", "DEFAULT_SYSTEM"]

#: the system prompt of a request that lists tools but has no system message
DEFAULT_SYSTEM = "You are a helpful assistant."

#: the opening of a call that ``tool_choice`` forces, per tool format ({name}: the function)
_FORCED_OPENINGS = {
    "hermes": ('<tool_call>{{"name": "{name}", "arguments": ', '<tool_call>{"name": "'),
    "qwen3_coder": ("<tool_call>\n<function={name}>\n", "<tool_call>\n<function="),
    "mistral": ('[TOOL_CALLS][{{"name": "{name}", "arguments": ', '[TOOL_CALLS][{"name": "'),
}


@dataclass(frozen=True)
class Budget:
    """Token budgets of a rollout (the ``[rollout]`` section's).

    Attributes:
        max_new_tokens: most tokens one reply may have (a request asking for more gets this).
        max_total_tokens: most tokens of one segment (prompt, replies and spans).
    """

    max_new_tokens: int = 256
    max_total_tokens: int = 4096


@dataclass(frozen=True)
class Choice:
    """One sampled reply of a call, not yet in the stream (the next call decides).

    Attributes:
        prefill_ids, ids, logprobs: the forced opening (env tokens) and the sampled ids.
        finished: the end-of-turn token was sampled.
        text: the reply as the conversation holds it: prefill and sampled text, no end of turn.
        message: the API message returned for it (``content``, ``tool_calls``).
        action: the parsed action (content after any reasoning, tool calls).
    """

    prefill_ids: tuple[int, ...]
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finished: bool
    text: str
    message: dict[str, Any]
    action: Action


@dataclass(frozen=True)
class CallPlan:
    """What one call appends to the stream once it is sampled (computed before any change).

    Attributes:
        conversation: the call's messages, rendered form. tools: its tool schemas.
        commit: the pending choice the call continues (or that ends before a new segment).
        tail: the messages after the continued reply (the turn's observation).
        new_segment: the call starts a new segment (its prompt is ``append_ids``).
        append_ids, append_text: env tokens (and their text) before the reply.
        prefill_ids, prefill_text: the forced opening of ``tool_choice``.
        context: the segment's ids as the policy is fed them. max_new_tokens: the reply budget.
        tool_ids: the ``tool_call_id`` of each tool message of the tail, in order.
    """

    conversation: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    commit: Choice | None
    tail: tuple[Message, ...]
    new_segment: bool
    append_ids: tuple[int, ...]
    append_text: str
    prefill_ids: tuple[int, ...]
    prefill_text: str
    context: tuple[int, ...]
    max_new_tokens: int
    parse_calls: bool
    tool_ids: tuple[str, ...] = ()


def _signature(content: Any, calls: Sequence[tuple[str, Any]]) -> str:
    text = (content or "").strip() if isinstance(content, str) or content is None else content
    return json.dumps([text, [[n, a] for n, a in calls]], sort_keys=True, default=str)


@dataclass
class RolloutRecorder:
    """Builds one trajectory from the calls of one rollout (module docstring). Not thread-safe:
    the server serialises the calls of a rollout.

    Args:
        rollout_id: the trajectory id. chat: the model's chat format. budget: token budgets.
        env_id, seed, group_id: the trajectory's (``env_id`` names the agent).
        sampling: how it is sampled (per-call seeds: ``sampling.turn_seed(call)``).
        info: task metadata copied into ``Trajectory.info`` (e.g. ``level``).
    """

    rollout_id: str
    chat: Any
    budget: Budget
    env_id: str = "agent"
    seed: int = 0
    group_id: str = ""
    sampling: RolloutSampling | None = None
    info: dict[str, Any] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    segment_starts: list[int] = field(default_factory=lambda: [0])
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: int = 0
    unused_choices: int = 0
    _conv: tuple[Message, ...] = ()
    _tools: tuple[dict[str, Any], ...] = ()
    _text: list[str] = field(default_factory=list)
    _pending: list[Choice] = field(default_factory=list)
    _span_start: int = 0
    _replies: dict[str, str] = field(default_factory=dict)
    _keys: set[str] = field(default_factory=set)

    # --- planning (no change) -----------------------------------------------------------------

    def to_messages(self, request: ChatRequest) -> tuple[tuple[Message, ...], tuple[dict, ...]]:
        """The request's conversation as the chat format renders it, and the tools it lists."""
        listed = request.tools if request.tool_choice != "none" else ()
        out = []
        fmt = self.chat.tool_format
        for m in request.messages:
            if m.role != "assistant":
                out.append(Message(m.role, m.content))
                continue
            sig = _signature(m.content, [(c.name, c.arguments) for c in m.tool_calls])
            text = self._replies.get(sig)
            if text is None:  # the agent's own assistant message: written in the model's format
                calls = [
                    ToolCall(c.name, c.arguments if isinstance(c.arguments, dict) else {})
                    for c in m.tool_calls
                ]
                written = fmt.write_calls(calls) if calls else ""
                text = "\n".join(p for p in (m.content, written) if p)
            out.append(Message("assistant", text))
        if listed:
            if out and out[0].role == "system":
                if split_tool_system_prompt(out[0].content, list(listed)) is None:
                    out[0] = Message("system", render_tool_system_prompt(out[0].content, listed))
            else:
                out.insert(0, Message("system", render_tool_system_prompt(DEFAULT_SYSTEM, listed)))
        return tuple(out), tuple(listed)

    def plan(self, request: ChatRequest) -> CallPlan:
        """What the call appends and feeds the policy (module docstring); changes nothing.

        Raises:
            ApiError: 400 ``context_length_exceeded`` when the segment leaves no room for a
                reply; 400 when ``tool_choice`` forces a call in a tool format that cannot be
                prefilled.
        """
        conv, tools = self.to_messages(request)
        commit, tail, continued = self._match(conv, tools)
        seg_text = "".join(self._text)
        if commit is not None:
            seg_text += commit.text + (self.chat.end_of_turn if commit.finished else "")
        span = None
        if continued:
            view = self.chat.render_prompt(conv, tools)
            span = view[len(seg_text) :] if view.startswith(seg_text) else None
        new_segment = span is None
        text = self.chat.render_prompt(conv, tools) if new_segment else span
        append = tuple(self.chat.encode(text))
        prefill_text = self._prefill(request)
        prefill = tuple(self.chat.encode(prefill_text)) if prefill_text else ()
        if new_segment:
            context = append + prefill
        else:
            start = self.segment_starts[-1]
            committed = (*commit.prefill_ids, *commit.ids) if commit is not None else ()
            context = (*self.ids[start:], *committed, *append, *prefill)
        room = self.budget.max_total_tokens - len(context)
        max_new = min(request.max_tokens or self.budget.max_new_tokens, self.budget.max_new_tokens)
        if room < 1:
            raise ApiError(
                400,
                f"the conversation takes {len(context)} tokens, the rollout's context budget is "
                f"{self.budget.max_total_tokens} (rollout.max_total_tokens): no room for a reply",
                param="messages",
                code="context_length_exceeded",
            )
        tail_of_request = request.messages[len(request.messages) - len(tail) :] if tail else ()
        tool_ids = tuple(m.tool_call_id for m in tail_of_request if m.role == "tool")
        return CallPlan(
            conv,
            tools,
            commit,
            tail,
            new_segment,
            append,
            text,
            prefill,
            prefill_text,
            context,
            min(max_new, room),
            bool(tools),
            tool_ids,
        )

    def _match(
        self, conv: tuple[Message, ...], tools: tuple[dict, ...]
    ) -> tuple[Choice | None, tuple[Message, ...], bool]:
        """``(choice to commit, tail after it, whether the call continues the segment)``."""
        if not self._pending:
            return None, (), False
        k = len(self._conv)
        if tools == self._tools and len(conv) > k and conv[:k] == self._conv:
            for choice in self._pending:
                if conv[k] == Message("assistant", choice.text):
                    return choice, conv[k + 1 :], True
        for choice in self._pending:  # a rewritten history that kept one of the replies
            if Message("assistant", choice.text) in conv:
                return choice, (), False
        return self._pending[0], (), False

    def _prefill(self, request: ChatRequest) -> str:
        if request.tool_choice in ("auto", "none"):
            return ""
        openings = _FORCED_OPENINGS.get(self.chat.tool_format.name)
        if openings is None:
            raise ApiError(
                400,
                f"tool_choice {request.tool_choice!r} cannot be enforced for the model's tool "
                f"format {self.chat.tool_format.name!r}; use 'auto'",
                param="tool_choice",
            )
        if request.tool_choice == "required":
            return openings[1]
        return openings[0].format(name=request.tool_choice)

    def requests(self, plan: CallPlan, n: int, seed: int | None) -> list[GenerationRequest]:
        """The ``n`` generation requests of a planned call (cache keys per segment and choice).

        Args:
            seed: the call's sampling seed (None: the policy's RNG); choice j uses ``seed + j``.
        """
        segment = len(self.segment_starts) - (0 if plan.new_segment and self.ids else 1)
        key = f"{self.rollout_id}#seg{segment}"
        self._keys.update([key, *(f"{key}#c{j}" for j in range(1, n))])
        return [
            GenerationRequest(
                plan.context,
                plan.max_new_tokens,
                episode_index=j,
                cache_key=key if j == 0 else f"{key}#c{j}",
                sample_seed=None if seed is None else (seed + j) % 2**64,
            )
            for j in range(n)
        ]

    # --- recording (the only changes) ---------------------------------------------------------

    def record(self, plan: CallPlan, gens: Sequence[Generation]) -> list[Choice]:
        """Apply a planned call whose generations came back; returns its choices (pending now).

        Each generation's ids end with the end-of-turn id when ``finished``.
        """
        if plan.commit is not None:
            observation = Observation(
                plan.tail,
                tool_results=self._tool_results(plan.commit, plan.tail, plan.tool_ids),
                context_reset=plan.new_segment,
            )
            self._commit(plan.commit, observation)
        if plan.new_segment:
            if self.ids:
                self.segment_starts.append(len(self.ids))
            self.messages.extend(plan.conversation)
            self._text = []
        else:
            self.messages.extend(plan.tail)
        self._extend(plan.append_ids, 0)
        self._text.append(plan.append_text)
        self._conv, self._tools = plan.conversation, plan.tools
        choices = [self._choice(plan, g) for g in gens]
        for choice in choices:
            calls = [(c.name, c.arguments) for c in choice.action.tool_calls]
            self._replies[_signature(choice.message.get("content"), calls)] = choice.text
        self._pending = choices
        self.calls += 1
        return choices

    def _choice(self, plan: CallPlan, gen: Generation) -> Choice:
        sampled = list(gen.token_ids[:-1] if gen.finished else gen.token_ids)
        text = plan.prefill_text + self.chat.decode(sampled)
        reasoning, content = self.chat.split_reasoning(text)
        calls, errors = (
            self.chat.parse_tool_calls(content, self.calls) if plan.parse_calls else ((), ())
        )
        message = choice_message(content, reasoning, calls, errors, self.chat.tool_format.name)
        return Choice(
            plan.prefill_ids,
            tuple(gen.token_ids),
            tuple(gen.logprobs),
            gen.finished,
            text,
            message,
            Action(content, tuple(calls), tuple(errors)),
        )

    @staticmethod
    def _tool_results(choice: Choice, tail, tool_ids) -> tuple[ToolResult, ...]:
        names = {c.id: c.name for c in choice.action.tool_calls}
        tools = [m for m in tail if m.role == "tool"]
        return tuple(
            ToolResult(cid, names.get(cid, ""), m.content) for m, cid in zip(tools, tool_ids)
        )

    def _extend(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] = ()) -> None:
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs or [0.0] * len(ids))

    def _commit(self, choice: Choice, observation: Observation | None) -> None:
        self._extend(choice.prefill_ids, 0)
        self._extend(choice.ids, 1, choice.logprobs)
        self._text.append(choice.text + (self.chat.end_of_turn if choice.finished else ""))
        self.messages.append(Message("assistant", choice.text))
        self.unused_choices += len(self._pending) - 1
        self.turns.append(
            Turn(
                index=len(self.turns),
                action=choice.action,
                observation=observation if observation and observation.messages else None,
                reward=0.0,
                tool_results=observation.tool_results if observation else (),
                token_ids=tuple(self.ids[self._span_start :]),
                loss_mask=tuple(self.mask[self._span_start :]),
                logprobs=tuple(self.logprobs[self._span_start :]),
                info={"finished": choice.finished},
                truncated=not choice.finished,
                context_reset=bool(observation and observation.context_reset),
            )
        )
        self._span_start = len(self.ids)
        self._pending = []

    def cache_keys(self) -> list[str]:
        """Every cache key this rollout's requests used (to free the sampler's KV)."""
        return sorted(self._keys)

    def finish(
        self,
        reward: float | None,
        components: dict[str, float],
        failure: str | None = None,
        choice: int = 0,
        extra_info: dict[str, Any] | None = None,
    ) -> Trajectory:
        """The trajectory: the last call's choice ``choice`` (0 when out of range) joins the
        stream, and the reward (None with a ``failure``) is set.

        A rollout that made no call fails (``failure`` says so): it has nothing to train on.
        """
        if self._pending:
            pick = self._pending[choice] if 0 <= choice < len(self._pending) else self._pending[0]
            self._commit(pick, None)
        if not self.turns and failure is None:
            failure = "the agent made no chat-completion call in this rollout"
        last_cut = bool(self.turns) and self.turns[-1].truncated
        stop = StopReason.ERROR if failure else StopReason.TERMINATED
        if last_cut and not failure:
            stop = StopReason.MAX_NEW_TOKENS
        info = {**self.info, "calls": self.calls, "unused_choices": self.unused_choices}
        return Trajectory(
            env_id=self.env_id,
            seed=self.seed,
            group_id=self.group_id,
            trajectory_id=self.rollout_id,
            messages=tuple(self.messages),
            turns=tuple(self.turns),
            token_ids=tuple(self.ids),
            loss_mask=tuple(self.mask),
            logprobs=tuple(self.logprobs),
            stop_reason=stop,
            reward=None if failure else reward,
            reward_components={} if failure else dict(components),
            info={**info, **(extra_info or {})},
            segment_starts=tuple(self.segment_starts),
            failure=failure,
            sampling=self.sampling,
        )
