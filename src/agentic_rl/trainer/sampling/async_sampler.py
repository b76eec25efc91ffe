"""The sampler of async training: its own weights, a version, and per-token version records.

With ``algorithm.max_off_policy_steps`` = k >= 1 the rollouts of the next steps are sampled in a
producer thread (:mod:`agentic_rl.trainer.sampling.async_producer`) while the trainer's thread runs the
update, so the sampler must not read the trainer's parameters while an optimizer step writes
them. :class:`AsyncBackend` wraps the run's rollout backend:

``local``
    The sampler gets its **own copy** of the model (``copy.deepcopy`` at the start of RL, one
    more copy of the weights in memory) and its own FastPolicy/HFPolicy over it. ``sync(model,
    v)`` copies the trainer's trainable parameters into the copy and sets the version to v.
    A :class:`WeightsGate` makes that copy exclusive: the producer holds the gate for one decode
    step (the continuous schedule) or one ``generate`` call (the turn-synchronous one), and a
    waiting sync goes before the next one. An episode in flight at a sync therefore continues
    on the new weights from its next token: a *partial rollout* (AReaL, Fu et al. 2025,
    arXiv:2505.24298; PipelineRL, Piché et al. 2025).
``vllm``
    The server holds the sampler's weights; ``sync`` is the wrapped backend's (weights written
    and reloaded in place) under the same gate, so it waits for the turn being generated; the
    next turns of the episodes in flight run on the new weights.

The sampler's copy is also what oracle guidance scores its demonstrations with (the producer's
view of the run has ``model`` = the copy); a forward of the copy holds the gate too.

Per-token versions. Every token records the version of the weights that sampled it
(``Generation.policy_versions``, then ``Trajectory.token_versions``; ``policy_version`` is the
oldest). In a decode stream every live row samples exactly one token per step, so a reply of
n tokens that finishes at step f was sampled at steps f − n + 1 … f: the stream keeps the
version of each step and reads the reply's versions off the last n. A ``generate`` call (a
whole turn) is stamped with the version it started with; the gate keeps it exact.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from agentic_rl.policy.base import Generation, GenerationRequest, SamplingParams
from agentic_rl.trainer.sampling.backends import RolloutBackend
from agentic_rl.types import Trajectory

__all__ = ["AsyncBackend", "ProducerStopped", "VersionedPolicy", "WeightsGate"]


class ProducerStopped(Exception):
    """Raised in the producer thread when the run stops it (the trainer finished or failed)."""


class WeightsGate:
    """Readers (the sampler, one thread) and a writer (the sync) of the sampler's weights.

    A writer waits for the reader in progress and goes before the next one; readers in the
    thread that already reads do not wait (a model forward inside a ``generate`` call).

    Attributes:
        version: the policy version of the weights behind the gate.
    """

    def __init__(self, version: int = 0):
        self.version = int(version)
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._stopped = False
        self._local = threading.local()

    @contextlib.contextmanager
    def reading(self) -> Iterator[int]:
        """Hold the weights for reading; yields their version.

        Raises:
            ProducerStopped: :meth:`stop` was called.
        """
        nested = getattr(self._local, "depth", 0) > 0
        with self._cond:
            while not nested and self._writing and not self._stopped:
                self._cond.wait()
            if self._stopped:
                raise ProducerStopped()
            self._readers += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield self.version
        finally:
            self._local.depth -= 1
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self, version: int) -> Iterator[None]:
        """Hold the weights exclusively; on a normal exit their version becomes ``version``."""
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._writing = True
            while self._readers:
                self._cond.wait()
        ok = False
        try:
            yield
            ok = True
        finally:
            with self._cond:
                self._writing = False
                if ok:
                    self.version = int(version)
                self._cond.notify_all()

    def wait_for(self, version: int) -> None:
        """Block until the weights are at ``version`` or later.

        Raises:
            ProducerStopped: :meth:`stop` was called.
        """
        with self._cond:
            while self.version < version and not self._stopped:
                self._cond.wait()
            if self._stopped:
                raise ProducerStopped()

    def stop(self) -> None:
        """Make every waiting and later :meth:`reading` / :meth:`wait_for` raise ProducerStopped."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class _VersionedStream:
    """A decode stream whose finished replies carry the version of each token (module doc)."""

    def __init__(self, stream: Any, gate: WeightsGate):
        self._stream, self._gate = stream, gate
        self._step_versions: list[int] = []
        self._longest = 1

    def __enter__(self) -> _VersionedStream:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._stream.__exit__(*exc)

    @property
    def busy(self) -> bool:
        """True while rows are queued or decoding."""
        return self._stream.busy

    def submit(self, request: GenerationRequest) -> int:
        """Queue one request (see :meth:`agentic_rl.policy.fast.DecodeStream.submit`)."""
        self._longest = max(self._longest, request.max_new_tokens)
        return self._stream.submit(request)

    def release(self, key: str) -> None:
        """Free an episode's KV slot. Never raises."""
        self._stream.release(key)

    def step(self) -> list[tuple[GenerationRequest, Generation]]:
        """One decode step under the gate; finished replies get ``policy_versions``."""
        with self._gate.reading() as version:
            done = self._stream.step()
        self._step_versions.append(version)
        del self._step_versions[: -self._longest]  # no reply is longer than that
        return [
            (req, dataclasses.replace(gen, policy_versions=self._versions(len(gen.token_ids))))
            for req, gen in done
        ]

    def _versions(self, n: int) -> tuple[int, ...]:
        return tuple(self._step_versions[len(self._step_versions) - n :])


