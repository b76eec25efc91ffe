"""The whole training recipe: a smoke run and kill-and-resume on the tiny random Llama (light),
and a 2-step run on the real SmolLM2-135M (slow)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.config import load_config
from agentic_rl.errors import ConfigError
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.checkpoint import latest_checkpoint
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from tests.recipe_settings import SIMPLE_SAMPLING


def _tiny_overrides(model_dir: Path, output_dir: Path, steps: int) -> list[str]:
    return [
        f"model.path='{model_dir}'",
        "model.num_threads=1",
        f"algorithm.steps={steps}",
        *SIMPLE_SAMPLING,
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=2",
        "warmup.num_demos=4",
        "warmup.batch_size=2",
        "eval.size=3",
        "checkpoint_every=1",
        f"output_dir='{output_dir}'",
        "rollout.max_new_tokens=48",
    ]


def _rows(run_dir: Path, phase: str) -> list[dict]:
    return [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == phase]


def _rl_token_streams(run_dir: Path) -> dict[int, list[tuple[int, ...]]]:
    out: dict[int, list[tuple[int, ...]]] = {}
    for rec in TrajectoryStore(run_dir / "trajectories").read(phase="rl"):
        out.setdefault(rec["rl_step"], []).append(tuple(rec["token_ids"]))
    return out


@pytest.fixture(scope="module")
def smoke_run(tiny_model_dir, tmp_path_factory):
    """A 3-step run (warm-up, evals, checkpoints every step) with the tiny model."""
    out = tmp_path_factory.mktemp("smoke") / "runs"
    config = load_config(None, _tiny_overrides(tiny_model_dir, out, steps=3))
    calls = []
    run_dir = train(config, progress=lambda *a: calls.append(a))
    assert run_dir == out / config.name
    return config, run_dir, calls


def test_tiny_smoke_run(tiny_model_dir, smoke_run):
    config, run_dir, calls = smoke_run

    assert load_config(run_dir / "config.toml") == config

    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["base", "warmup", "final"]
    warmup = _rows(run_dir, "warmup")
    assert [r["step"] for r in warmup] == [1, 2]  # 4 demos / batch 2
    assert all(math.isfinite(r["train/loss"]) for r in warmup)
    rl = _rows(run_dir, "rl")
    assert [r["rl_step"] for r in rl] == [1, 2, 3]
    for r in rl:
        assert 0.0 <= r["rollout/success"] <= 1.0 and r["rollout/failed"] == 0.0
        assert r["perf/step_time_s"] > 0 and "rollout/reward_total" in r
        if "train/loss" in r:
            assert math.isfinite(r["train/loss"])
    assert [c[1] for c in calls if c[0] == "rl"] == [1, 2, 3]
    assert calls[0] == ("start", 0, 1, str(run_dir))  # before any other progress

    assert list((run_dir / "tb").glob("events.out.tfevents.*"))  # TensorBoard on by default
    store = TrajectoryStore(run_dir / "trajectories")
    trajs = list(store.read_trajectories())
    phases = Counter(rec["phase"] for rec in store.read())
    assert phases == {"warmup": 4, "rl": 3 * 2 * 2, "eval": 3 * 3}
    assert all(len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) for t in trajs)
    assert all(t.terminated for t in store.read_trajectories(phase="warmup"))
    rl_groups = Counter(rec["group_id"] for rec in store.read(phase="rl"))
    assert sorted(rl_groups.values()) == [2] * 6  # G = 2 rollouts per task

    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000003"]
    final = run_dir / "final_model"
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    assert (final / "tokenizer.json").is_file()
    # the warm-up changed the weights
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(final / "model.safetensors"))
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])

    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["success"]) == {"base", "warmup", "final"}
    assert set(summary["success_by_level"]["final"]) == {"direct", "multi_op", "word"}
    assert "correct_answer" in summary["final_reward_components"]
    report = (run_dir / "report.html").read_text()
    assert report.startswith("<!DOCTYPE html>") or "<html" in report[:200]


def test_warmup_trains_only_on_correct_demonstrations(smoke_run):
    _, run_dir, _ = smoke_run
    demos = list(TrajectoryStore(run_dir / "trajectories").read_trajectories(phase="warmup"))
    assert all(t.reward_components["correct_answer"] == 1.0 for t in demos)
    assert all(t.turns[0].tool_results and t.turns[0].tool_results[0].ok for t in demos)


def test_resuming_a_finished_run_adds_nothing(smoke_run, tmp_path):
    import shutil

    _, run_dir, _ = smoke_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    assert train(None, resume=copy) == copy
    rows = MetricsLog(copy / "metrics.jsonl").rows()
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1, 2, 3]
    assert [r["tag"] for r in rows if r["phase"] == "eval"] == ["base", "warmup", "final"]
    assert Counter(rec["phase"] for rec in TrajectoryStore(copy / "trajectories").read()) == {
        "warmup": 4,
        "rl": 12,
        "eval": 9,
    }


def test_resume_does_not_silently_drop_overrides(smoke_run, tmp_path, capsys):
    import shutil

    from agentic_rl.cli import main

    _, run_dir, _ = smoke_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    rc = main(["train", "--resume", str(copy), "--set", "algorithm.steps=5"])
    steps = [r["rl_step"] for r in _rows(copy, "rl")]
    assert rc == 2 or steps == [1, 2, 3, 4, 5]


def _wait_for(
    proc: subprocess.Popen, run_dir: Path, rl_rows: int, log: Path, timeout: float = 180.0
) -> None:
    """Poll until `rl_rows` RL metric rows and a checkpoint after RL step 0 exist."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"training ended before the kill (rc {proc.returncode}): {log.read_text()}"
            )
        rows = _rows(run_dir, "rl") if (run_dir / "metrics.jsonl").exists() else []
        ckpts = (
            [p for p in (run_dir / "checkpoints").glob("step-*") if p.name != "step-000000"]
            if (run_dir / "checkpoints").exists()
            else []
        )
        if len(rows) >= rl_rows and ckpts:
            return
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("timed out waiting for RL steps")


