"""`agentic-rl train` with its RL rollouts in 2 Ray generation workers (a private local Ray, the
tiny random Llama, 2 RL steps), and the combinations it refuses."""

from __future__ import annotations

import os
import time

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.policy.model_loading import load_model
from agentic_rl.trainer.learning.scoring import pack, score
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from agentic_rl.trajectories.serialize import trajectory_from_record
from tests.recipe_settings import SIMPLE_SAMPLING

#: fp32 FastPolicy in the actor vs the trainer's scoring forward at the same weights
LOGPROB_ATOL = 1e-4
TEMPERATURE = 0.7


def _overrides(model_dir, output_dir) -> list[str]:
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        "algorithm.steps=2",
        *SIMPLE_SAMPLING,
        # PPO: the value baseline gives non-zero advantages even when every reward is equal,
        # so each RL step really changes the policy (what the sync must carry)
        "algorithm.name='ppo'",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=2",
        "optim.lr=1e-3",
        "warmup.enabled=false",
        "eval.size=1",
        "eval.base=false",
        "tracking.tensorboard=false",
        f"output_dir='{output_dir}'",
        "rollout.max_new_tokens=12",
        "rollout.max_turns=1",
        f"rollout.temperature={TEMPERATURE}",
    ]


def _gone(pid: int, wait_s: float = 60.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def _max_diff(model, trajectories) -> float:
    batch = pack(trajectories)
    with torch.no_grad():
        logprobs, _ = score(model, batch, temperature=TEMPERATURE)
    return float((logprobs - batch.old_logprobs).abs().max())


def test_train_with_two_generation_workers(tiny_model_dir, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")
    if ray.is_initialized():
        pytest.skip("a Ray is already up in this process; the run would share it")
    from agentic_rl.trainer.sampling.backends import GenerationWorkersBackend

    pushed: dict[int, dict[str, torch.Tensor]] = {}  # the trainer's weights at each sync
    real_sync = GenerationWorkersBackend.sync

    def sync(self, model, version):
        pushed[version] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return real_sync(self, model, version)

    monkeypatch.setattr(GenerationWorkersBackend, "sync", sync)
    config = load_config(
        None,
        [
            *_overrides(tiny_model_dir, tmp_path / "runs"),
            "scale.num_generation_workers=2",
            "scale.generation_worker_cpus=0.5",
        ],
    )
    started = time.perf_counter()
    run_dir = train(config)
    print(f"\n2-step run with 2 generation workers: {time.perf_counter() - started:.1f} s")
    assert not ray.is_initialized()  # the run's private Ray is shut down with it

    records = list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    assert {(r["rl_step"], r["policy_version"]) for r in records} == {(1, 0), (2, 1)}
    pids = {r["info"]["generation_worker_pid"] for r in records}
    assert len(pids) == 2 and os.getpid() not in pids  # sampled in both actors, none here
    assert all(r["failure"] is None for r in records)
    for r in TrajectoryStore(run_dir / "trajectories").read(phase="eval"):
        assert "generation_worker_pid" not in r["info"]  # evaluation samples in the trainer

    rows = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["perf/weight_sync_s"] > 0.0 and r["rollout/staleness_max"] == 0.0, r
        print(f"step {r['rl_step']}: weight sync {r['perf/weight_sync_s'] * 1e3:.1f} ms")

    # each step's rollouts were sampled with the weights pushed before it: the step-2 ones with
    # the weights after step 1, not those before it (the sync really happened)
    assert sorted(pushed) == [0, 1, 2]  # before RL, then after each step
    model = load_model(tiny_model_dir)
    diffs = {}
    for step in (1, 2):
        trajectories = [trajectory_from_record(r) for r in records if r["rl_step"] == step]
        for version in (0, 1):
            model.load_state_dict(pushed[version])
            diffs[step, version] = _max_diff(model, trajectories)
    print(f"max |sampled - trainer logprob| (step, weights version): {diffs}")
    assert diffs[1, 0] < LOGPROB_ATOL and diffs[2, 1] < LOGPROB_ATOL
    assert diffs[2, 0] > 20 * LOGPROB_ATOL  # step 1 changed the policy, and step 2 saw it
    assert all(_gone(pid) for pid in pids)  # no actor process left


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--num-generation-workers", "-1"],
            "key 'scale.num_generation_workers' must be >= 0, got -1",
        ),
        (
            ["--num-generation-workers", "2", "--rollout-backend", "vllm"],
            "scale.num_generation_workers > 0 needs rollout.backend = 'local', got 'vllm'",
        ),
        (
            [
                "--num-generation-workers",
                "2",
                "--rollout-backend",
                "openai",
                "--base-url",
                "http://127.0.0.1:9/v1",
            ],
            "needs rollout.backend = 'local', got 'openai'",
        ),
        (
            ["--num-generation-workers", "2", "--set", "algorithm.max_off_policy_steps=1"],
            "not supported with algorithm.max_off_policy_steps >= 1",
        ),
        (
            ["--set", "scale.generation_worker_timeout_s=0"],
            "key 'scale.generation_worker_timeout_s' must be > 0",
        ),
    ],
)
def test_unsupported_generation_worker_settings_are_one_error_line(flags, message, capsys):
    pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")
    assert main(["train", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_generation_workers_are_refused_under_torchrun(monkeypatch):
    from agentic_rl.trainer.parallel.scale_out import check_scale

    config = load_config(None, ["scale.num_generation_workers=2"])
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets in each of 2 ranks
    with pytest.raises(
        ConfigError, match="num_generation_workers > 0 is not supported under torchrun"
    ):
        check_scale(config)


def test_a_ray_address_is_accepted_for_generation_workers_alone():
    config = load_config(None, ["scale.num_generation_workers=1", "scale.ray_address='auto'"])
    assert config.scale.num_env_workers == 0 and config.scale.num_generation_workers == 1
    with pytest.raises(ConfigError, match="num_generation_workers is 0"):
        load_config(None, ["scale.ray_address='auto'"])
