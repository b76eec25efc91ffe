"""A local judge model through the project's own policy (HF, fast, scripted, OpenAI-compatible).

:class:`PolicyJudgeBackend` is a :class:`~agentic_rl.rewards.judge.JudgeBackend`: it renders each
judge prompt with the chat format (ChatML, special-token text in the quoted content neutralised
by :meth:`~agentic_rl.policy.chat.ChatFormat.render_message`), sends all of them to
``policy.generate`` as one batch (greedy by default) and decodes the replies. It lives in the
rollout layer because it joins the rewards layer (the judge) and the policy layer (the model).

Timeout: ``generate`` runs in a worker thread and the batch fails as a whole if it has not
returned after ``timeout_s``; a local forward pass cannot be interrupted, so that thread runs
on in the background until the batch ends (``max_new_tokens`` bounds it). A policy that raises
fails the batch the same way. Either way every prompt of the batch gets an error, and the
judge excludes its trajectories.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from agentic_rl.policy.base import GenerationRequest, Policy, SamplingParams
from agentic_rl.policy.chat import IM_END, ChatFormat
from agentic_rl.rewards.judge import JudgeCompletion
from agentic_rl.types import Message

__all__ = ["PolicyJudgeBackend"]


class PolicyJudgeBackend:
    """A judge backend on a local :class:`~agentic_rl.policy.base.Policy`.

    Args:
        policy: the judge model's policy (e.g. ``FastPolicy``/``HFPolicy`` on a separate model,
            or a ``ScriptedPolicy`` in tests).
        chat: its chat format.
        name: identifies the judge in cache keys (e.g. the model's directory).
        max_new_tokens: most tokens per verdict.
        timeout_s: seconds the whole batch may take.
        sampling: how the judge samples (default greedy: the same prompt, the same verdict).
        sample_seed: seed of request i's own random stream is ``sample_seed + i``.

    Token counts: prompt tokens are the rendered prompt's ids, completion tokens the sampled ids.
    """

    def __init__(
        self,
        policy: Policy,
        chat: ChatFormat,
        *,
        name: str = "policy",
        max_new_tokens: int = 256,
        timeout_s: float = 300.0,
        sampling: SamplingParams = SamplingParams(greedy=True),
        sample_seed: int = 0,
    ):
        if max_new_tokens < 1 or timeout_s <= 0:
            raise ValueError(
                f"max_new_tokens must be >= 1 and timeout_s > 0, got {max_new_tokens}, {timeout_s}"
            )
        self.policy, self.chat, self.name = policy, chat, name
        self.max_new_tokens, self.timeout_s = max_new_tokens, timeout_s
        self.sampling, self.sample_seed = sampling, sample_seed

    def complete(self, prompts: Sequence[Sequence[Message]]) -> list[JudgeCompletion]:
        """One batched ``generate`` over all prompts; a timeout or a raising policy fails all."""
        if not prompts:
            return []
        requests = [
            GenerationRequest(
                self.chat.encode(self.chat.render_prompt(messages)),
                self.max_new_tokens,
                episode_index=i,
                sample_seed=self.sample_seed + i,
            )
            for i, messages in enumerate(prompts)
        ]
        result: dict[str, object] = {}

        def work() -> None:
            try:
                result["generations"] = self.policy.generate(requests, self.sampling)
            except Exception as exc:  # noqa: BLE001 - reported as every prompt's error
                result["error"] = f"the judge policy raised {type(exc).__name__}: {exc}"

        thread = threading.Thread(target=work, name="policy-judge", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            result["error"] = f"the judge policy timed out after {self.timeout_s:g} s"
        if "error" in result:
            return [JudgeCompletion(error=str(result["error"]))] * len(prompts)
        return [
            JudgeCompletion(
                self.chat.decode(g.token_ids).removesuffix(IM_END),
                len(r.context_ids),
                len(g.token_ids),
            )
            for r, g in zip(requests, result["generations"])
        ]
