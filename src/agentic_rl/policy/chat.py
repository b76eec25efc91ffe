"""Token-level chat rendering for multi-turn rollouts (ChatML).

The rollout engine owns tokens (docs/design.md, decision 1). It asks this module for the *text* of
each environment span and tokenizes that span exactly once; the policy's sampled ids are kept
as sampled. The layout, for SmolLM2 and other ChatML models, is::

    <|im_start|>system\\n{system}<|im_end|>\\n                                 (env, mask 0: the prompt, 2 lines)
    <|im_start|>user\\n{task}<|im_end|>\\n<|im_start|>assistant\\n
    {sampled reply}<|im_end|>                                                  (policy, mask 1)
    \\n<|im_start|>tool\\n{tool result}<|im_end|>\\n<|im_start|>assistant\\n   (env, mask 0)
    {sampled reply}<|im_end|>                                                  (policy, mask 1)

A reply that ended without ``<|im_end|>`` in its sampled ids (a server that stopped on it but
did not return it) gets it appended as environment text (mask 0); a reply cut by the token
budget is not continued: it ends its episode (see :mod:`agentic_rl.rollout.engine`). Tool
results are rendered with the role ``tool``. Special-token text inside tool or task content
(e.g. a literal ``<|im_end|>``) is neutralised so an environment cannot inject turn boundaries.

Special tokens. :meth:`ChatFormat.encode` maps only the two chat markers to their special ids;
every other special-token string of the tokenizer in a span (``<|endoftext|>``, ``<file_sep>``,
``<jupyter_code>``, ...) is tokenized as plain text (HF ``split_special_tokens``), so env, tool
and task text never produces a special id. Since content is sanitised of the markers, the
markers left in a rendered span are the template's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.tools.definition.formats import TOOL_FORMATS, ToolFormat, convert_hermes_reply
from agentic_rl.tools.definition.prompt import render_tool_system_prompt, split_tool_system_prompt
from agentic_rl.types import Message

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
_MARKERS = re.compile(f"({re.escape(IM_START)}|{re.escape(IM_END)})")


def _sanitize(text: str) -> str:
    return text.replace(IM_START, "<|im_start |>").replace(IM_END, "<|im_end |>")


@dataclass(frozen=True)
class ChatFormat:
    """ChatML rendering bound to a tokenizer.

    Attributes:
        tokenizer: a HF tokenizer whose vocabulary has ``<|im_start|>``/``<|im_end|>``.
        tool_format: how replies write tool calls (default Hermes ``<tool_call>``, the format the
            env prompts teach; :mod:`agentic_rl.tools.definition.formats`).
    """

    tokenizer: object
    tool_format: ToolFormat = field(default_factory=lambda: TOOL_FORMATS["hermes"])
    #: ChatML has no reasoning markers of its own (a thinking model's template: chat_template.py)
    reasoning_markers = None

    @property
    def eos_token_id(self) -> int:
        """Id of ``<|im_end|>``, which ends every assistant turn."""
        return self.tokenizer.convert_tokens_to_ids(IM_END)

    def encode(self, text: str) -> list[int]:
        """Tokenize one span, no BOS added.

        ``<|im_start|>``/``<|im_end|>`` become their special ids; the text between them is
        tokenized with special tokens split (``<|endoftext|>`` is plain text, never id 0). The
        result equals the tokenizer's own encoding whenever the text holds no other special
        token string.
        """
        ids: list[int] = []
        for i, piece in enumerate(_MARKERS.split(text)):
            if i % 2:  # the split keeps the markers at odd positions
                ids.append(self._marker_ids[piece])
            elif piece:
                ids.extend(self._encode_plain(piece))
        return ids

    @functools.cached_property
    def _marker_ids(self) -> dict[str, int]:
        return {m: self.tokenizer.convert_tokens_to_ids(m) for m in (IM_START, IM_END)}

    @functools.cached_property
    def _plain_backend(self):
        """A private copy of the fast tokenizer's backend with ``encode_special_tokens`` on (None
        for a slow tokenizer). A copy, because HF's ``split_special_tokens=True`` flips a flag on
        the shared backend, which other threads encoding at the same time would see."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        plain = Tokenizer.from_str(backend.to_str())
        plain.encode_special_tokens = True
        plain.no_truncation()
        plain.no_padding()
        return plain

    def _encode_plain(self, text: str) -> list[int]:
        if self._plain_backend is not None:
            return self._plain_backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)[
            "input_ids"
        ]

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids exactly (special tokens kept, no whitespace clean-up)."""
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    @staticmethod
    def render_message(message: Message) -> str:
        """``<|im_start|>{role}\\n{content}<|im_end|>\\n`` with special-token text neutralised."""
        return f"{IM_START}{message.role}\n{_sanitize(message.content)}{IM_END}\n"

    def render_prompt(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
    ) -> str:
        """Text of the first context: all messages, then the assistant header. The env's system
        prompt lists ``tools``; with a tool format other than Hermes, a list that
        :func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt` wrote is rewritten
        with that format's call syntax."""
        if (
            self.tool_format.name != "hermes"
            and tools
            and messages
            and messages[0].role == "system"
        ):
            split = split_tool_system_prompt(messages[0].content, tools)
            if split is not None:
                instructions, style = split
                header = self.tool_format.tools_header()
                text = render_tool_system_prompt(instructions, tools, style, header)
                messages = [Message("system", text), *messages[1:]]
        return "".join(self.render_message(m) for m in messages) + f"{IM_START}assistant\n"

    def next_context(
        self,
        conversation: Sequence[Message],
        segment_text: str,
        tools: Sequence[dict[str, Any]] = (),
    ) -> str:
        """The span after a reply: :meth:`render_continuation` of the messages after the last
        assistant message of ``conversation`` (ChatML never rewrites history, so never None;
        same interface as :meth:`~agentic_rl.policy.chat_template.TemplateChatFormat.next_context`)."""
        k = len(conversation)
        while k and conversation[k - 1].role != "assistant":
            k -= 1
        return self.render_continuation(
            conversation[k:], reply_closed=segment_text.endswith(IM_END)
        )

    def render_continuation(self, messages: Sequence[Message], *, reply_closed: bool) -> str:
        """Text appended after a sampled reply: close the turn, the env messages, the next header.

        Args:
            messages: env messages (tool results, feedback) to show.
            reply_closed: True if the policy sampled ``<|im_end|>`` itself.
        """
        head = "\n" if reply_closed else f"{IM_END}\n"
        return head + self.render_prompt(messages)

    def render_assistant_reply(self, text: str) -> str:
        """Text of a scripted (demonstration) reply including its end-of-turn token (Hermes calls
        rewritten in :attr:`tool_format`)."""
        return f"{convert_hermes_reply(text, self.tool_format)}{IM_END}"

    @property
    def end_of_turn(self) -> str:
        """The text of the end-of-turn token."""
        return IM_END

    def parse_tool_calls(self, text: str, turn_index: int = 0):
        """The tool calls of a reply, parsed in :attr:`tool_format` (``(calls, errors)``)."""
        return self.tool_format.parse(text, turn_index)

    @staticmethod
    def split_reasoning(text: str) -> tuple[str, str]:
        """``("", text)``: ChatML replies carry no reasoning markers of the template's."""
        return "", text
