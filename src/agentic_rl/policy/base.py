"""The policy interface: batched token-in/token-out generation.

A policy receives, for each live episode, the exact token ids of its context and returns the
token ids it sampled with their log-probabilities. It never sees or returns re-tokenized text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens.

    Attributes:
        temperature: softmax temperature T (> 0); recorded logprobs are log-softmax(logits / T),
            the sampling distribution itself, so importance ratios are exact.
        greedy: take the argmax token (evaluation); logprobs are then at T = ``temperature``.
    """

    temperature: float = 1.0
    greedy: bool = False

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class GenerationRequest:
    """One episode's context for one turn.

    Attributes:
        context_ids: the exact token ids fed to the model (length L >= 1).
        max_new_tokens: most tokens to sample for this request.
        episode_index: index of the episode in the rollout batch (scripted policies use it).
        cache_key: id unique to the episode; a policy may keep the episode's KV cache under it
            between turns (None: no reuse).
        sample_seed: seed of this request's own random stream (see
            :mod:`agentic_rl.policy.sampling`): the sampled tokens then do not depend on which
            other requests share the batch. None: the policy's shared RNG.
    """

    context_ids: Sequence[int]
    max_new_tokens: int
    episode_index: int = 0
    cache_key: str | None = None
    sample_seed: int | None = None


@dataclass(frozen=True)
class Generation:
    """What the policy sampled for one request.

    Attributes:
        token_ids: sampled ids, ending with the end-of-turn id if ``finished``.
        logprobs: log-probability of each sampled id under the sampling distribution
            (same length as ``token_ids``; 0.0 for scripted policies).
        finished: True if the end-of-turn token was sampled (False: cut by max_new_tokens).
        policy_versions: the policy version that sampled each id (same length as
            ``token_ids``), set by a sampler whose weights change while it decodes (async
            training, :mod:`agentic_rl.trainer.sampling.async_sampler`); empty when not recorded.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finished: bool
    policy_versions: tuple[int, ...] = ()


class Policy(Protocol):
    """Anything that can continue a batch of token contexts."""

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Sample one continuation per request, in order."""
        ...
