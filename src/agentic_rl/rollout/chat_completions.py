"""Episodes through any OpenAI-compatible chat-completions server, with tools (evaluation, data).

For evaluation and data collection with a model the trainer does not hold (a hosted API, a vLLM
or llama.cpp server; ``agentic-rl eval --base-url URL`` runs it): each turn sends the
conversation to ``POST /v1/chat/completions`` with the env's tools
(``tools=[{"type": "function", "function": schema}]``); the reply's tool calls,
structured (``message.tool_calls``) or written as ``<tool_call>…</tool_call>`` text (the
format our envs describe in their system prompt), become the :class:`Action` the env steps.

The trajectories have messages, turns, rewards and tool results but **no token stream**
(``token_ids`` empty, ``info["token_ids"] = "none"``): they can be scored, viewed, exported and
used as SFT data (tokenized then, once), but not for a policy-gradient update, which needs the
sampled ids and their logprobs (use :class:`~agentic_rl.policy.openai_compat.OpenAICompatPolicy`
with the normal rollout engine for that).

An env step with ``Observation.context_reset`` (e.g. memory-recall-v0's new session) wipes the
conversation the server sees, as the rollout engine does: later requests carry the system
message and the messages from the reset on; the trajectory keeps every message.

A reply the server cut at ``max_tokens`` (``finish_reason == "length"``) is recorded as the last
turn with ``Turn.truncated`` and not given to the env; the episode ends
``StopReason.MAX_NEW_TOKENS`` (as in the rollout engine).

A request that fails after the client's retries (timeout, connection, 4xx/5xx) ends its
episode with ``StopReason.ERROR`` and ``Trajectory.failure``; an env that raises does the same.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.tools import parse_tool_calls
from agentic_rl.tools.definition.parser import call_id
from agentic_rl.types import (
    Action,
    Message,
    RolloutSampling,
    StopReason,
    ToolCall,
    ToolCallError,
    Trajectory,
    Turn,
)

log = logging.getLogger(__name__)


def _tool_calls(
    message: Any, turn: int, first: int = 0
) -> tuple[list[ToolCall], list[ToolCallError]]:
    """The structured tool calls of a chat reply, numbered :func:`~agentic_rl.tools.definition.parser.call_id`
    ``(turn, k)`` from ``k = first``, the number of ``<tool_call>`` blocks in the reply's text
    (accepted or rejected): one position per call, a rejected one's left free as the parser
    does, so every call and error of the turn has its own id and
    :func:`~agentic_rl.tools.definition.parser.in_call_order` keeps them in order."""
    calls, errors = [], []
    for k, call in enumerate(getattr(message, "tool_calls", None) or [], start=first):
        raw = call.function.arguments or "{}"
        try:
            args = json.loads(raw)
            if not isinstance(args, dict):
                raise ValueError("arguments are not a JSON object")
        except ValueError as exc:
            errors.append(ToolCallError(raw, f"arguments of {call.function.name!r}: {exc}"))
            continue
        calls.append(ToolCall(call.function.name, args, raw, call_id(turn, k)))
    return calls, errors


def _api_messages(
    messages: Sequence[Message],
    calls_of: dict[int, list[ToolCall]],
    ids_of: dict[int, list[str]],
    start: int = 0,
) -> list[dict[str, Any]]:
    """OpenAI message dicts of the system message(s) that open ``messages`` and of every message
    from index ``start`` on (the current context); assistant messages carry their tool calls,
    tool messages their ids."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i < start and not (m.role == "system" and all(x.role == "system" for x in messages[:i])):
            continue
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant" and calls_of.get(i):
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in calls_of[i]
            ]
        if m.role == "tool":
            d["tool_call_id"] = ids_of.get(i, ["tool"])[0]
        out.append(d)
    return out


@dataclass
class _ChatEpisode:
    """The running state of one chat episode (what the trajectory is built from)."""

    env: Env
    seed: int
    group_id: str
    policy_version: int | None
    sampling: RolloutSampling
    tid: str = field(default_factory=lambda: uuid.uuid4().hex)
    info: dict[str, Any] = field(default_factory=lambda: {"token_ids": "none"})
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls_of: dict[int, list[ToolCall]] = field(default_factory=dict)
    ids_of: dict[int, list[str]] = field(default_factory=dict)
    context_start: int = 0  # index in `messages` where the context the server sees starts
    stop: StopReason | None = None
    failure: str | None = None

    def fail(self, why: str) -> None:
        self.stop, self.failure = StopReason.ERROR, why

    def trajectory(self) -> Trajectory:
        return Trajectory(
            self.env.env_id,
            self.seed,
            self.group_id,
            self.tid,
            tuple(self.messages),
            tuple(self.turns),
            (),
            (),
            (),
            self.stop or StopReason.MAX_TURNS,
            info=self.info,
            failure=self.failure,
            policy_version=self.policy_version,
            sampling=self.sampling,
        )


