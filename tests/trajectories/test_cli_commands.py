"""The trajectory subcommands end to end: replay (incl. a non-deterministic env), view, export, compare."""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main
from agentic_rl.envs import registry
from agentic_rl.trajectories import TrajectoryStore, open_run_store, trajectory_to_record
from tests.trajectories.test_replay import FlakyEnv, _record_flaky


def _json_out(capsys, argv):
    rc = main(argv)
    captured = capsys.readouterr()
    assert captured.out, captured.err
    return rc, json.loads(captured.out)


def test_replay_recorded_run_zero_divergences(recorded_run, capsys):
    for record in open_run_store(recorded_run).read():
        rc, out = _json_out(
            capsys,
            [
                "replay",
                str(recorded_run),
                "--trajectory",
                record["trajectory_id"],
                "--json",
                "--rescore",
            ],
        )
        assert rc == 0 and out["first_divergent_turn"] is None and out["divergences"] == []
        assert out["turns_replayed"] == out["turns"] == 2
        assert out["rescore"]["changed"] == [] and out["rescore"]["reward_now"] == pytest.approx(
            record["reward"]
        )
    tid = record["trajectory_id"]
    assert (
        main(["replay", str(recorded_run), "--trajectory", tid[:10]]) == 0
    )  # unique prefix, table output
    assert "0 divergences" in capsys.readouterr().out


def test_replay_flaky_env_reports_first_divergent_turn(tmp_path, chat, capsys):
    if "test-flaky-v0" not in registry._REGISTRY:
        registry.register("test-flaky-v0", FlakyEnv, "test only: unseeded noise at turn 1")
    traj = _record_flaky(chat)
    traj = traj.__class__(**{**traj.__dict__, "env_id": "test-flaky-v0"})
    TrajectoryStore(tmp_path / "trajectories").append([trajectory_to_record(traj, env_kwargs={})])
    rc, out = _json_out(
        capsys, ["replay", str(tmp_path), "--trajectory", traj.trajectory_id, "--json"]
    )
    assert (
        rc == 1
        and out["first_divergent_turn"] == 1
        and out["divergences"][0]["what"] == "observation"
    )
    assert main(["replay", str(tmp_path), "--trajectory", traj.trajectory_id]) == 1
    assert "first divergence at turn 1" in capsys.readouterr().out


def test_replay_logprob_drift_under_a_model(recorded_run, tiny_model_dir, capsys):
    tid = next(open_run_store(recorded_run).read(phase="rl"))["trajectory_id"]
    rc, out = _json_out(
        capsys,
        [
            "replay",
            str(recorded_run),
            "--trajectory",
            tid,
            "--json",
            "--logprobs",
            str(tiny_model_dir),
        ],
    )
    lp = out["logprobs"]
    # the recording is scripted (logprob 0 = probability 1); a random tiny Llama spreads its mass
    # over 49,152 ids, so every sampled token's logprob is far below 0
    assert (
        rc == 0
        and lp["num_tokens"] > 10
        and lp["max_abs"] >= lp["mean_abs"] > 5.0
        and lp["mean_diff"] < 0
    )


def test_replay_errors(recorded_run, tmp_path, capsys):
    assert main(["replay", str(recorded_run), "--trajectory", "nope"]) == 2
    assert "no trajectory 'nope'" in capsys.readouterr().err
    assert main(["replay", str(tmp_path), "--trajectory", "x"]) == 2
    assert "no trajectory store" in capsys.readouterr().err


def test_view_writes_self_contained_page(recorded_run, tmp_path, capsys):
    out = tmp_path / "v.html"
    assert main(["view", str(recorded_run), "--out", str(out), "--no-tokens", "--phase", "rl"]) == 0
    page = out.read_text()
    assert "4 trajectories" in capsys.readouterr().out
    assert (
        "http://" not in page.replace("http://127.0.0.1", "")
        and "<script src" not in page
        and "<link" not in page
    )
    data = json.loads(
        page.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    )
    assert len(data["trajectories"]) == 4 and {t["phase"] for t in data["trajectories"]} == {"rl"}


