"""The multi-turn rollout engine: envs + policy -> trajectories, token-in/token-out.

For a batch of episodes (typically G seeds-alike per task times B tasks), the engine:

1. resets every env and renders its first observation to tokens (mask 0);
2. asks the policy to continue all live episodes in one batch; appends the sampled ids with
   their logprobs (mask 1);
3. decodes the sampled text once, parses tool calls, and calls ``env.step``;
4. renders the env's answer (tool results, feedback) plus the next assistant header, tokenizes
   that span once, and appends it (mask 0); with a model's own chat template the span is the
   difference of two renderings of the conversation, or, when the template shows the history
   differently from how it was fed (earlier thoughts dropped), a new segment
   (:mod:`agentic_rl.rollout.segments`);
5. repeats until every episode has ended, by termination or by a budget.

Two schedules, same trajectories:

* **continuous** (a policy with ``open_stream``, e.g. :class:`~agentic_rl.policy.fast.FastPolicy`):
  the engine drives the decode stream token by token. An episode whose turn ends leaves the
  batch at once; its env step runs on a worker thread while the others keep decoding (torch
  releases the GIL in its kernels), and its next turn joins the batch as soon as the step
  returns. No episode waits for the slowest turn of the batch.
* **turn-synchronous** (any other policy): one ``generate`` call per turn for every live
  episode, then every env step.

With ``sample_seed`` set, each request carries a seed derived from (sample_seed, episode index,
turn) (:func:`~agentic_rl.types.request_seed`), so the sampled tokens do not depend on the
schedule or on batch composition. Each trajectory records how it was sampled
(``Trajectory.sampling``: the round's seed, its episode index, temperature, greedy,
``max_new_tokens``), so a stored record says how the members of its group differed and how to
re-sample one.

Segments (context rebuilds, see :mod:`agentic_rl.rollout.context`). When an env step sets
``Observation.context_reset``, or when ``context_max_tokens`` is set and the next turn's context
would exceed it, the engine does not splice a rewritten prompt into the running stream: it
closes the current *segment* (its ids, mask and logprobs stay as sampled) and starts a new one
whose first tokens are the rebuilt prompt, ``chat.encode(chat.render_prompt(messages))`` with
loss mask 0, where ``messages`` is the conversation since the last reset (the system message
kept) or, with a budget, :meth:`ContextBuilder.build` of it (old turns elided with a visible
marker). Requests carry only the current segment's ids and a cache key of their own per
segment, so a policy's KV cache is never continued across segments (a new segment is a fresh
prefill). ``Trajectory.segment_starts`` records where each segment starts; training scores
every segment as its own sequence. Without resets and with ``context_max_tokens = 0`` the
stream is exactly the single-segment stream of before.

A sampler that sets ``Generation.policy_versions`` (async training) has them recorded per token
(``Trajectory.token_versions``, -1 for unsampled tokens; the oldest is ``policy_version``).

Thinking models: a reply's reasoning (up to the template's closing marker, e.g. ``</think>``) is
trained on as sampled and kept in the assistant message; the env's ``Action.text`` and the tool
parser see only the content after it (a reply that is all reasoning, a cut thought, has no content).
Tool calls are parsed in the chat format's tool format (``model.tool_format``).

The trajectory's token stream is exactly what the model was fed and what it sampled; training
never re-tokenizes decoded text (docs/design.md, decision 1). Budgets: ``max_turns`` policy turns,
``max_new_tokens`` sampled per turn, ``max_total_tokens`` for the token stream of one segment
(the whole stream when the context is never rebuilt). A reply cut by a token budget before its
end-of-turn token is not an action: it is recorded as the last turn with ``Turn.truncated``, the
env is not stepped with it, and the episode ends truncated (``StopReason.MAX_NEW_TOKENS``, or
``MAX_TOKENS`` when ``max_total_tokens`` cut it), so GAE bootstraps it. An env
that raises marks its episode ``StopReason.ERROR`` (excluded from training), never crashes
the batch; so does text the tokenizer rejects in an env's observation (e.g. a lone surrogate the
env wrote itself: tool results are already made valid text by the tools layer).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.policy.base import GenerationRequest, Policy, SamplingParams
from agentic_rl.policy.chat_template import AnyChatFormat as ChatFormat
from agentic_rl.rollout import segments
from agentic_rl.types import (
    Action,
    Message,
    Observation,
    RolloutSampling,
    StopReason,
    Trajectory,
    Turn,
    request_seed,
)

log = logging.getLogger(__name__)

#: values of ``[rollout] backend`` (built by :func:`agentic_rl.trainer.sampling.backends.make_backend`)
ROLLOUT_BACKENDS = ("local", "vllm", "openai")


@dataclass(frozen=True)
class RolloutConfig:
    """Budgets and sampling of a rollout (config section ``[rollout]``).

    Attributes:
        max_turns: most policy turns per episode (then ``StopReason.MAX_TURNS``).
        max_new_tokens: most tokens sampled in one turn (a longer reply is cut).
        max_total_tokens: most tokens in one segment of an episode's stream, i.e. the longest
            sequence the policy is fed (then ``MAX_TOKENS``); without context rebuilds the whole
            stream. ``max_turns`` bounds the number of segments.
        temperature: sampling temperature for training rollouts.
        context_max_tokens: most tokens of the context fed to the policy before a turn (the
            current segment's prompt); when the next turn's context would exceed it, history is
            elided by the :class:`~agentic_rl.rollout.context.ContextBuilder` into a new segment
            (a segment is then at most ``context_max_tokens + max_new_tokens`` long). 0 = off:
            the context only grows (within ``max_total_tokens``).
        backend: what samples the RL rollouts (the trainer builds it,
            :mod:`agentic_rl.trainer.sampling.backends`): ``local`` (the in-process sampler of
            ``model.sampler``), ``vllm`` (a vLLM server the trainer starts, weights synced after
            every RL step) or ``openai`` (any OpenAI-compatible server at ``base_url`` that
            returns token ids; its weights are not synced). Evaluation always samples locally.
        base_url: the server of ``backend = "openai"`` (e.g. ``http://127.0.0.1:8000/v1``).
        api_key_env: name of the environment variable holding the server's API key (empty: no
            key); the key itself never goes into a config file.
    """

    max_turns: int = 3
    max_new_tokens: int = 48
    max_total_tokens: int = 1024
    temperature: float = 1.0
    context_max_tokens: int = 0
    backend: str = "local"
    base_url: str = ""
    api_key_env: str = ""

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_new_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError(
                "rollout budgets: max_turns and max_new_tokens must be >= 1, max_total_tokens >= 2"
            )
        if self.context_max_tokens < 0:
            raise ValueError(
                f"context_max_tokens must be >= 0 (0 = off), got {self.context_max_tokens}"
            )
        if self.backend not in ROLLOUT_BACKENDS:
            raise ValueError(
                f"key 'rollout.backend' must be one of {', '.join(ROLLOUT_BACKENDS)}, "
                f"got {self.backend!r}"
            )
        if self.backend == "openai" and not self.base_url:
            raise ValueError(
                "key 'rollout.base_url' must be set when rollout.backend = 'openai' "
                "(e.g. --base-url http://127.0.0.1:8000/v1)"
            )
        if self.backend != "openai" and self.base_url:
            raise ValueError(
                f"key 'rollout.base_url' is read only by rollout.backend = 'openai', not "
                f"{self.backend!r} (an existing vLLM server: backend 'openai' with its URL)"
            )


@dataclass
class _Episode:
    env: Env
    seed: int
    group_id: str
    index: int = 0  # in the whole batch: the sampling seeds' (a shard run alone, first_index)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    span_start: int = 0
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    stop: StopReason | None = None
    info: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    conversation: list[Message] = field(
        default_factory=list
    )  # since the last context reset, never elided
    segment_starts: list[int] = field(default_factory=lambda: [0])
    stale_keys: list[str] = field(default_factory=list)  # cache keys of closed segments, to release
    versions: list[int] = field(default_factory=list)  # per token (Generation.policy_versions)
    tools: tuple[dict[str, Any], ...] = ()  # the reset observation's tool schemas
    text: list[str] = field(default_factory=list)  # the current segment's text, piece by piece

    @property
    def cache_key(self) -> str:
        """The policy cache key of the current segment (the episode's key for the first)."""
        n = len(self.segment_starts) - 1
        return self.key if n == 0 else f"{self.key}#seg{n}"

    def extend(
        self,
        ids: Sequence[int],
        mask: int,
        logprobs: Sequence[float] | None = None,
        versions: Sequence[int] = (),
    ) -> None:
        if versions and not self.versions:  # the first versioned reply: earlier tokens get -1
            self.versions = [-1] * len(self.ids)
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        if self.versions:
            self.versions.extend(versions or [-1] * len(ids))


def run_episodes(
    policy: Policy,
    chat: ChatFormat,
    envs: Sequence[Env],
    seeds: Sequence[int],
    group_ids: Sequence[str],
    config: RolloutConfig,
    *,
    greedy: bool = False,
    sample_seed: int | None = None,
    env_workers: int = 4,
    first_index: int = 0,
) -> list[Trajectory]:
    """Run one episode per env to the end and return their (unscored) trajectories, in order.

    Args:
        policy: any :class:`~agentic_rl.policy.base.Policy`.
        chat: the chat format whose tokenizer matches the policy.
        envs: one env instance per episode (instances must not be shared).
        seeds: ``reset`` seed of each episode.
        group_ids: group id of each episode (episodes of one task share it).
        config: budgets and temperature.
        greedy: argmax decoding (evaluation) instead of sampling.
        sample_seed: makes sampling reproducible and independent of batching (see module
            docstring); None uses the policy's RNG.
        env_workers: threads running env steps during decoding (continuous schedule only;
            0 runs them inline). first_index: batch index of ``envs[0]`` (a shard's seeds).

    Raises:
        ValueError: ``envs``, ``seeds`` and ``group_ids`` differ in length, an env instance
            appears twice, or ``sample_seed`` does not fit a signed 64-bit int (it is recorded).
    """
    if not len(envs) == len(seeds) == len(group_ids):
        raise ValueError("envs, seeds and group_ids must have the same length")
    if len({id(e) for e in envs}) != len(envs):
        raise ValueError("each episode needs its own env instance")
    started = time.perf_counter()
    batch = enumerate(zip(envs, seeds, group_ids), first_index)
    episodes = [_Episode(env, int(s), str(g), i) for i, (env, s, g) in batch]
    recorded = [  # checked before any work: a seed the record cannot hold fails here
        RolloutSampling(sample_seed, ep.index, config.temperature, greedy, config.max_new_tokens)
        for ep in episodes
    ]
    for ep in episodes:
        _start(ep, chat, config)
    sampling = SamplingParams(temperature=config.temperature, greedy=greedy)
    if callable(getattr(policy, "open_stream", None)):
        _run_continuous(policy, chat, episodes, config, sampling, sample_seed, env_workers)
    else:
        while live := [i for i, ep in enumerate(episodes) if ep.stop is None]:
            requests = [_request(episodes[i], i, config, sample_seed) for i in live]
            for i, request, gen in zip(live, requests, policy.generate(requests, sampling)):
                ep = episodes[i]
                ep.extend(gen.token_ids, 1, gen.logprobs, gen.policy_versions)
                _step(ep, chat, config, list(gen.token_ids), gen.finished, request.max_new_tokens)
    elapsed = time.perf_counter() - started
    seconds = elapsed / max(len(episodes), 1)
    return [_finish(ep, seconds, how) for ep, how in zip(episodes, recorded)]


def _request(
    ep: _Episode, index: int, config: RolloutConfig, sample_seed: int | None
) -> GenerationRequest:
    turn = len(ep.turns)
    seed = None if sample_seed is None else request_seed(sample_seed, ep.index, turn)
    return GenerationRequest(
        tuple(ep.ids[ep.segment_starts[-1] :]),  # the current segment: what the policy is fed
        min(config.max_new_tokens, config.max_total_tokens - (len(ep.ids) - ep.segment_starts[-1])),
        episode_index=index,
        cache_key=ep.cache_key,
        sample_seed=seed,
    )


def _run_continuous(
    policy,
    chat: ChatFormat,
    episodes: list[_Episode],
    config: RolloutConfig,
    sampling: SamplingParams,
    sample_seed: int | None,
    env_workers: int,
) -> None:
    """Drive the policy's decode stream; env steps overlap decoding on worker threads."""
    pool = (
        ThreadPoolExecutor(max_workers=env_workers, thread_name_prefix="env-step")
        if env_workers > 0
        else None
    )
    stepping: dict[Future, int] = {}
    with policy.open_stream(sampling) as stream:
        for i, ep in enumerate(episodes):
            if ep.stop is None:
                stream.submit(_request(ep, i, config, sample_seed))
        try:
            while stream.busy or stepping:
                ready: list[int] = []
                if stream.busy:
                    for request, gen in stream.step():
                        i = request.episode_index
                        ep = episodes[i]
                        ep.extend(gen.token_ids, 1, gen.logprobs, gen.policy_versions)
                        args = (
                            ep,
                            chat,
                            config,
                            list(gen.token_ids),
                            gen.finished,
                            request.max_new_tokens,
                        )
                        if pool is None:
                            _step(*args)
                            ready.append(i)
                        else:
                            stepping[pool.submit(_step, *args)] = i
                if stepping:
                    # busy: take whatever finished and keep decoding; idle: wait for every pending
                    # step so their next turns join the batch together (one prefill, not one each)
                    done, _ = wait(
                        list(stepping),
                        timeout=0 if stream.busy else None,
                        return_when=FIRST_COMPLETED if stream.busy else ALL_COMPLETED,
                    )
                    for future in done:
                        ready.append(stepping.pop(future))
                        future.result()  # _step handles env errors itself; anything else is a bug
                for i in sorted(ready):
                    ep = episodes[i]
                    while ep.stale_keys:  # a closed segment's KV is never continued
                        stream.release(ep.stale_keys.pop())
                    if ep.stop is None:
                        stream.submit(_request(ep, i, config, sample_seed))
                    else:
                        stream.release(ep.cache_key)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)


def _start(ep: _Episode, chat: ChatFormat, config: RolloutConfig) -> None:
    try:
        obs, info = ep.env.reset(seed=ep.seed, options={"trajectory_id": ep.key})
    except Exception as exc:  # noqa: BLE001 - a broken env fails its episode only
        log.exception("env reset failed (seed %s)", ep.seed)
        ep.stop, ep.failure = StopReason.ERROR, f"reset raised {type(exc).__name__}: {exc}"
        return
    ep.info.update(info)
    ep.messages.extend(obs.messages)
    ep.conversation, ep.tools = list(obs.messages), tuple(obs.tools)
    try:
        prompt = segments.prompt(ep, chat, config)
    except Exception as exc:  # noqa: BLE001 - text the tokenizer rejects fails its episode only
        log.exception("tokenizing the first observation failed (seed %s)", ep.seed)
        ep.stop, ep.failure = (
            StopReason.ERROR,
            f"tokenizing the observation raised {type(exc).__name__}: {exc}",
        )
        return
    if prompt is None:
        ep.stop = StopReason.MAX_TOKENS
        return
    ep.extend(prompt[0], 0)
    ep.text = [prompt[1]]
    if len(ep.ids) >= config.max_total_tokens:
        ep.stop = StopReason.MAX_TOKENS


def _step(
    ep: _Episode,
    chat: ChatFormat,
    config: RolloutConfig,
    sampled: list[int],
    finished: bool,
    budget: int,
) -> None:
    """Hand the turn's reply to the env and append its answer (``budget``: the request's max_new_tokens)."""
    index = len(ep.turns)
    text = chat.decode(sampled[:-1] if finished else sampled)
    ep.text.append(text + chat.end_of_turn if finished else text)
    if (
        not finished and len(sampled) >= budget
    ):  # cut by a token budget (a cut thought too): not an action the env should score
        _end_cut_turn(ep, config, text, len(sampled))
        return
    content = chat.split_reasoning(text)[1]
    calls, errors = chat.parse_tool_calls(content, index)
    action = Action(text=content, tool_calls=calls, tool_call_errors=errors)
    ep.messages.append(Message("assistant", text))
    try:
        obs, reward, terminated, truncated, info = ep.env.step(action)
    except Exception as exc:  # noqa: BLE001 - a crashing env fails its episode only
        log.exception("env step failed (seed %s, turn %d)", ep.seed, index)
        obs, reward, info = Observation(()), 0.0, {}
        ep.stop, ep.failure = StopReason.ERROR, f"step raised {type(exc).__name__}: {exc}"
    else:
        if terminated:
            ep.stop = StopReason.TERMINATED
        elif truncated:
            ep.stop = StopReason.TRUNCATED
        elif index + 1 >= config.max_turns:
            ep.stop = StopReason.MAX_TURNS
    # the turn's span: context fed since the previous turn, then this turn's sampled tokens
    ep.turns.append(
        Turn.from_step(
            index,
            action,
            obs,
            reward,
            info,
            token_ids=tuple(ep.ids[ep.span_start :]),
            loss_mask=tuple(ep.mask[ep.span_start :]),
            logprobs=tuple(ep.logprobs[ep.span_start :]),
        )
    )
    ep.span_start = len(ep.ids)
    if obs.context_reset:  # the env wiped the conversation: keep the system message only
        ep.conversation = [m for m in ep.conversation[:1] if m.role == "system"] + list(
            obs.messages
        )
    else:
        ep.conversation += [Message("assistant", text), *obs.messages]
    if ep.stop is None:
        # a reset rebuilds the prompt, and so does a template that rewrote the history (None)
        try:  # the per-episode guard covers tokenizing the env's text: a bad observation fails this episode only
            span = None if obs.context_reset else segments.continuation(ep, chat)
            segment = len(ep.ids) - ep.segment_starts[-1]
            if span is None or 0 < config.context_max_tokens < segment + len(span[0]):
                segments.new_segment(ep, chat, config)
            elif segment + len(span[0]) >= config.max_total_tokens:
                ep.stop = StopReason.MAX_TOKENS
            else:
                ep.extend(span[0], 0)
                ep.text.append(span[1])
        except Exception as exc:  # noqa: BLE001
            log.exception("tokenizing the observation failed (seed %s, turn %d)", ep.seed, index)
            ep.stop = StopReason.ERROR
            ep.failure = f"tokenizing the observation raised {type(exc).__name__}: {exc}"
        if ep.stop is not None:
            return
    ep.messages.extend(obs.messages)


def _end_cut_turn(ep: _Episode, config: RolloutConfig, text: str, num_sampled: int) -> None:
    """Record a reply cut by the token budget as the episode's last turn (``Turn.truncated``),
    without stepping the env, and end the episode truncated: ``MAX_NEW_TOKENS`` when the
    per-turn budget cut it, ``MAX_TOKENS`` when the segment's ``max_total_tokens`` did."""
    ep.stop = (
        StopReason.MAX_NEW_TOKENS if num_sampled >= config.max_new_tokens else StopReason.MAX_TOKENS
    )
    ep.messages.append(Message("assistant", text))
    ep.turns.append(
        Turn(
            index=len(ep.turns),
            action=Action(text=text),
            observation=None,
            reward=0.0,
            tool_results=(),
            token_ids=tuple(ep.ids[ep.span_start :]),
            loss_mask=tuple(ep.mask[ep.span_start :]),
            logprobs=tuple(ep.logprobs[ep.span_start :]),
            truncated=True,
        )
    )
    ep.span_start = len(ep.ids)


def _finish(ep: _Episode, seconds: float, sampling: RolloutSampling) -> Trajectory:
    # per-token versions: the oldest is the episode's
    sampled_by = [v for v in ep.versions if v >= 0]
    return Trajectory(
        env_id=ep.env.env_id,
        seed=ep.seed,
        group_id=ep.group_id,
        trajectory_id=ep.key,
        messages=tuple(ep.messages),
        turns=tuple(ep.turns),
        token_ids=tuple(ep.ids),
        loss_mask=tuple(ep.mask),
        logprobs=tuple(ep.logprobs),
        stop_reason=ep.stop or StopReason.ERROR,
        info={**ep.info, "rollout_seconds": seconds},
        segment_starts=tuple(ep.segment_starts),
        failure=ep.failure,
        policy_version=min(sampled_by) if sampled_by else None,
        token_versions=tuple(ep.versions),
        sampling=sampling,
    )
