"""Env workers in Ray actors: the unchanged rollout engine through RemoteEnv proxies, on a real
local Ray cluster (one per module: ray.init takes ~4 s and 0.6-1 GB)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.policy.scripted import ScriptedPolicy  # noqa: E402
from agentic_rl.rollout import RolloutConfig, run_episodes  # noqa: E402
from agentic_rl.rollout.env_workers import EnvWorkerError, EnvWorkerPool, RemoteEnv  # noqa: E402
from agentic_rl.types import Action, StopReason  # noqa: E402

SEEDS = [3, 3, 11, 12]
CONFIG = RolloutConfig(max_turns=3, max_new_tokens=64)


@pytest.fixture(scope="module")
def pool():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    pool = EnvWorkerPool(2, cpus_per_worker=0.5, timeout_s=60)
    yield pool
    ray.shutdown()


def _oracle_rollout(chat, envs, kill=None):
    def reply(i, _context):
        if kill is not None and i == 0:
            ray.kill(kill)  # the worker holding episode 0 dies before its env is stepped
        try:
            return envs[i].oracle_reply() or ""
        except EnvWorkerError:  # the dead worker's episodes: some reply; their step must fail
            return "<answer>0</answer>"

    return run_episodes(
        ScriptedPolicy(chat, reply), chat, envs, SEEDS, [f"g{s}" for s in SEEDS], CONFIG
    )


def test_remote_envs_give_the_same_trajectories_as_local_ones(pool, chat):
    local = [make("calculator-v0") for _ in SEEDS]
    remote = [pool.make("calculator-v0") for _ in SEEDS]
    assert all(isinstance(e, RemoteEnv) for e in remote) and {e.worker_index for e in remote} == {
        0,
        1,
    }
    expected = _oracle_rollout(chat, local)
    got = _oracle_rollout(chat, remote)
    rubric = remote[0].rubric()
    for a, b in zip(expected, got):
        assert b.env_id == "calculator-v0" and b.stop_reason == StopReason.TERMINATED
        assert (a.token_ids, a.loss_mask, a.messages) == (b.token_ids, b.loss_mask, b.messages)
        assert rubric.apply(b).reward == local[0].rubric().apply(a).reward
        assert rubric.apply(b).reward_components["correct_answer"] == 1.0  # the oracle solves it
    for e in remote:
        e.close()
        e.close()  # twice is safe


def test_step_many_overlaps_and_reports_failures_per_env(pool):
    envs = [pool.make("calculator-v0") for _ in range(3)]
    firsts = pool.reset_many(envs, [1, 2, 3])
    assert [obs.messages[1].content for obs, _ in firsts] == [
        make("calculator-v0").reset(seed=s)[0].messages[1].content for s in (1, 2, 3)
    ]
    final = Action(text="<answer>0</answer>")
    assert all(r[2] for r in pool.step_many(envs, [final] * 3))  # terminated
    again = pool.step_many(envs[:1], [final])[0]  # the env's own EpisodeEndedError, per env
    assert isinstance(again, EnvWorkerError) and "EpisodeEndedError" in str(again)


def test_a_dead_worker_fails_its_episodes_only(pool, chat):
    # its own pool: this test kills a worker
    fresh = EnvWorkerPool(2, cpus_per_worker=0.5, timeout_s=60)
    envs = [fresh.make("calculator-v0") for _ in SEEDS]
    got = _oracle_rollout(chat, envs, kill=fresh.actors[0])
    for env, t in zip(envs, got):
        if env.worker_index == 0:
            assert t.stop_reason == StopReason.ERROR and t.failed and "ActorDied" in t.failure
        else:
            assert t.stop_reason == StopReason.TERMINATED
    fresh.shutdown()


def test_bad_env_arguments_are_reported_by_name(pool):
    with pytest.raises(EnvWorkerError, match="nope"):
        pool.make("calculator-v0", levels=["nope"])
    with pytest.raises(EnvWorkerError, match="no-such-env-v0"):
        pool.make("no-such-env-v0")
    with pytest.raises(ValueError, match="num_workers"):
        EnvWorkerPool(0)


def test_evaluate_builds_its_envs_in_the_workers(pool, chat):
    from agentic_rl.rewards import RewardWeights
    from agentic_rl.trainer.evaluation.held_out import evaluate

    answer_zero = ScriptedPolicy(chat, lambda i, _context: "<answer>0</answer>")
    before = [ray.get(a.num_envs.remote()) for a in pool.actors]
    metrics, trajs = evaluate(
        answer_zero,
        chat,
        "calculator-v0",
        {},
        [1, 2, 3],
        CONFIG,
        RewardWeights(),
        make_env=pool.make,
    )
    assert len(trajs) == 3 and all(t.stop_reason == StopReason.TERMINATED for t in trajs)
    assert metrics["eval/success"] == 0.0  # "0" is wrong for every seed's task
    assert [
        ray.get(a.num_envs.remote()) for a in pool.actors
    ] == before  # evaluate closed its remote envs


def _step_windows(
    pool, tiny_model_dir, chat, env_workers: int
) -> list[tuple[int, tuple[float, float]]]:
    """(worker index, step window) of 4 one-turn episodes decoded by FastPolicy on the tiny model."""
    import torch

    from agentic_rl.policy.fast import FastPolicy
    from agentic_rl.policy.model_loading import load_model

    from . import slow_env

    ray.cloudpickle.register_pickle_by_value(slow_env)
    envs = [pool.make(slow_env.SlowStepEnv, delay_s=0.5) for _ in range(4)]
    from tests.tiny_eos import bias_toward_eos

    model = bias_toward_eos(
        load_model(tiny_model_dir), chat.eos_token_id, logit=20.0
    )  # each reply ends at once
    policy = FastPolicy(
        model,
        chat.eos_token_id,
        chat.tokenizer.pad_token_id,
        generator=torch.Generator().manual_seed(0),
    )
    got = run_episodes(
        policy,
        chat,
        envs,
        [0, 1, 2, 3],
        ["a", "b", "c", "d"],
        RolloutConfig(max_turns=1, max_new_tokens=2),
        sample_seed=0,
        env_workers=env_workers,
    )
    for env in envs:
        env.close()
    assert all(t.stop_reason == StopReason.TERMINATED for t in got)
    return [(e.worker_index, tuple(t.turns[0].info["step_window"])) for e, t in zip(envs, got)]


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_engine_threads_overlap_remote_steps_across_workers(pool, tiny_model_dir, chat):
    """Continuous schedule (FastPolicy): env steps run on the engine's threads, so steps of
    episodes on different workers run at the same time; inline (env_workers=0) they do not."""
    threaded = _step_windows(pool, tiny_model_dir, chat, env_workers=4)
    assert {w for w, _ in threaded} == {0, 1}
    assert any(_overlap(a, b) for (wa, a) in threaded for (wb, b) in threaded if wa != wb)
    inline = _step_windows(pool, tiny_model_dir, chat, env_workers=0)
    assert not any(_overlap(a, b) for i, (_, a) in enumerate(inline) for (_, b) in inline[i + 1 :])
