"""Token-level chat rendering for multi-turn rollouts (ChatML).

The rollout engine owns tokens (DESIGN.md, decision 1). It asks this module for the *text* of
each environment span and tokenizes that span exactly once; the policy's sampled ids are kept
as sampled. The layout, for SmolLM2 and other ChatML models, is::

    <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{task}<|im_end|>\\n<|im_start|>assistant\\n   (env, mask 0)
    {sampled reply}<|im_end|>                                                                      (policy, mask 1)
    \\n<|im_start|>tool\\n{tool result}<|im_end|>\\n<|im_start|>assistant\\n                           (env, mask 0)
    {sampled reply}<|im_end|>                                                                      (policy, mask 1)

A reply cut by the per-turn token budget gets its ``<|im_end|>`` appended as environment text
(mask 0). Tool results are rendered with the role ``tool``. Special-token text inside tool or
task content (e.g. a literal ``<|im_end|>``) is neutralised so an environment cannot inject
turn boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentic_rl.types import Message

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def _sanitize(text: str) -> str:
    return text.replace(IM_START, "<|im_start |>").replace(IM_END, "<|im_end |>")


@dataclass(frozen=True)
class ChatFormat:
    """ChatML rendering bound to a tokenizer.

    Attributes:
        tokenizer: a HF tokenizer whose vocabulary has ``<|im_start|>``/``<|im_end|>``.
    """

    tokenizer: object

    @property
    def eos_token_id(self) -> int:
        """Id of ``<|im_end|>``, which ends every assistant turn."""
        return self.tokenizer.convert_tokens_to_ids(IM_END)

    def encode(self, text: str) -> list[int]:
        """Tokenize one span (special-token text is mapped to its special id, no BOS added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids exactly (special tokens kept, no whitespace clean-up)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @staticmethod
    def render_message(message: Message) -> str:
        """``<|im_start|>{role}\\n{content}<|im_end|>\\n`` with special-token text neutralised."""
        return f"{IM_START}{message.role}\n{_sanitize(message.content)}{IM_END}\n"

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """Text of the first context: all messages, then the assistant header."""
        return "".join(self.render_message(m) for m in messages) + f"{IM_START}assistant\n"

    def render_continuation(self, messages: Sequence[Message], *, reply_closed: bool) -> str:
        """Text appended after a sampled reply: close the turn, the env messages, the next header.

        Args:
            messages: env messages (tool results, feedback) to show.
            reply_closed: True if the policy sampled ``<|im_end|>`` itself.
        """
        head = "\n" if reply_closed else f"{IM_END}\n"
        return head + self.render_prompt(messages)

    def render_assistant_reply(self, text: str) -> str:
        """Text of a scripted (demonstration) reply including its end-of-turn token."""
        return f"{text}{IM_END}"