def test_export_is_loadable_by_hf_datasets(recorded_run, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    argv = ["export", str(recorded_run), "--phase", "rl,eval,warmup", "--out"]
    assert main([*argv, str(tmp_path / "all")]) == 0
    assert main([*argv, str(tmp_path / "ok"), "--only-success"]) == 0
    assert "wrote" in capsys.readouterr().out
    full = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "all" / "data" / "*.parquet"), split="train"
    )
    ok = datasets.load_dataset(str(tmp_path / "ok"), split="train")
    assert len(full) == 6 and len(ok) == 4  # one scripted wrong answer in each shard
    assert all(ok["success"]) and not all(full["success"])
    row = ok[0]
    assert row["messages"][0]["role"] == "system" and row["messages"][-1]["role"] == "assistant"
    assert len(row["input_ids"]) == len(row["loss_mask"]) == len(row["logprobs"])
    assert row["reward/correct_answer"] == 1.0
    rl = [r for r in ok if r["phase"] == "rl"]
    assert all(
        a == (0.5 if m else 0.0) for r in rl for a, m in zip(r["advantages"], r["loss_mask"])
    )
    assert (
        main(["export", str(recorded_run), "--out", str(tmp_path / "none"), "--min-reward", "99"])
        == 2
    )
    assert "nothing to export" in capsys.readouterr().err


def test_export_defaults_to_rl_rollouts_and_says_what_it_left_out(recorded_run, tmp_path, capsys):
    """Issue 39, item 5: the held-out evaluation (and the oracle's warm-up demonstrations) used to
    be exported with the RL rollouts without a word: SFT on it trains on the test set."""
    import pyarrow.parquet as pq

    assert main(["export", str(recorded_run), "--out", str(tmp_path / "d"), "--only-success"]) == 0
    out = capsys.readouterr().out.splitlines()
    table = pq.read_table(tmp_path / "d" / "data" / "train-00000-of-00001.parquet")
    assert set(table.column("phase").to_pylist()) == {"rl"} and table.num_rows == 3
    assert out[0].endswith("(3 trajectories: rl 3)")
    assert out[1] == "left out: eval 1 (--phase rl,warmup,eval includes every phase)"
    assert main(["export", str(recorded_run), "--out", str(tmp_path / "e"), "--phase", "eval"]) == 0
    assert "(2 trajectories: eval 2)" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # argparse: a phase that does not exist
        main(["export", str(recorded_run), "--out", str(tmp_path / "x"), "--phase", "rl,test"])
    assert "rl, warmup, eval" in capsys.readouterr().err
    argv = ["export", str(recorded_run), "--out", str(tmp_path / "w"), "--phase", "warmup"]
    assert main(argv) == 2  # this run has no warm-up: one error line that says what there is
    err = capsys.readouterr().err.strip()
    assert "nothing to export" in err and "other phases match: eval 2, rl 4" in err


def test_compare_two_runs(recorded_run, tmp_path, capsys):
    import shutil

    mine, other = tmp_path / "mine", tmp_path / "other"
    shutil.copytree(recorded_run, mine)
    shutil.copytree(recorded_run, other)
    store = TrajectoryStore(other / "trajectories")
    store.delete_where(lambda r: r["phase"] == "eval" and r["seed"] == 1_000_001)
    for path in (mine, other):  # mark the eval shard as the final evaluation
        s = TrajectoryStore(path / "trajectories")
        records = list(s.read(phase="eval"))
        s.delete_where(lambda r: r["phase"] == "eval")
        s.append([{**r, "tag": "final"} for r in records])
    rc, rows = _json_out(capsys, ["compare", str(mine), str(other), "--json"])
    by = {r["metric"]: r for r in rows}
    assert (
        rc == 0
        and by["episodes"]["a"] == 2
        and by["episodes"]["b"] == 1
        and by["episodes"]["diff"] == -1
    )
    # A: the eval shard's second episode answers wrong (0.5); B dropped it (1.0)
    assert (by["success"]["a"], by["success"]["b"], by["success"]["diff"]) == (0.5, 1.0, 0.5)
    assert "cost/generated_tokens" in by and by["stop_reasons/terminated"]["diff"] == -1
    assert main(["compare", str(mine), str(tmp_path / "missing")]) == 2
    assert (
        main(["compare", str(recorded_run), str(mine)]) == 2
    )  # no final evaluation in the original


def test_view_serve_on_localhost(recorded_run, tmp_path):
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "served.html"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentic_rl.cli",
            "view",
            str(recorded_run),
            "--out",
            str(out),
            "--no-tokens",
            "--serve",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/served.html", timeout=5
                ) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    proc.stdout.read().decode()
                )
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert body == out.read_text() and '<script id="data"' in body


