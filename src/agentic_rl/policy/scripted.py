"""A scripted policy: replies come from a Python function (tests, demonstrations, oracles)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.policy.chat import ChatFormat


class ScriptedPolicy:
    """Policy whose reply text is ``reply_fn(episode_index, context_text)``.

    The reply plus the end-of-turn token is tokenized once and returned as if sampled, with
    logprobs 0.0 (probability 1 under the script). A reply longer than the request's
    ``max_new_tokens`` is cut there and marked unfinished, as a real model's would be.

    Args:
        chat: the chat format (tokenizer) of the model the script stands in for.
        reply_fn: maps (episode index, decoded context text) to the reply text.
    """

    def __init__(self, chat: ChatFormat, reply_fn: Callable[[int, str], str]):
        self.chat = chat
        self.reply_fn = reply_fn

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Return the scripted reply of every request (``sampling`` is ignored)."""
        out = []
        for req in requests:
            text = self.reply_fn(req.episode_index, self.chat.decode(req.context_ids))
            ids = self.chat.encode(self.chat.render_assistant_reply(text))[: req.max_new_tokens]
            finished = bool(ids) and ids[-1] == self.chat.eos_token_id
            out.append(Generation(tuple(ids), (0.0,) * len(ids), finished))
        return out