class VersionedPolicy:
    """A policy whose generations record the version of each token (module docstring).

    Args:
        policy: the sampler (FastPolicy, HFPolicy or OpenAICompatPolicy).
        gate: the :class:`WeightsGate` of the weights it samples with.
    """

    def __init__(self, policy: Any, gate: WeightsGate):
        self.policy, self.gate = policy, gate
        if callable(getattr(policy, "open_stream", None)):
            self.open_stream = self._open_stream  # the engine's continuous schedule

    def _open_stream(self, sampling: SamplingParams) -> _VersionedStream:
        return _VersionedStream(self.policy.open_stream(sampling), self.gate)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        """One turn of every request, stamped with the version the call held."""
        with self.gate.reading() as version:
            out = self.policy.generate(requests, sampling)
        return [dataclasses.replace(g, policy_versions=(version,) * len(g.token_ids)) for g in out]

    def clear_cache(self) -> None:
        """Free the wrapped sampler's cache (if it has one)."""
        clear = getattr(self.policy, "clear_cache", None)
        if clear is not None:
            clear()


def sampler_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of ``model`` for the sampler (no gradients, no ``requires_grad``)."""
    clone = copy.deepcopy(model)
    for p in clone.parameters():
        p.grad = None
        p.requires_grad_(False)
    return clone


@torch.no_grad()
def copy_trainable(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Copy ``source``'s trainable parameters into ``target``'s of the same names (in place: the
    FastPolicy decoder sees their versions move and rebuilds its packed copies)."""
    params = dict(target.named_parameters())
    for name, p in source.named_parameters():
        if p.requires_grad:
            params[name].copy_(p)


def _gate_forward(model: torch.nn.Module, gate: WeightsGate) -> None:
    """Make every forward of ``model`` hold ``gate`` for reading (hooks on the top module)."""
    held: list[Any] = []

    def enter(*_args: Any) -> None:
        reading = gate.reading()
        reading.__enter__()
        held.append(reading)

    def leave(*_args: Any) -> None:
        if held:
            held.pop().__exit__(None, None, None)

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)


class AsyncBackend(RolloutBackend):
    """The rollout backend of async training, wrapping the run's (module docstring).

    Args:
        inner: the run's backend (``local`` or ``vllm``; ``openai`` never syncs and is rejected
            by the config).
        sampler_model: the sampler's own copy of the model (:func:`sampler_copy`) with
            ``make_policy(sampler_model)`` its sampler, for ``local``; None for a server.
        make_policy: builds the sampler over ``sampler_model``.
    """

    name = "async"

    def __init__(self, inner: RolloutBackend, sampler_model: Any = None, make_policy: Any = None):
        self.inner = inner
        self.model = sampler_model
        self.gate = WeightsGate(inner.version)
        own = make_policy(sampler_model) if sampler_model is not None else inner.policy
        if sampler_model is not None:
            _gate_forward(sampler_model, self.gate)
        super().__init__(VersionedPolicy(own, self.gate))
        self.version = inner.version

    def sync(self, model: Any, version: int) -> float:
        """Bring the sampler to ``model``'s weights at ``version`` (waits for the decode step or
        ``generate`` call in progress); returns seconds, the wait included."""
        started = time.perf_counter()
        with self.gate.writing(version):
            if self.model is not None:
                copy_trainable(model, self.model)
            else:
                self.inner.sync(model, version)
        self.version = int(version)
        return time.perf_counter() - started

    def finish_round(self, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """The wrapped backend's round end (a server's failed requests), or for ``local``: free
        the own sampler's cache; trajectories keep the versions their tokens recorded."""
        if self.model is None:
            return self.inner.finish_round(trajectories)
        return super().finish_round(trajectories)

    def stop(self) -> None:
        """Stop the producer's sampling (its next decode step raises ProducerStopped)."""
        self.gate.stop()

    def close(self) -> None:
        """Stop sampling and close the wrapped backend (a vLLM server stops)."""
        self.gate.stop()
        self.inner.close()
