"""One thread that owns the policy and batches the requests of many concurrent callers.

The policy server receives chat completions from many agents at once; each becomes one or more
:class:`~agentic_rl.policy.base.GenerationRequest`. Decoding them one by one would waste the
sampler: decode steps cost about the same for 1 row as for 16 on a CPU and far more so on a GPU
(``FACTS.md``). :class:`PolicyWorker` queues every request and decodes them together:

* a policy with a decode stream (:class:`~agentic_rl.policy.fast.FastPolicy`) is driven token by
  token; a request that arrives while others decode joins the batch at the next step (continuous
  batching), and its finished rows are answered at once;
* any other policy (:class:`~agentic_rl.policy.hf.HFPolicy`, the vLLM backend's
  :class:`~agentic_rl.policy.openai_compat.OpenAICompatPolicy`) gets one ``generate`` call with
  every request queued at that moment.

Requests with other sampling parameters (temperature, greedy) wait until the current stream
drains. Functions handed to :meth:`PolicyWorker.call` run on the same thread between batches (the
trainer frees the sampler's cache there), so nothing else ever touches the policy while it
decodes. A policy error fails the requests it was decoding (their futures raise) and the worker
goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.policy.base import Generation, GenerationRequest, Policy, SamplingParams

__all__ = ["PolicyWorker"]

log = logging.getLogger(__name__)


@dataclass
class _Job:
    requests: list[GenerationRequest]
    sampling: SamplingParams
    future: Future
    results: dict[int, Generation] = field(default_factory=dict)


@dataclass
class _Call:
    fn: Callable[[], Any]
    future: Future


_STOP = object()


class PolicyWorker:
    """Runs every generation of ``policy`` on one thread (module docstring).

    Args:
        policy: the sampler (read only by this thread from now on).
        name: the thread's name.
    """

    def __init__(self, policy: Policy, name: str = "policy-worker"):
        self.policy = policy
        self._queue: queue.Queue = queue.Queue()
        self._releases: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> Future[list[Generation]]:
        """Queue ``requests`` (one caller's, decoded with the others queued); the future gives
        their generations in order, or raises what the policy raised.

        Raises:
            RuntimeError: the worker is closed.
        """
        if self._closed:
            raise RuntimeError("the policy worker is closed")
        future: Future = Future()
        if not requests:
            future.set_result([])
            return future
        self._queue.put(_Job(list(requests), sampling, future))
        return future

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn()`` on the worker thread between batches; the future gives its result."""
        if self._closed:
            raise RuntimeError("the policy worker is closed")
        future: Future = Future()
        self._queue.put(_Call(fn, future))
        return future

    def release(self, cache_key: str) -> None:
        """Free the sampler's cache of ``cache_key`` (an episode that will not call again) when
        the next stream opens. Never raises."""
        with self._lock:
            self._releases.append(cache_key)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the thread after the work queued so far; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout_s)

    # --- the worker thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        held: list[Any] = []  # items taken from the queue that wait for the next batch
        while True:
            item = held.pop(0) if held else self._queue.get()
            if item is _STOP:
                self._fail_all(held)
                return
            if isinstance(item, _Call):
                _run_call(item)
                continue
            jobs = [item]
            while True:  # everything queued now with the same sampling decodes together
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                (jobs if _same(more, item) else held).append(more)
            held = self._decode(jobs, item.sampling) + held

    def _decode(self, jobs: list[_Job], sampling: SamplingParams) -> list[Any]:
        """Decode ``jobs``; returns the items that arrived meanwhile and must wait."""
        try:
            if callable(getattr(self.policy, "open_stream", None)):
                return self._stream(jobs, sampling)
            flat = [r for job in jobs for r in job.requests]
            gens = self.policy.generate(flat, sampling)
            at = 0
            for job in jobs:
                job.future.set_result(list(gens[at : at + len(job.requests)]))
                at += len(job.requests)
            self._apply_releases()
        except BaseException as exc:  # noqa: BLE001 - handed to each caller
            log.exception("the policy failed while decoding %d requests", len(jobs))
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc)
        return []

    def _apply_releases(self, stream: Any = None) -> None:
        with self._lock:
            keys, self._releases = self._releases, []
        for key in keys:
            if stream is not None:
                stream.release(key)
            elif hasattr(self.policy, "_free"):  # FastPolicy between streams
                self.policy._free(key)

    def _stream(self, jobs: list[_Job], sampling: SamplingParams) -> list[Any]:
        held: list[Any] = []
        owner: dict[int, tuple[_Job, int]] = {}
        with self.policy.open_stream(sampling) as stream:
            self._apply_releases(stream)

            def submit(job: _Job) -> None:
                for i, request in enumerate(job.requests):
                    owner[stream.submit(request)] = (job, i)

            for job in jobs:
                submit(job)
            while stream.busy:
                for tag, gen in stream.step_tagged():
                    job, i = owner.pop(tag)
                    job.results[i] = gen
                    if len(job.results) == len(job.requests):
                        job.future.set_result([job.results[k] for k in range(len(job.requests))])
                while True:  # requests that arrived during the step join the batch
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(more, _Job) and more.sampling == sampling:
                        jobs.append(more)  # failed with the others if the policy raises
                        submit(more)
                    else:
                        held.append(more)
                self._apply_releases(stream)
        return held

    def _fail_all(self, items: list[Any]) -> None:
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if isinstance(item, (_Job, _Call)) and not item.future.done():
                item.future.set_exception(RuntimeError("the policy worker was closed"))


def _same(item: Any, job: _Job) -> bool:
    return isinstance(item, _Job) and item.sampling == job.sampling


def _run_call(call: _Call) -> None:
    try:
        call.future.set_result(call.fn())
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        call.future.set_exception(exc)