def test_a_taken_run_name_is_said_in_the_first_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Issue 39, item 10: a second run with the same name went to NAME-2 without a word."""
    from agentic_rl.cli import main
    from tests.recipe_settings import TWO_RL_STEPS

    monkeypatch.setenv("COLUMNS", "400")  # one log line is one line
    sets = [f"model.path='{tiny_model_dir}'", "model.num_threads=1", f"output_dir='{tmp_path}'"]
    sets += [*TWO_RL_STEPS, "algorithm.steps=1", "name='same'"]
    argv = ["train", *[a for s in sets for a in ("--set", s)]]
    (tmp_path / "same").mkdir()  # an earlier run's directory
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "training same-2 on calculator-v0" in first and f"in {tmp_path / 'same-2'}" in first
    assert f"({tmp_path / 'same'} exists, so this run is same-2)" in first


def test_kill_and_resume(tiny_model_dir, tmp_path):
    steps = 8
    # skip_zero_advantage=false: every step runs an optimizer step (all advantages are 0 with this
    # random model), so AdamW's per-parameter step counter records how many steps it has seen
    extra = ["optim.skip_zero_advantage=false"]
    overrides = _tiny_overrides(tiny_model_dir, tmp_path / "runs", steps) + extra
    run_dir = tmp_path / "runs" / "calculator-grpo"
    cmd = [sys.executable, "-m", "agentic_rl.cli", "train"] + [
        a for o in overrides for a in ("--set", o)
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    log = tmp_path / "train.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            _wait_for(proc, run_dir, rl_rows=2, log=log)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()
    # every trajectory completed before the kill reads back intact: whole shards, whole RL steps
    killed = TrajectoryStore(run_dir / "trajectories", read_only=True)
    assert all(
        len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) for t in killed.read_trajectories()
    )
    logged = _rl_token_streams(run_dir)
    assert sorted(logged) == list(range(1, len(logged) + 1)) and all(
        len(v) == 4 for v in logged.values()
    )

    checkpoint = latest_checkpoint(run_dir)
    k = torch.load(checkpoint / "trainer_state.pt", weights_only=False)["rl_step"]
    assert 1 <= k < steps

    calls = []
    assert train(None, resume=run_dir, progress=lambda *a: calls.append(a)) == run_dir
    assert calls[0] == ("start", 0, 1, str(run_dir)) and calls[1][:2] == ("resume", k)
    assert [c[1] for c in calls if c[0] == "rl"] == list(
        range(k + 1, steps + 1)
    )  # first resumed step = k + 1

    # metrics: every RL step exactly once, warm-up and evals not repeated
    assert [r["rl_step"] for r in _rows(run_dir, "rl")] == list(range(1, steps + 1))
    assert [r["tag"] for r in _rows(run_dir, "eval")] == ["base", "warmup", "final"]
    assert [r["step"] for r in _rows(run_dir, "warmup")] == [1, 2]
    streams = _rl_token_streams(run_dir)
    assert sorted(streams) == list(range(1, steps + 1))
    assert all(
        len(v) == 4 for v in streams.values()
    )  # no duplicated rollouts of a half-logged step
    assert Counter(
        r["tag"] for r in TrajectoryStore(run_dir / "trajectories").read(phase="eval")
    ) == {"base": 3, "warmup": 3, "final": 3}

    # optimizer state restored: AdamW saw all `steps` RL steps (it would count steps - k if reset)
    state = torch.load(latest_checkpoint(run_dir) / "trainer_state.pt", weights_only=False)
    assert state["rl_step"] == steps
    assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {float(steps)}

    # sampler RNG restored: the rollouts equal those of an uninterrupted run with the same config
    reference = train(
        load_config(None, _tiny_overrides(tiny_model_dir, tmp_path / "ref", steps) + extra)
    )
    assert _rl_token_streams(reference) == streams


@pytest.mark.slow
def test_smollm2_two_step_run(model_dir, tmp_path):
    config = load_config(
        None,
        [
            "algorithm.steps=2",
            *SIMPLE_SAMPLING,
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=2",
            "warmup.num_demos=4",
            "eval.size=2",
            "rollout.max_new_tokens=48",
            f"output_dir='{tmp_path}'",
        ],
    )
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    train_rows = [r for r in rows if "train/loss" in r]
    assert any(r["phase"] == "warmup" for r in train_rows)
    for r in train_rows:  # rl rows lack train/loss when every advantage of the step is 0
        assert r["train/loss"] is not None and math.isfinite(r["train/loss"]), r
        assert r["train/grad_norm"] is not None and math.isfinite(r["train/grad_norm"]), r
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    base = load_file(str(model_dir / "model.safetensors"))
    final = load_file(str(run_dir / "final_model" / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    assert base[name].shape == final[name].shape
    assert not torch.equal(base[name], final[name])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["success"]) == {"base", "warmup", "final"}


@pytest.mark.parametrize("option", ["model.lora=true", "model.gradient_checkpointing=true"])
def test_lora_and_gradient_checkpointing_runs_train_and_export(option, tiny_model_dir, tmp_path):
    """Both options go through warm-up, RL and export; LoRA trains only adapter weights."""
    config = load_config(
        None,
        [
            *_tiny_overrides(tiny_model_dir, tmp_path / "runs", steps=1),
            option,
            "eval.size=2",
            "eval.base=false",
        ],
    )
    run_dir = train(config)
    rl = _rows(run_dir, "rl")
    assert len(rl) == 1 and all(math.isfinite(r["train/loss"]) for r in rl if "train/loss" in r)
    trainable = load_file(str(latest_checkpoint(run_dir) / "trainable.safetensors"))
    if option.startswith("model.lora"):
        assert trainable and all("lora_" in name for name in trainable)
    else:
        assert any("embed_tokens" in name for name in trainable)
    exported = load_file(str(run_dir / "final_model" / "model.safetensors"))
    assert not any("lora_" in name for name in exported)  # LoRA is merged into the export


def test_scoring_with_gradient_checkpointing_matches_plain_scoring(tiny_model_dir):
    """The shared-prefix path of score() must give the same logprobs with checkpointing on."""
    from agentic_rl.policy.model_loading import load_model
    from agentic_rl.trainer.learning.scoring import pack, score
    from agentic_rl.types import StopReason, Trajectory

    prompt = list(range(100, 140))  # a 40-token shared prefix
    streams = [prompt + [7, 8, 9], prompt + [11, 12]]
    trajs = [
        Trajectory(
            "x",
            0,
            "g",
            str(i),
            (),
            (),
            tuple(s),
            tuple([0] * 40 + [1] * (len(s) - 40)),
            tuple([0.0] * len(s)),
            StopReason.TERMINATED,
        )
        for i, s in enumerate(streams)
    ]
    batch = pack(trajs)
    model = load_model(tiny_model_dir)
    model.train()
    plain, _ = score(model, batch, min_shared_prefix=10**9)
    shared, _ = score(model, batch)
    model.gradient_checkpointing_enable()
    checkpointed, _ = score(model, batch)
    assert torch.allclose(plain, shared, atol=1e-5)
    assert torch.allclose(plain, checkpointed, atol=1e-5)


def test_training_run_audits_every_tool_call(smoke_run):
    """The run's envs write RUN_DIR/audit.jsonl with the run id and the trajectories' ids."""
    from agentic_rl.tools.governance.audit import AuditLog

    _, run_dir, _ = smoke_run
    records = list(AuditLog(run_dir / "audit.jsonl").read())
    assert records and all(r["run_id"] == run_dir.name for r in records)
    called = {
        rec["trajectory_id"]
        for rec in TrajectoryStore(run_dir / "trajectories").read()
        if any(t["action"]["tool_calls"] or t["action"]["tool_call_errors"] for t in rec["turns"])
    }
    assert {r["trajectory_id"] for r in records} == called


def test_recorded_training_run_replays_without_divergence(smoke_run, capsys):
    """Every trajectory the recipe stored (warm-up demos, RL rollouts, evals) replays exactly
    through ``agentic-rl replay``: the recorded env id, seed and kwargs rebuild the same env."""
    from agentic_rl.cli import main

    _, run_dir, _ = smoke_run
    records = list(TrajectoryStore(run_dir / "trajectories").read())
    assert all(r["run_id"] == run_dir.name and "env_kwargs" in r for r in records)
    assert {r["policy_version"] for r in records if r["phase"] == "rl"} == {0, 1, 2}
    for record in records:
        assert (
            main(["replay", str(run_dir), "--trajectory", record["trajectory_id"], "--json"]) == 0
        )
        out = json.loads(capsys.readouterr().out)
        assert out["first_divergent_turn"] is None and out["turns_replayed"] == len(record["turns"])


def test_budget_reached_stops_at_the_step_count_closest_to_the_budget():
    from agentic_rl.trainer.recipe import budget_reached

    # steps of 100 s, budget 250 s: after 2 steps (200 s) a third would end at 300 s, 50 s over,
    # the same distance as stopping at 200 s -> stop (ties stop); after 1 step (100 s) go on
    assert not budget_reached(100.0, 1, 250.0)
    assert budget_reached(200.0, 2, 250.0)
    # budget 260 s: 300 s is 40 s away, 200 s is 60 s away -> one more step
    assert not budget_reached(200.0, 2, 260.0)
    assert budget_reached(300.0, 3, 260.0)
    # one step longer than the whole budget: stop after it (at least one step always runs)
    assert budget_reached(190.0, 1, 150.0)
    # no budget, or nothing run yet: never
    assert not budget_reached(1e9, 5, 0.0)
    assert not budget_reached(0.0, 0, 10.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sampler_dtype_sets_how_far_recorded_logprobs_are_from_the_trainers(
    dtype, tiny_model_dir, tmp_path
):
    """model.sampler_dtype=bfloat16: rollouts come from a bf16 copy, so the trainer's logprobs
    differ from the recorded ones (the importance ratio corrects it); with float32 they agree."""
    config = load_config(
        None,
        [
            *_tiny_overrides(tiny_model_dir, tmp_path / "runs", steps=1),
            f"model.sampler_dtype='{dtype}'",
            "optim.skip_zero_advantage=false",
            "eval.size=2",
            "eval.base=false",
            "warmup.enabled=false",
        ],
    )
    rl = _rows(train(config), "rl")
    assert len(rl) == 1 and math.isfinite(rl[0]["train/loss"])
    # the LM head runs in float32 in both (docs/gpu.md), so bf16 only rounds the layers' matmuls:
    # measured 6e-5 on this 32-wide model, float32 ~1e-7 (summation order)
    if dtype == "float32":
        assert rl[0]["train/logprob_diff"] < 1e-5
    else:
        assert 1e-5 < rl[0]["train/logprob_diff"] < 0.5


def test_sampler_dtype_is_validated():
    with pytest.raises(ConfigError, match="needs model.sampler = 'fast'"):
        load_config(None, ["model.sampler='hf'", "model.sampler_dtype='bfloat16'"])
    with pytest.raises(ConfigError, match="sampler_dtype must be one of"):
        load_config(None, ["model.sampler_dtype='float16'"])


def test_dynamic_sampling_refills_to_its_cap_and_counts_the_shortfall(tiny_model_dir, tmp_path):
    """The default sampling end to end on a random tiny model (every outcome 0): no group is
    informative, so each step runs max_sample_rounds rounds of new tasks, trains nothing and logs
    the shortfall; the stored rollouts are every round's, with distinct seeds from the task pool."""
    config = load_config(
        None,
        [
            f"model.path='{tiny_model_dir}'",
            "model.num_threads=1",
            f"output_dir='{tmp_path}'",
            "algorithm.steps=2",
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=2",
            "sampling.rollout_tasks=3",
            "sampling.max_sample_rounds=2",
            "sampling.guidance='off'",  # guidance would fill the batch (test_guidance.py)
            "warmup.enabled=false",
            "eval.base=false",
            "eval.size=1",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=1",
            "tracking.tensorboard=false",
        ],
    )
    assert config.sampling.dynamic_sampling and config.sampling.task_sampling == "difficulty"
    run_dir = train(config)
    rl = _rows(run_dir, "rl")
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/sample_rounds"] == 2 and r["rollout/groups_sampled"] == 6
        assert r["rollout/groups_informative"] == 0 and r["rollout/groups_shortfall"] == 2
        assert "train/loss" not in r and r["train/trajectories"] == 0
        assert {k for k in r if k.startswith("pool/accept/")} == {
            "pool/accept/direct",
            "pool/accept/multi_op",
            "pool/accept/word",
        }
    records = list(TrajectoryStore(run_dir / "trajectories").read(phase="rl"))
    assert len(records) == 2 * 6 * 2
    seeds = [r["seed"] for r in records]
    assert len(set(seeds)) == 2 * 6  # 6 groups a step, every task new
