"""PolicyWorker: one thread owns the policy; requests queued together decode in one batch."""

from __future__ import annotations

import threading

import pytest

from agentic_rl.agents.worker import PolicyWorker
from agentic_rl.policy.base import GenerationRequest, SamplingParams
from agentic_rl.policy.scripted import ScriptedPolicy


class _Counting(ScriptedPolicy):
    """A scripted policy that records the size of every batch and the thread it ran on."""

    def __init__(self, chat, reply_fn):
        super().__init__(chat, reply_fn)
        self.batches: list[int] = []
        self.threads: set[str] = set()

    def generate(self, requests, sampling):
        self.batches.append(len(requests))
        self.threads.add(threading.current_thread().name)
        if any(r.episode_index < 0 for r in requests):
            raise RuntimeError("policy failure")
        return super().generate(requests, sampling)


def _request(chat, i: int, key: str | None = None) -> GenerationRequest:
    return GenerationRequest(tuple(chat.encode(f"q{i}")), 16, episode_index=i, cache_key=key)


def test_requests_queued_together_decode_in_one_batch(chat):
    policy = _Counting(chat, lambda i, ctx: f"reply {i}")
    worker = PolicyWorker(policy)
    gate = threading.Event()
    worker.call(gate.wait)  # hold the worker while eight callers queue their requests
    futures = [worker.generate([_request(chat, i)], SamplingParams()) for i in range(8)]
    greedy = worker.generate([_request(chat, 8)], SamplingParams(greedy=True))
    gate.set()
    for i, future in enumerate(futures):
        [gen] = future.result(timeout=10)
        assert chat.decode(gen.token_ids) == f"reply {i}<|im_end|>"
    greedy.result(timeout=10)
    worker.close()
    # one batch of the eight, the other sampling parameters in a batch of their own
    assert policy.batches == [8, 1] and policy.threads == {"policy-worker"}


def test_a_policy_error_fails_its_batch_and_the_worker_goes_on(chat):
    policy = _Counting(chat, lambda i, ctx: "ok")
    worker = PolicyWorker(policy)
    with pytest.raises(RuntimeError, match="policy failure"):
        worker.generate([_request(chat, -1)], SamplingParams()).result(timeout=10)
    assert worker.generate([_request(chat, 0)], SamplingParams()).result(timeout=10)
    worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        worker.generate([_request(chat, 0)], SamplingParams())