def test_view_serves_the_viewer_and_nothing_else_of_the_run_directory(recorded_run, tmp_path):
    """Issue 39, item 9: ``view --serve`` served a listing of the whole run directory (config,
    audit log, checkpoints). A real HTTP server on a free port, real requests."""
    import shutil
    import threading
    import urllib.error
    import urllib.request

    from agentic_rl.trajectories.viewer import viewer_server

    run = tmp_path / "run"
    shutil.copytree(recorded_run, run)
    (run / "audit.jsonl").write_text('{"secret": 1}\n')
    assert main(["view", str(run), "--no-tokens"]) == 0
    server = viewer_server(run / "view.html", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path in ("/", "/view.html", "/view.html?x=1"):
            with urllib.request.urlopen(base + path, timeout=10) as resp:
                assert resp.status == 200 and resp.read() == (run / "view.html").read_bytes()
        for path in (
            "/config.toml",
            "/audit.jsonl",
            "/trajectories/",
            "/trajectories/_manifest.json",
            "/view.html/../config.toml",
            "/%2e%2e/config.toml",
            "/favicon.ico",
        ):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(base + path, timeout=10)
            assert err.value.code == 404, path
            assert b"secret" not in err.value.read()
    finally:
        server.shutdown()
        server.server_close()


def test_a_closed_stdout_ends_replay_quietly(recorded_run):
    """Issue 39, item 6: ``replay … --json | head`` printed a BrokenPipeError traceback."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, as after `head` exits
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentic_rl.cli", "replay", str(recorded_run), "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr, proc.stderr


def test_replay_whole_run_and_filters(recorded_run, capsys):
    """No --trajectory: every trajectory of the run (or those matching the filters) is replayed."""
    rc, out = _json_out(capsys, ["replay", str(recorded_run), "--json", "--rescore"])
    assert (
        rc == 0
        and out["trajectories"] == 6
        and out["diverged"] == 0
        and out["divergent_trajectory_ids"] == []
    )
    assert out["turns"] == out["turns_replayed"] == 12 and out["rewards_changed"] == 0
    assert {r["phase"] for r in out["results"]} == {"rl", "eval"}
    rc, out = _json_out(capsys, ["replay", str(recorded_run), "--json", "--phase", "eval"])
    assert rc == 0 and out["trajectories"] == 2 and {r["phase"] for r in out["results"]} == {"eval"}
    rc, out = _json_out(
        capsys,
        [
            "replay",
            str(recorded_run),
            "--json",
            "--step",
            "1",
            "--env",
            "calculator-v0",
            "--limit",
            "3",
        ],
    )
    assert rc == 0 and out["trajectories"] == 3
    assert main(["replay", str(recorded_run)]) == 0
    assert "replayed 6 trajectories (12 of 12 turns): 0 diverged" in capsys.readouterr().out


def test_replay_whole_run_summarises_divergences_and_exits_1(tmp_path, chat, recorded_run, capsys):
    if "test-flaky-v0" not in registry._REGISTRY:
        registry.register("test-flaky-v0", FlakyEnv, "test only: unseeded noise at turn 1")
    flaky = _record_flaky(chat)
    flaky = flaky.__class__(**{**flaky.__dict__, "env_id": "test-flaky-v0"})
    store = TrajectoryStore(tmp_path / "trajectories")
    store.append(list(open_run_store(recorded_run).read(phase="eval")))  # 2 that replay exactly
    store.append([trajectory_to_record(flaky, env_kwargs={}, phase="rl", step=3)])
    rc, out = _json_out(capsys, ["replay", str(tmp_path), "--json"])
    assert rc == 1 and out["trajectories"] == 3 and out["diverged"] == 1
    assert out["divergent_trajectory_ids"] == [flaky.trajectory_id] and out[
        "divergences_by_kind"
    ] == {"observation": 1}
    assert main(["replay", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert (
        f"DIVERGED {flaky.trajectory_id} (test-flaky-v0, seed 7, rl step 3): turn 1: observation"
        in text
    )
    assert "replayed 3 trajectories" in text and "1 diverged (observation 1)" in text
    assert (
        main(["replay", str(tmp_path), "--phase", "eval"]) == 0
    )  # the filter leaves out the flaky one


def test_replay_whole_run_errors(recorded_run, capsys):
    assert main(["replay", str(recorded_run), "--phase", "warmup"]) == 2
    assert "no trajectory" in capsys.readouterr().err
    assert main(["replay", str(recorded_run), "--logprobs", "x"]) == 2
    assert "needs --trajectory" in capsys.readouterr().err


def test_compare_with_a_corrupt_summary_is_one_error_line(recorded_run, tmp_path, capsys):
    import shutil

    run = shutil.copytree(recorded_run, tmp_path / "run")
    store = TrajectoryStore(run / "trajectories")  # mark the eval shard as the final evaluation
    records = list(store.read(phase="eval"))
    store.delete_where(lambda r: r["phase"] == "eval")
    store.append([{**r, "tag": "final"} for r in records])
    (run / "summary.json").write_text('{"timings_seconds": ')  # torn
    assert main(["compare", str(run), str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "summary.json" in err[0]
