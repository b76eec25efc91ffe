"""Token-in/token-out generation through an OpenAI-compatible server (vLLM, SGLang, llama.cpp).

:class:`OpenAICompatPolicy` implements :class:`~agentic_rl.policy.base.Policy`: each request's
exact context token ids are sent as the ``prompt`` of ``POST /v1/completions`` (the OpenAI API
accepts a list of token ids there), with ``logprobs=1``. The reply must carry the sampled token
ids (``choices[0].token_ids``: vLLM ``return_token_ids``; or ``logprobs.tokens`` written as
``token_id:N``: vLLM ``return_tokens_as_token_ids``, asked for in every request) and their
logprobs. A server that answers with text only (no ids) fails the request: re-tokenizing its
text would break token-in/token-out (docs/design.md, decision 1). For evaluation and data
collection with any server, see :mod:`agentic_rl.rollout.chat_completions` (chat completions
with tools, no token ids needed).

Importance-ratio correction. The server's logprobs are recorded as the trajectory's
``logprobs`` and become ``old_logprobs`` of the PPO ratio ρ_t = π_θ(a_t|s_t) / μ(a_t|s_t), where
μ is the distribution the server really sampled from (its weights version, its kernels and
quantization). So ρ corrects both staleness and the sampler/trainer numerical mismatch,
token by token, and PPO's clip bounds it (the "truncated importance sampling" view of Yao et
al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"); the update
logs ``train/logprob_diff`` = mean |log π_θ − log μ|. Requirements for ρ to be right: the server
must report logprobs of the distribution it sampled from, i.e. after temperature (vLLM:
``--logprobs-mode processed_logprobs``) or the rollout temperature must be 1.0; and no other
sampling filter (top-p, top-k, repetition penalty) may be on, because the trainer scores the
plain temperature softmax. This module sends ``top_p=1`` and no penalties.

Seeds. A request's ``sample_seed`` (:func:`~agentic_rl.types.request_seed`, in [0, 2**64)) is
sent as the completions API's ``seed``, reduced mod 2**63 to fit a signed 64-bit field (vLLM
then samples that request from a generator of its own), so a rollout recorded with its
``Trajectory.sampling`` can be re-sampled from the server as far as the server honours seeds.

End of turn. If the server stopped on the end-of-turn token but did not return it, the reply
is returned as not ``finished``: the engine then appends ``<|im_end|>`` as environment text
(loss mask 0), so no token without a logprob is ever trained.

Failures. Timeouts and connection errors, 408/429/5xx answers are retried by the OpenAI client
(``max_retries``, exponential back-off). A request that still fails, or whose answer lacks
token ids or logprobs, is recorded in :attr:`OpenAICompatPolicy.failures` under the episode's
``cache_key`` (which the rollout engine sets to the trajectory id) and answered with an empty
generation; later turns of that episode are not sent. :func:`mark_failed_requests` then marks
those trajectories failed (``Trajectory.failure``), so the update excludes them: never a crashed
step, never a silent zero reward.

Requires the ``openai`` client (extra ``openai``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.types import Trajectory

log = logging.getLogger(__name__)

_TOKEN_ID_PREFIX = "token_id:"


class RequestFailedError(RuntimeError):
    """A completion request failed after the client's retries, or its answer was unusable."""


def make_client(
    base_url: str, *, api_key: str = "EMPTY", timeout_s: float = 60.0, max_retries: int = 2
):
    """An ``openai.OpenAI`` client for ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``).

    Args:
        timeout_s: seconds per attempt (connect + read).
        max_retries: extra attempts on connection errors, timeouts, 408/409/429/5xx.

    Raises:
        ValueError: ``timeout_s`` <= 0 or ``max_retries`` < 0.
        ImportError: the ``openai`` package is not installed (extra ``openai``).
    """
    if timeout_s <= 0 or max_retries < 0:
        raise ValueError(
            f"timeout_s must be > 0 and max_retries >= 0, got {timeout_s}, {max_retries}"
        )
    import openai

    return openai.OpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
    )


