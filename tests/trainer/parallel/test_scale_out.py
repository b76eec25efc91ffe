"""Scale-out of `agentic-rl train` on this machine: envs in 2 Ray env workers of a real local Ray,
2 data-parallel gloo ranks under torchrun, and the errors of a bad [scale] (tiny model, 1 step)."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_rl.cli import main
from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from tests.recipe_settings import SIMPLE_SAMPLING

TASKS, GROUP, EVAL = 4, 2, 2


def _overrides(model_dir: Path, output_dir: Path) -> list[str]:
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        "algorithm.steps=1",
        *SIMPLE_SAMPLING,
        f"algorithm.tasks_per_step={TASKS}",
        f"algorithm.group_size={GROUP}",
        "warmup.num_demos=4",
        "warmup.batch_size=2",
        f"eval.size={EVAL}",
        "eval.base=false",
        "tracking.tensorboard=false",
        f"output_dir='{output_dir}'",
        "rollout.max_new_tokens=48",
    ]


def _records(run_dir: Path, phase: str) -> list[dict]:
    return list(TrajectoryStore(run_dir / "trajectories").read(phase=phase))


def test_train_with_two_ray_env_workers_matches_in_process_envs(tiny_model_dir, tmp_path):
    ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")
    was_up = ray.is_initialized()
    local = train(load_config(None, _overrides(tiny_model_dir, tmp_path / "local")))
    remote = train(
        load_config(
            None,
            [
                *_overrides(tiny_model_dir, tmp_path / "ray"),
                "scale.num_env_workers=2",
                "scale.env_worker_cpus=0.5",
            ],
        )
    )
    assert ray.is_initialized() == was_up  # the run's private Ray is shut down with it

    pids = set()
    for phase in ("warmup", "rl", "eval"):
        got, expected = _records(remote, phase), _records(local, phase)
        assert len(got) == len(expected) > 0
        for r in got:  # every env of the run lived in an env worker, none in this process
            assert r["info"]["env_worker_pid"] != os.getpid()
            pids.add(r["info"]["env_worker_pid"])
            assert "env_worker_pid" not in expected[0]["info"]
        # same seeds, same sampling seeds: the same token streams as with envs in this process
        assert sorted(tuple(r["token_ids"]) for r in got) == sorted(
            tuple(r["token_ids"]) for r in expected
        )
    assert len(pids) == 2
    rl = [r for r in MetricsLog(remote / "metrics.jsonl").rows() if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1] and rl[0]["rollout/failed"] == 0.0


def test_env_workers_and_their_ray_stop_when_the_run_fails(tiny_model_dir, tmp_path):
    ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")
    if ray.is_initialized():
        pytest.skip("a Ray is already up in this process; the run would share it")
    # 2 tokens per turn: no oracle demonstration fits, the warm-up fails after the workers started
    config = load_config(
        None,
        [
            *_overrides(tiny_model_dir, tmp_path / "runs"),
            "rollout.max_new_tokens=2",
            "scale.num_env_workers=2",
            "scale.env_worker_cpus=0.5",
        ],
    )
    with pytest.raises(ConfigError, match="no oracle demonstration succeeds"):
        train(config)
    assert not ray.is_initialized()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_ray_address_fails_before_the_run_starts(tiny_model_dir, tmp_path):
    pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")
    address = f"127.0.0.1:{_closed_port()}"
    config = load_config(
        None,
        [
            *_overrides(tiny_model_dir, tmp_path / "runs"),
            "scale.num_env_workers=1",
            f"scale.ray_address='{address}'",
        ],
    )
    with pytest.raises(ConfigError, match=f"no Ray cluster reachable at {address}"):
        train(config)
    assert not (tmp_path / "runs").exists()  # nothing left behind
    bad = load_config(
        None,
        [
            *_overrides(tiny_model_dir, tmp_path / "runs"),
            "scale.num_env_workers=1",
            "scale.ray_address='nohost'",
        ],
    )
    with pytest.raises(ConfigError, match="'auto', 'host:port' or 'ray://host:port'"):
        train(bad)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-env-workers", "-1"], "key 'scale.num_env_workers' must be >= 0, got -1"),
        (["--ray-address", "auto"], "scale.ray_address is 'auto' but scale.num_env_workers is 0"),
        (["--set", "scale.env_worker_timeout_s=0"], "key 'scale.env_worker_timeout_s' must be > 0"),
    ],
)
def test_bad_scale_flags_are_one_error_line(flags, message, capsys):
    assert main(["train", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_torchrun_two_ranks_train_identical_weights_and_only_rank_0_writes(
    tiny_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM

    from agentic_rl.trainer.parallel.distributed import weights_digest

    out, logs = tmp_path / "runs", tmp_path / "torchrun-logs"
    sets = [x for s in _overrides(tiny_model_dir, out) for x in ("--set", s)]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--redirects",
        "3",
        "--log-dir",
        str(logs),
        "-m",
        "agentic_rl.cli",
        "train",
        *sets,
    ]
    proc = subprocess.run(
        cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    rank_logs = {
        int(Path(p).parent.name): Path(p)
        for p in glob.glob(f"{logs}/**/stdout.log", recursive=True)
    }
    assert proc.returncode == 0, proc.stderr[-3000:] + "".join(
        p.with_name("stderr.log").read_text()[-3000:] for p in rank_logs.values()
    )

    [run_dir] = list(out.iterdir())  # one run directory, written by rank 0
    summary = json.loads((run_dir / "summary.json").read_text())
    digests = summary["data_parallel"]["weights_sha256"]
    assert (
        summary["data_parallel"]["world_size"] == 2 and digests[0] == digests[1]
    )  # identical weights
    assert digests[0] != weights_digest(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    )  # it trained
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    assert [r["step"] for r in rows if r["phase"] == "warmup"] == [
        1,
        2,
    ]  # logged once, not once per rank
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1]
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["warmup", "final"]
    # each rank rolled out half of the step's groups; rank 0 stored all of them, once
    rl = _records(run_dir, "rl")
    assert sorted(r["seed"] for r in rl) == sorted(s for s in range(TASKS) for _ in range(GROUP))
    assert len(_records(run_dir, "eval")) == 2 * EVAL and len(_records(run_dir, "warmup")) == 4
    assert sorted(rank_logs) == [0, 1] and rank_logs[1].read_text() == ""  # rank 1 printed nothing
    assert "Held-out success" in rank_logs[0].read_text()


@pytest.mark.parametrize(
    ("sets", "why"),
    [
        (["algorithm.name='ppo'"], "value head"),
        (["algorithm.name='reinforce_pp'"], "whole step's batch"),
        (["algorithm.std_scope='batch'"], "std_scope 'batch'"),
    ],
)
def test_credit_needing_the_whole_batch_is_refused_under_torchrun(sets, why, monkeypatch):
    from agentic_rl.trainer.parallel.scale_out import check_scale

    config = load_config(None, sets)
    check_scale(config)  # one process: fine
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets in each of 2 ranks
    with pytest.raises(ConfigError, match=f"not supported under torchrun yet.*{why}"):
        check_scale(config)
    check_scale(load_config(None, ["algorithm.name='rloo'"]))  # group-local credit is fine
