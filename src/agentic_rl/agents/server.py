"""An OpenAI-compatible server in front of the policy that records what every call sampled.

:class:`PolicyServer` serves, with FastAPI on uvicorn (in a thread of the calling process):

``POST /rollouts/<id>/v1/chat/completions``
    a chat completion tied to rollout ``<id>``: give an agent the base URL
    ``http://HOST:PORT/rollouts/<id>/v1`` and every call it makes is recorded into that
    rollout's trajectory (:mod:`agentic_rl.agents.recorder`);
``POST /rollouts/<id>/reward``
    the rollout's reward (:mod:`agentic_rl.agents.reward`); it ends the rollout;
``GET /rollouts/<id>``
    the rollout's state (calls so far, whether it ended);
``POST /v1/chat/completions``
    an unrecorded completion (``serve-policy`` only; a training run refuses it, since the
    weights change between steps);
``GET /v1/models``, ``GET /rollouts/<id>/v1/models``, ``GET /health``.

Every error is answered in the API's shape (``{"error": {"message", "type", "param",
"code"}}``, :mod:`agentic_rl.agents.api`) and changes nothing: a call is recorded only once its
reply has been sampled. Calls of one rollout are served one at a time (in arrival order); calls
of different rollouts are decoded together by one :class:`~agentic_rl.agents.worker.PolicyWorker`.

Sampling. In a training run (``temperature`` set) every recorded call samples at the run's
``rollout.temperature`` whatever the request asks, because the update's importance ratio scores
the sampled tokens at that temperature; a rollout opened ``greedy`` (evaluation) decodes greedily;
each call's seed is derived from the rollout's :class:`~agentic_rl.types.RolloutSampling`
(the request's ``seed`` is ignored there, so the G members of a group differ). Without
``temperature`` (``serve-policy``) the request's temperature is used (0 = greedy) and its seed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.agents.api import ApiError, completion_body, error_body, parse_request
from agentic_rl.agents.recorder import Budget, RolloutRecorder
from agentic_rl.agents.reward import ReportedReward, RewardFormatError, parse_reward
from agentic_rl.agents.worker import PolicyWorker
from agentic_rl.errors import ConfigError
from agentic_rl.policy.base import Policy, SamplingParams
from agentic_rl.rewards.rubric import RewardWeights
from agentic_rl.types import RolloutSampling, Trajectory

__all__ = ["PolicyServer", "RolloutSpec"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSpec:
    """What a recorded rollout's trajectory carries and how it samples.

    Attributes:
        env_id: names the agent (``Trajectory.env_id``). seed: the task's seed or index.
        group_id: the group (G rollouts of one task). sampling: seeds and temperature.
        greedy: decode greedily (evaluation). info: task metadata for ``Trajectory.info``.
    """

    env_id: str = "agent"
    seed: int = 0
    group_id: str = ""
    sampling: RolloutSampling | None = None
    greedy: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Rollout:
    spec: RolloutSpec
    recorder: RolloutRecorder
    state: threading.Lock = field(default_factory=threading.Lock)
    reward: Future = field(default_factory=Future)
    closed: bool = False
    calls: asyncio.Lock | None = None


class PolicyServer:
    """The server of the module docstring.

    Args:
        policy: the sampler (its thread-owner is a :class:`PolicyWorker` made here).
        chat: the model's chat format. budget: token budgets of a rollout.
        model_name: the id ``/v1/models`` lists.
        temperature: the run's sampling temperature (training); None = the request's.
        weights: the ``[reward]`` weights posted components are combined with.
        auto_open: an unknown rollout id opens a rollout on its first call (``serve-policy``);
            else only :meth:`open_rollout` opens them (training).
        serve_unscoped: answer ``/v1/chat/completions`` without recording.
        host, port: where to listen (port 0: a free port).
        on_finish: called with each trajectory a posted reward ends (``auto_open`` rollouts).
    """

    def __init__(
        self,
        policy: Policy,
        chat: Any,
        budget: Budget = Budget(),
        *,
        model_name: str = "policy",
        temperature: float | None = None,
        weights: RewardWeights = RewardWeights(),
        auto_open: bool = False,
        serve_unscoped: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        on_finish: Any = None,
    ):
        self.chat, self.budget, self.model_name = chat, budget, model_name
        self.temperature, self.weights = temperature, weights
        self.auto_open, self.serve_unscoped, self.on_finish = auto_open, serve_unscoped, on_finish
        self.worker = PolicyWorker(policy)
        self.host, self.port = host, port
        self._rollouts: dict[str, _Rollout] = {}
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> PolicyServer:
        """Listen (port 0 picks a free one, then :attr:`port` holds it) and return self.

        Raises:
            ConfigError: FastAPI or uvicorn is not installed (the ``serve`` extra).
            OSError: the address cannot be bound.
            RuntimeError: uvicorn did not start within ``timeout_s``.
        """
        try:
            import uvicorn

            from agentic_rl.agents.app import build_app
        except ImportError as exc:
            raise ConfigError(
                f"the policy server needs the 'serve' extra (pip install 'agentic-rl[serve]'): {exc}"
            ) from None

        sock = socket.create_server((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="policy-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the policy server did not start")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Stop serving and stop the policy worker; idempotent."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(30)
            self._server = None
        self.worker.close()

    @property
    def origin(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The unrecorded base URL (``…/v1``)."""
        return f"{self.origin}/v1"

    def rollout_url(self, rollout_id: str) -> str:
        """The base URL of one rollout (``…/rollouts/<id>/v1``): give it to the agent."""
        return f"{self.origin}/rollouts/{rollout_id}/v1"

    # --- rollouts ------------------------------------------------------------------------------

    def open_rollout(self, rollout_id: str, spec: RolloutSpec = RolloutSpec()) -> Future:
        """Open a recorded rollout; returns the future of its posted reward
        (:class:`~agentic_rl.agents.reward.ReportedReward`).

        Raises:
            ValueError: the id is open already or is not a plain token.
        """
        if not rollout_id or "/" in rollout_id or rollout_id != rollout_id.strip():
            raise ValueError(f"bad rollout id {rollout_id!r}")
        recorder = RolloutRecorder(
            rollout_id,
            self.chat,
            self.budget,
            env_id=spec.env_id,
            seed=spec.seed,
            group_id=spec.group_id or rollout_id,
            sampling=spec.sampling,
            info=dict(spec.info),
        )
        with self._lock:
            if rollout_id in self._rollouts:
                raise ValueError(f"rollout {rollout_id!r} is open already")
            self._rollouts[rollout_id] = ro = _Rollout(spec, recorder)
        return ro.reward

    def close_rollout(
        self,
        rollout_id: str,
        reward: ReportedReward | None,
        failure: str | None = None,
        kind: str | None = None,
    ) -> Trajectory:
        """End a rollout: later calls get 404; a call being sampled is not recorded. Returns its
        trajectory (failed when ``failure`` is given or it made no call; ``kind`` names the
        failure in ``info["failure_kind"]``) and frees its KV.

        Raises:
            KeyError: no such open rollout.
        """
        with self._lock:
            ro = self._rollouts.pop(rollout_id)
        with ro.state:
            ro.closed = True
            trajectory = ro.recorder.finish(
                None if reward is None else reward.total,
                {} if reward is None else reward.components,
                failure,
                0 if reward is None else reward.choice,
                {
                    **({} if reward is None else reward.info),
                    **({"failure_kind": kind} if kind else {}),
                },
            )
        for key in ro.recorder.cache_keys():
            self.worker.release(key)
        return trajectory

    def free_cache(self, fn: Any) -> Any:
        """Run ``fn()`` on the policy's thread between batches and return its result (e.g. the
        backend's ``finish_round``, which frees the sampler's cache)."""
        return self.worker.call(fn).result()

    def rollout_state(self, rollout_id: str) -> dict[str, Any]:
        """``{"id", "calls", "open"}`` of a rollout.

        Raises:
            ApiError: 404 no such rollout.
        """
        ro = self._rollouts.get(rollout_id)
        if ro is None:
            raise ApiError(404, f"no open rollout {rollout_id!r}", "not_found_error")
        return {"id": rollout_id, "calls": ro.recorder.calls, "open": not ro.closed}

    def _rollout(self, rollout_id: str) -> _Rollout:
        ro = self._rollouts.get(rollout_id)
        if ro is None and self.auto_open:
            try:
                self.open_rollout(rollout_id)
            except ValueError:
                pass  # a bad id (404 below), or opened meanwhile by a concurrent first call
            ro = self._rollouts.get(rollout_id)
        if ro is None:
            raise ApiError(
                404,
                f"no open rollout {rollout_id!r} (it ended, timed out, or was never opened)",
                "not_found_error",
                code="rollout_not_found",
            )
        return ro

    # --- requests (called on the server's event loop) ------------------------------------------

    def _sampling(self, request, spec: RolloutSpec | None) -> SamplingParams:
        if spec is not None and self.temperature is not None:
            return SamplingParams(self.temperature, greedy=spec.greedy)
        if spec is not None and spec.greedy:
            return SamplingParams(1.0, greedy=True)
        t = 1.0 if request.temperature is None else request.temperature
        return SamplingParams(t if t > 0 else 1.0, greedy=t == 0)

    async def chat_completion(self, body: Any, rollout_id: str | None) -> dict[str, Any]:
        """Answer one chat-completions body (module docstring).

        Raises:
            ApiError: a bad request (400), no such rollout (404), a rollout that ended while its
                call was sampled (409), an unscoped call where it is refused (404), a policy
                failure (500).
        """
        request = parse_request(body)
        if rollout_id is None:
            if not self.serve_unscoped:
                raise ApiError(
                    404,
                    "this server records rollouts: call /rollouts/<id>/v1/chat/completions "
                    "with the base URL the trainer gave the agent",
                    "not_found_error",
                    code="rollout_required",
                )
            recorder = RolloutRecorder(f"unscoped-{uuid.uuid4().hex}", self.chat, self.budget)
            plan = recorder.plan(request)
            gens = await self._generate(recorder, plan, request, None, None)
            choices = recorder.record(plan, gens)
            for key in recorder.cache_keys():
                self.worker.release(key)
            return self._body(request, plan, choices)
        ro = self._rollout(rollout_id)
        if ro.calls is None:
            ro.calls = asyncio.Lock()
        async with ro.calls:
            with ro.state:
                if ro.closed:
                    raise ApiError(409, f"rollout {rollout_id!r} has ended", code="rollout_ended")
                plan = ro.recorder.plan(request)
                call = ro.recorder.calls
            seed = ro.spec.sampling.turn_seed(call) if ro.spec.sampling is not None else None
            gens = await self._generate(ro.recorder, plan, request, ro.spec, seed)
            with ro.state:
                if ro.closed:
                    raise ApiError(
                        409,
                        f"rollout {rollout_id!r} ended while this call was sampled",
                        code="rollout_ended",
                    )
                choices = ro.recorder.record(plan, gens)
        return self._body(request, plan, choices)

    async def _generate(self, recorder, plan, request, spec, seed):
        sampling = self._sampling(request, spec)
        if spec is None:
            seed = request.seed
        requests = recorder.requests(plan, request.n, seed)
        try:
            gens = await asyncio.wrap_future(self.worker.generate(requests, sampling))
        except Exception as exc:  # noqa: BLE001 - the policy's failure, answered as a 500
            raise ApiError(
                500, f"the policy failed: {type(exc).__name__}: {exc}", "server_error"
            ) from exc
        if any(not g.token_ids for g in gens):
            raise ApiError(502, "the policy's inference server returned no tokens", "server_error")
        return gens

    def _body(self, request, plan, choices) -> dict[str, Any]:
        out = []
        for j, choice in enumerate(choices):
            finish = "tool_calls" if choice.action.tool_calls else "stop"
            item: dict[str, Any] = {
                "index": j,
                "message": choice.message,
                "finish_reason": finish if choice.finished else "length",
                "logprobs": None,
            }
            if request.logprobs:
                item["logprobs"] = {
                    "content": [
                        {
                            "token": self.chat.decode([t]),
                            "logprob": lp,
                            "bytes": None,
                            "top_logprobs": [],
                        }
                        for t, lp in zip(choice.ids, choice.logprobs)
                    ]
                }
            if request.return_token_ids:
                item["token_ids"] = list(choice.ids)
            out.append(item)
        body = completion_body(
            self.model_name, out, len(plan.context), sum(len(c.ids) for c in choices)
        )
        if request.return_token_ids:
            body["prompt_token_ids"] = list(plan.context)
        return body

    def post_reward(self, rollout_id: str, body: Any) -> dict[str, Any]:
        """Record a posted reward (it ends the rollout).

        Raises:
            ApiError: 404 no such rollout; 409 a reward was posted already; 400 a malformed one.
        """
        ro = self._rollout(rollout_id)
        try:
            reward = parse_reward(body, self.weights)
        except RewardFormatError as exc:
            raise ApiError(400, f"reward: {exc}", param="reward") from None
        with ro.state:
            if ro.reward.done():
                raise ApiError(
                    409, f"rollout {rollout_id!r} has a reward already", code="reward_set"
                )
            ro.reward.set_result(reward)
        if self.auto_open:
            trajectory = self.close_rollout(rollout_id, reward)
            if self.on_finish is not None:
                self.on_finish(trajectory)
        return {"id": rollout_id, "reward": reward.total, "components": reward.components}


def error_response_body(status: int, detail: str) -> dict[str, Any]:
    """The API's error body for an HTTP error that is not an :class:`ApiError` (404 route …)."""
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return error_body(detail, kind if status < 500 else "server_error")