def run_chat_episode(
    client: Any,
    model: str,
    env: Env,
    seed: int,
    group_id: str,
    *,
    max_turns: int = 3,
    max_tokens: int = 256,
    temperature: float = 0.0,
    policy_version: int | None = None,
) -> Trajectory:
    """Run one episode of ``env`` through ``client.chat.completions`` (see the module docstring).

    Args:
        client: an ``openai.OpenAI`` client (:func:`~agentic_rl.policy.openai_compat.make_client`).
        model: served model name. max_turns: most assistant turns (then ``MAX_TURNS``).
        max_tokens: most tokens per reply. temperature: 0 = greedy.
        policy_version: recorded as ``Trajectory.policy_version`` when given.

    Returns:
        The trajectory (no token stream; ``sampling`` records the temperature and ``max_tokens``,
        no seed: the server's RNG); a failed request or a raising env ends it with
        ``StopReason.ERROR`` and ``Trajectory.failure``. Never raises for those.

    Raises:
        ValueError: ``temperature`` < 0 or ``max_tokens`` < 1.
    """
    if temperature < 0 or max_tokens < 1:
        raise ValueError(
            f"need temperature >= 0 and max_tokens >= 1, got {temperature}, {max_tokens}"
        )
    how = RolloutSampling(None, 0, temperature or 1.0, temperature == 0, max_tokens)
    ep = _ChatEpisode(env, seed, group_id, policy_version, how)
    try:
        obs, reset_info = env.reset(seed=seed, options={"trajectory_id": ep.tid})
    except Exception as exc:  # noqa: BLE001 - a broken env fails its episode only
        ep.fail(f"reset raised {type(exc).__name__}: {exc}")
        return ep.trajectory()
    ep.info.update(reset_info)
    ep.messages.extend(obs.messages)
    tools = [{"type": "function", "function": schema} for schema in obs.tools]
    for turn in range(max_turns):
        try:
            response = client.chat.completions.create(
                model=model,
                messages=_api_messages(ep.messages, ep.calls_of, ep.ids_of, ep.context_start),
                max_tokens=max_tokens,
                temperature=temperature,
                **({"tools": tools} if tools else {}),
            )
        except Exception as exc:  # noqa: BLE001 - a failed request fails its episode only
            log.warning("chat completion failed (episode %s): %s", ep.tid, exc)
            ep.fail(f"inference request failed: {type(exc).__name__}: {exc}")
            break
        if not _chat_turn(ep, turn, response):
            break
    return ep.trajectory()


def _chat_turn(ep: _ChatEpisode, turn: int, response: Any) -> bool:
    """Step the env with the server's reply; False when the episode ended (``ep.stop`` set)."""
    reply = response.choices[0].message
    text = reply.content or ""
    if getattr(response.choices[0], "finish_reason", None) == "length":  # cut: not an action
        ep.messages.append(Message("assistant", text))
        ep.turns.append(Turn(turn, Action(text), None, 0.0, (), (), (), (), {}, truncated=True))
        ep.stop = StopReason.MAX_NEW_TOKENS
        return False
    text_calls, text_errors = parse_tool_calls(text, turn_index=turn)
    api_calls, api_errors = _tool_calls(reply, turn, first=len(text_calls) + len(text_errors))
    action = Action(
        text, tuple(text_calls) + tuple(api_calls), tuple(text_errors) + tuple(api_errors)
    )
    ep.messages.append(Message("assistant", text))
    ep.calls_of[len(ep.messages) - 1] = list(action.tool_calls)
    try:
        obs, reward, terminated, truncated, step_info = ep.env.step(action)
    except Exception as exc:  # noqa: BLE001
        ep.fail(f"step raised {type(exc).__name__}: {exc}")
        return False
    call_ids = [r.call_id or f"call_{turn}_error_{k}" for k, r in enumerate(obs.tool_results)]
    if obs.context_reset:  # the env wiped the conversation: system message + what follows
        ep.context_start = len(ep.messages)
    for m in obs.messages:
        ep.messages.append(m)
        if m.role == "tool" and call_ids:
            ep.ids_of[len(ep.messages) - 1] = [call_ids.pop(0)]
    ep.turns.append(Turn.from_step(turn, action, obs, reward, step_info))
    if terminated or truncated:
        ep.stop = StopReason.TERMINATED if terminated else StopReason.TRUNCATED
        return False
    return True


def run_chat_episodes(
    client: Any,
    model: str,
    envs: Sequence[Env],
    seeds: Sequence[int],
    group_ids: Sequence[str],
    *,
    max_concurrency: int = 8,
    **kwargs: Any,
) -> list[Trajectory]:
    """Run one episode per env concurrently (up to ``max_concurrency`` in flight), in order.

    ``kwargs`` go to :func:`run_chat_episode`.

    Raises:
        ValueError: ``envs``, ``seeds``, ``group_ids`` differ in length, or ``max_concurrency`` < 1.
    """
    if not len(envs) == len(seeds) == len(group_ids):
        raise ValueError("envs, seeds and group_ids must have the same length")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    with ThreadPoolExecutor(max_workers=min(max_concurrency, max(len(envs), 1))) as pool:
        return list(
            pool.map(
                lambda a: run_chat_episode(client, model, a[0], a[1], a[2], **kwargs),
                zip(envs, seeds, group_ids),
            )
        )
