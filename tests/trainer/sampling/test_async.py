"""Async training (``algorithm.max_off_policy_steps`` = k): config checks, per-token policy
versions of partial rollouts (a sync in the middle of a turn, and between turns), the stale
filter, the producer thread's errors and shutdown, and tiny training runs: k = 1 never trains on
a trajectory more than one version old (local backend, and a vLLM server when ``.venv-vllm``
is there), k = 0 writes what the synchronous loop wrote."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from agentic_rl.config import load_config
from agentic_rl.envs import CalculatorEnv, make
from agentic_rl.errors import ConfigError
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trainer.run import TrainerState
from agentic_rl.trainer.sampling.async_producer import AsyncRollouts, drop_stale
from agentic_rl.trainer.sampling.async_sampler import AsyncBackend, WeightsGate, sampler_copy
from agentic_rl.trainer.sampling.backends import RolloutBackend
from agentic_rl.trainer.sampling.task_pool import SampledBatch
from agentic_rl.types import StopReason, Trajectory
from tests.recipe_settings import SIMPLE_SAMPLING, tiny_rl_overrides

CALL = (
    "<tool_call>"
    + json.dumps({"name": "calculator", "arguments": {"expression": "2 + 2"}})
    + "</tool_call>"
)


# ---- config -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.max_off_policy_steps=-1"],
        [
            "algorithm.max_off_policy_steps=1",
            "rollout.backend='openai'",
            "rollout.base_url='http://127.0.0.1:1/v1'",
        ],
        ["algorithm.max_off_policy_steps=1", "rollout.backend='vllm'", "model.lora=true"],
        ["algorithm.max_off_policy_steps=2", "rollout.backend='vllm'"],  # guidance on by default
    ],
)
def test_unsupported_settings_fail_at_load_naming_the_key(overrides):
    with pytest.raises(ConfigError, match="algorithm.max_off_policy_steps"):
        load_config(None, overrides)


def test_supported_settings_load():
    assert load_config(None, []).algorithm.max_off_policy_steps == 0
    cfg = load_config(None, ["algorithm.max_off_policy_steps=1"])  # local, guidance, dynamic
    assert cfg.algorithm.max_off_policy_steps == 1
    vllm = ["rollout.backend='vllm'", "sampling.guidance='off'"]
    assert load_config(None, ["algorithm.max_off_policy_steps=1", *vllm]).rollout.backend == "vllm"


# ---- per-token versions -------------------------------------------------------------------------
class _SyncAfterSteps:
    """A policy proxy whose decode stream calls ``sync()`` after its n-th step (between steps,
    in the stream's thread, as a trainer's sync lands between two decode steps)."""

    def __init__(self, policy, n: int, sync):
        self.policy, self.n, self.sync = policy, n, sync

    def open_stream(self, sampling):
        proxy = self

        class Stream:
            def __init__(self):
                self.inner, self.steps = proxy.policy.open_stream(sampling), 0

            def __enter__(self):
                self.inner.__enter__()
                return self

            def __exit__(self, *exc):
                return self.inner.__exit__(*exc)

            busy = property(lambda self: self.inner.busy)

            def submit(self, request):
                return self.inner.submit(request)

            def release(self, key):
                self.inner.release(key)

            def step(self):
                out = self.inner.step()
                self.steps += 1
                if self.steps == proxy.n:
                    proxy.sync()
                return out

        return Stream()


def test_a_sync_mid_turn_continues_the_episodes_on_the_new_weights(tiny_model_dir, chat):
    from transformers import AutoModelForCausalLM

    from agentic_rl.policy.fast import FastPolicy

    trainer = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    copy = sampler_copy(trainer)
    backend = AsyncBackend(RolloutBackend(None), copy, lambda m: FastPolicy(m, chat.eos_token_id))
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.01)  # the "update" the sync pushes

    policy = _SyncAfterSteps(backend.policy, 3, lambda: backend.sync(trainer, 1))
    envs = [make("calculator-v0") for _ in range(2)]
    config = RolloutConfig(max_turns=1, max_new_tokens=8)
    trajs = run_episodes(policy, chat, envs, [0, 1], ["a", "b"], config, sample_seed=7)
    for t in trajs:
        sampled = [v for v, m in zip(t.token_versions, t.loss_mask) if m]
        assert sampled[:3] == [0, 0, 0] and set(sampled[3:]) == {1}, sampled  # partial rollout
        assert all(v == -1 for v, m in zip(t.token_versions, t.loss_mask) if not m)
        assert t.policy_version == 0  # the oldest token's
    for a, b in zip(trainer.parameters(), copy.parameters()):
        assert torch.equal(a, b)  # the sampler now holds the trainer's weights
    assert backend.version == 1 and not any(p.requires_grad for p in copy.parameters())


class _SyncingCalculator(CalculatorEnv):
    """Syncs the backend to version (turn + 1) in every env step: the next turn of the episode
    runs on newer weights."""

    backend: AsyncBackend

    def step(self, action):
        out = super().step(action)
        self.backend.sync(None, self.backend.version + 1)
        return out


def test_turns_after_a_sync_record_the_new_version(chat):
    backend = AsyncBackend(RolloutBackend(ScriptedPolicy(chat, lambda i, ctx: CALL)))
    env = _SyncingCalculator()
    env.backend = backend
    (t,) = run_episodes(backend.policy, chat, [env], [0], ["g"], RolloutConfig(max_turns=3))
    assert t.stop_reason == StopReason.MAX_TURNS
    per_turn = [
        {v for v, m in zip(turn_versions(t, i), turn.loss_mask) if m}
        for i, turn in enumerate(t.turns)
    ]
    assert per_turn == [{0}, {1}, {2}] and t.policy_version == 0


def turn_versions(t: Trajectory, index: int) -> list[int]:
    start = sum(len(turn.token_ids) for turn in t.turns[:index])
    return list(t.token_versions[start : start + len(t.turns[index].token_ids)])


def test_a_sync_waits_for_the_read_in_progress():
    gate = WeightsGate()
    order: list[str] = []
    with gate.reading() as version:
        writer = threading.Thread(target=lambda: _write(gate, order))
        writer.start()
        writer.join(0.2)
        assert writer.is_alive() and version == 0  # blocked while the decode step reads
        order.append("read done")
    writer.join(5)
    assert order == ["read done", "written"] and gate.version == 1


def _write(gate: WeightsGate, order: list[str]) -> None:
    with gate.writing(1):
        order.append("written")


# ---- the stale filter and the producer ---------------------------------------------------------
def _traj(tid: str, group: str, version: int | None) -> Trajectory:
    return Trajectory("x-v0", 0, group, tid, (), (), (1, 2), (0, 1), (0.0, -1.0),
                      StopReason.TERMINATED, policy_version=version)  # fmt: skip


def test_drop_stale_moves_too_old_trajectories_out_of_training():
    batch = SampledBatch(
        [_traj("a", "g", 3), _traj("b", "g", 4), _traj("c", "h", None), _traj("d", "h", 5)],
        [_traj("e", "i", 1)],
        1,
        3,
        3,
    )
    out = drop_stale(batch, version=5, k=1)  # floor: version 4
    assert [t.trajectory_id for t in out.train] == ["b", "c", "d"]
    assert [t.trajectory_id for t in out.dropped] == ["e", "a"] and out.stale == 1
    assert drop_stale(batch, version=4, k=1) is batch  # nothing too old


class _View:
    """The parts of a Run the producer reads (its state's backend)."""

    def __init__(self, backend):
        self.state = TrainerState(backend=backend)


def test_the_producer_runs_at_most_k_versions_ahead_and_drops_what_is_stale():
    backend = AsyncBackend(RolloutBackend(None))
    started: list[tuple[int, int]] = []

    def sample(view, step):
        started.append((step, backend.gate.version))
        return SampledBatch([_traj(f"t{step}", "g", backend.gate.version - 1)], [], 1, 1, 0)

    producer = AsyncRollouts(_View(backend), 0, 3, 1, sample)
    try:
        for step in range(3):
            batch = producer.batch(step)
            # stamped one version older than the sampler's: stale iff sampled at step − 1
            assert batch.stale == int(started[step][1] < step)
            backend.sync(None, step + 1)
    finally:
        producer.close()
    assert all(version >= step - 1 for step, version in started), started
    assert not producer.alive


def test_a_producer_that_raises_surfaces_its_error_and_stops():
    backend = AsyncBackend(RolloutBackend(None))
    boom = ValueError("env exploded")

    def sample(view, step):
        if step == 1:
            raise boom
        return SampledBatch([], [], 1, 0, 0)

    producer = AsyncRollouts(_View(backend), 0, 3, 2, sample)
    assert producer.batch(0).train == []
    with pytest.raises(ValueError, match="env exploded") as exc_info:
        producer.batch(1)
    assert exc_info.value is boom
    producer.close()
    assert not producer.alive


def test_close_stops_a_producer_waiting_for_a_version():
    backend = AsyncBackend(RolloutBackend(None))
    producer = AsyncRollouts(_View(backend), 0, 5, 1, lambda v, s: SampledBatch([], [], 1, 0, 0))
    producer.batch(0)  # step 2 waits for version 1, which never comes
    producer.close()
    assert not producer.alive


# ---- training runs -----------------------------------------------------------------------------
def _tiny(tiny_model_dir, tmp_path, steps: int, *extra: str) -> list[str]:
    return tiny_rl_overrides(tiny_model_dir, tmp_path, steps, *extra)


def _rl(run_dir):
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from agentic_rl.trajectories import TrajectoryStore

    rows = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == "rl"]
    return rows, list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))


