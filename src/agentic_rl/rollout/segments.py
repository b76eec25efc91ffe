"""A segment's prompt and the span after each reply: the rollout engine's use of the chat format.

A segment (:mod:`agentic_rl.rollout.context`) starts with a prompt rendered from the conversation
since the last context reset; after each reply, the chat format's
:meth:`~agentic_rl.policy.chat_template.TemplateChatFormat.next_context` gives the span to append
(env messages and the next assistant header) or None when the template shows the history
differently from how it was fed (a thinking template that drops earlier thoughts, a ``| trim`` of
a reply): then the segment is closed and a new one starts from the template's own rendering of the
conversation. ChatML (:class:`~agentic_rl.policy.chat.ChatFormat`) never rewrites history.

Each function takes the engine's per-episode state, which carries ``conversation`` (messages since
the last reset), ``tools`` (the schemas of the reset observation), ``text`` (the text pieces of the
current segment: its prompt, each reply as sampled with its end-of-turn token, each span),
``ids``/``mask`` and ``segment_starts``.
"""

from __future__ import annotations

import logging
from typing import Any

from agentic_rl.rollout.context import ContextBudgetError, ContextBuilder

log = logging.getLogger(__name__)

__all__ = ["prompt", "continuation", "new_segment"]


def prompt(ep: Any, chat: Any, config: Any) -> tuple[list[int], str] | None:
    """``(ids, text)`` of a segment's first prompt: ``ep.conversation`` rendered whole or, when it
    exceeds ``config.context_max_tokens``, as the :class:`ContextBuilder` fits it (None: the
    system prompt and task alone exceed the budget)."""

    def render(messages):
        return chat.render_prompt(messages, ep.tools)

    text = render(ep.conversation)
    ids = chat.encode(text)
    if config.context_max_tokens == 0 or len(ids) <= config.context_max_tokens:
        return ids, text
    if len(ep.conversation) < 2:
        return None
    builder = ContextBuilder(
        lambda t: len(chat.encode(t)), config.context_max_tokens, render=render
    )
    system, task, *history = ep.conversation
    try:
        built = builder.build(system, task, history)
    except ContextBudgetError:
        log.warning("episode %s: system prompt and task exceed context_max_tokens", ep.key)
        return None
    text = render(built.messages)
    return chat.encode(text), text


def continuation(ep: Any, chat: Any) -> tuple[list[int], str] | None:
    """``(ids, text)`` of the span after the latest reply (``ep.conversation`` ends with it and the
    env's messages), or None when the chat format needs a new segment."""
    text = chat.next_context(ep.conversation, "".join(ep.text), ep.tools)
    if text is None:
        return None
    return chat.encode(text), text


def new_segment(ep: Any, chat: Any, config: Any) -> None:
    """Close the current segment and start one whose first tokens are the rebuilt prompt (mask 0);
    ``ep.stop`` becomes ``MAX_TOKENS`` when the prompt does not fit."""
    from agentic_rl.types import StopReason

    built = prompt(ep, chat, config)
    if built is None or len(built[0]) >= config.max_total_tokens:
        ep.stop = StopReason.MAX_TOKENS
        return
    ep.stale_keys.append(ep.cache_key)
    ep.segment_starts.append(len(ep.ids))
    ep.extend(built[0], 0)
    ep.text = [built[1]]