def parse_completion_choice(choice: Any, eos_token_id: int) -> Generation:
    """Sampled ids, their logprobs and ``finished`` from one ``/v1/completions`` choice.

    Accepts ``choice.token_ids`` (vLLM ``return_token_ids``) or ``logprobs.tokens`` of the form
    ``token_id:N`` (vLLM ``return_tokens_as_token_ids``); logprobs from
    ``logprobs.token_logprobs``.

    Raises:
        RequestFailedError: no token ids, no logprobs, or lengths that differ.
    """
    extra = getattr(choice, "model_extra", None) or {}
    lp = getattr(choice, "logprobs", None)
    tokens = list(getattr(lp, "tokens", None) or [])
    logprobs = getattr(lp, "token_logprobs", None)
    ids = getattr(choice, "token_ids", None) or extra.get("token_ids")
    if (
        ids is None
        and tokens
        and all(isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX) for t in tokens)
    ):
        ids = [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    if ids is None:
        raise RequestFailedError(
            "the server returned no sampled token ids (needs vLLM-style return_token_ids "
            "or return_tokens_as_token_ids); use chat completions for evaluation instead"
        )
    if logprobs is None or len(logprobs) != len(ids) or any(x is None for x in logprobs):
        raise RequestFailedError(
            f"the server returned {0 if logprobs is None else len(logprobs)} logprobs "
            f"for {len(ids)} sampled tokens"
        )
    ids, logprobs = [int(i) for i in ids], [float(x) for x in logprobs]
    finished = choice.finish_reason == "stop" and bool(ids) and ids[-1] == eos_token_id
    return Generation(tuple(ids), tuple(logprobs), finished)


class OpenAICompatPolicy:
    """A :class:`~agentic_rl.policy.base.Policy` that samples through ``/v1/completions``.

    Args:
        client: from :func:`make_client` (or any object with ``completions.create``).
        model: the served model name.
        eos_token_id: id of the end-of-turn token (``ChatFormat.eos_token_id``).
        max_concurrency: requests in flight at once (the server batches them).
        policy_version: version of the weights the server holds (see :meth:`set_policy_version`).
        extra_body: fields merged over the server-specific defaults sent with every request
            (``return_tokens_as_token_ids``, ``return_token_ids``, ``skip_special_tokens``,
            ``top_k=-1``, ``stop_token_ids=[eos_token_id]``: vLLM's names, checked against
            vLLM 0.32 in tests/policy/test_vllm_server.py); e.g. ``{"top_k": 0}`` for a server
            whose "off" is 0. ``stop_token_ids`` makes the server stop on the end-of-turn token
            even where the model's own EOS is another token; vLLM keeps it in ``token_ids``.

    Attributes:
        failures: ``{cache_key: message}`` of requests that failed (see the module docstring).
    """

    def __init__(
        self,
        client: Any,
        model: str,
        eos_token_id: int,
        *,
        max_concurrency: int = 8,
        policy_version: int = 0,
        extra_body: dict[str, Any] | None = None,
    ):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.client, self.model, self.eos_token_id = client, model, eos_token_id
        self.max_concurrency = max_concurrency
        self.policy_version = policy_version
        self.extra_body = {
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "top_k": -1,
            "stop_token_ids": [int(eos_token_id)],
            **(extra_body or {}),
        }
        self.failures: dict[str, str] = {}
        self._lock = threading.Lock()

    def set_policy_version(self, version: int) -> None:
        """Record that the server now serves weights ``version`` (after a sync or reload)."""
        self.policy_version = int(version)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """Sample one continuation per request, in order; failed requests give an empty generation."""
        with ThreadPoolExecutor(
            max_workers=min(self.max_concurrency, max(len(requests), 1))
        ) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))

    def _one(self, req: GenerationRequest, sampling: SamplingParams) -> Generation:
        key = req.cache_key or f"episode-{req.episode_index}"
        if key in self.failures:
            return Generation((), (), False)
        try:
            return self.complete(req, sampling)
        except Exception as exc:  # noqa: BLE001 - any failure fails this episode only
            message = f"{type(exc).__name__}: {exc}"
            log.warning("completion request failed (episode %s): %s", key, message)
            with self._lock:
                self.failures[key] = message
            return Generation((), (), False)

    def complete(self, req: GenerationRequest, sampling: SamplingParams) -> Generation:
        """One ``/v1/completions`` call for ``req``.

        Raises:
            RequestFailedError: unusable answer. openai.APIError: the request failed after retries.
        """
        response = self.client.completions.create(
            model=self.model,
            prompt=list(req.context_ids),
            max_tokens=req.max_new_tokens,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0,
            logprobs=1,
            **({} if req.sample_seed is None else {"seed": req.sample_seed % 2**63}),
            extra_body=self.extra_body,
        )
        if not response.choices:
            raise RequestFailedError("the server returned no choices")
        return parse_completion_choice(response.choices[0], self.eos_token_id)


def mark_failed_requests(
    trajectories: Sequence[Trajectory], failures: dict[str, str]
) -> list[Trajectory]:
    """Mark each trajectory whose id is in ``failures`` as failed (``Trajectory.failure``).

    The rollout engine uses the trajectory id as the requests' ``cache_key``; a failed
    trajectory has ``.failed`` True and is excluded from the update.
    """
    out = []
    for t in trajectories:
        if t.trajectory_id in failures:
            t = dataclasses.replace(
                t, failure=f"inference request failed: {failures[t.trajectory_id]}"
            )
        out.append(t)
    return out