def _assert_at_most_one_version_old(rows, records, steps: int) -> None:
    assert [r["rl_step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["rollout/staleness_max"] <= 1.0 and r["rollout/dropped_stale"] == 0, r
    assert records
    for rec in records:
        trainer_version = rec["rl_step"] - 1  # updates done when the step trained on it
        sampled = [v for v, m in zip(rec["token_versions"], rec["loss_mask"]) if m]
        assert rec["policy_version"] == min(sampled)
        assert trainer_version - 1 <= min(sampled) and max(sampled) <= trainer_version, rec


def test_k1_never_trains_on_a_trajectory_more_than_one_version_old(tiny_model_dir, tmp_path):
    from agentic_rl.trainer.recipe import train

    steps = 4
    overrides = _tiny(tiny_model_dir, tmp_path, steps, "algorithm.max_off_policy_steps=1")
    run_dir = train(load_config(None, overrides))
    rows, records = _rl(run_dir)
    _assert_at_most_one_version_old(rows, records, steps)
    assert not [t for t in threading.enumerate() if t.name == "rollout-producer"]


def test_k1_with_dynamic_sampling_guidance_and_the_task_pool(tiny_model_dir, tmp_path):
    from agentic_rl.trainer.recipe import train

    overrides = [
        o
        for o in _tiny(tiny_model_dir, tmp_path, 3, "algorithm.max_off_policy_steps=1")
        if o not in SIMPLE_SAMPLING
    ]  # the default sampling: dynamic, oracle guidance, difficulty pool
    # 48 tokens: the oracle's replies fit, so all-failed groups of the random model get guidance
    more = [*overrides, "sampling.rollout_tasks=2", "rollout.max_new_tokens=48"]
    rows, records = _rl(train(load_config(None, more)))
    assert [r["rl_step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/staleness_max"] <= 1.0 and r["rollout/sample_rounds"] >= 1, r
    guided = [r for r in records if r["info"].get("guidance")]
    own = [r for r in records if not r["info"].get("guidance")]
    assert own and all(r["rl_step"] - 1 - r["policy_version"] <= 1 for r in records)
    assert all(r["rl_step"] - 1 - min(v for v in r["token_versions"] if v >= 0) <= 1 for r in own)
    assert guided and sum(r["rollout/groups_guided"] for r in rows) == len(guided)


def test_k0_is_the_synchronous_loop(tiny_model_dir, tmp_path):
    from agentic_rl.trainer.recipe import train

    rows, records = _rl(train(load_config(None, _tiny(tiny_model_dir, tmp_path, 2))))
    assert all("rollout/dropped_stale" not in r for r in rows)
    assert {(r["rl_step"], r["policy_version"]) for r in records} == {(1, 0), (2, 1)}
    assert all("token_versions" not in r for r in records)


def test_a_failing_producer_stops_the_run_cleanly(tiny_model_dir, tmp_path, monkeypatch):
    from agentic_rl.trainer.recipe import train
    from agentic_rl.trainer.sampling import async_producer as async_rollouts

    real = async_rollouts.sample_step

    def sample(run, step):
        if step == 1:
            raise RuntimeError("rollout worker died")
        return real(run, step)

    monkeypatch.setattr(async_rollouts, "sample_step", sample)
    overrides = _tiny(tiny_model_dir, tmp_path, 3, "algorithm.max_off_policy_steps=1")
    with pytest.raises(RuntimeError, match="rollout worker died"):
        train(load_config(None, overrides))
    assert not [t for t in threading.enumerate() if t.name == "rollout-producer"]


def test_k1_through_a_vllm_server(tokenizer, tmp_path_factory, tmp_path):
    from agentic_rl.policy.vllm_server import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        pytest.skip(f"vLLM CPU server unavailable: {reason}")
    pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")
    from agentic_rl.trainer.recipe import train
    from tests.tiny_models import save_random_llama

    model_dir = save_random_llama(
        tokenizer, tmp_path_factory.mktemp("small-llama"), hidden_size=128,
        intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    steps = 3
    overrides = _tiny(
        model_dir,
        tmp_path,
        steps,
        "algorithm.max_off_policy_steps=1",
        "rollout.backend='vllm'",
        "sampling.guidance='off'",
        "loss.tis_cap=2.0",
    )
    rows, records = _rl(train(load_config(None, overrides)))
    _assert_at_most_one_version_old(rows, records, steps)
