"""``agentic-rl replay RUN_DIR --trajectory ID --to-turn K``: roll a recorded episode back to turn K
(:func:`agentic_rl.rollout.rollback.rollback` through the CLI), on a real calculator-v0 recording
and on an env that does not reproduce its recording."""

from __future__ import annotations

import json

from agentic_rl.cli import main
from agentic_rl.envs import registry
from agentic_rl.rollout.rollback import truncate_trajectory
from agentic_rl.trajectories import (
    TrajectoryStore,
    open_run_store,
    trajectory_from_record,
    trajectory_to_record,
)
from tests.trajectories.test_replay import FlakyEnv, _record_flaky


def _run(capsys, argv):
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_rollback_of_a_recorded_calculator_episode(recorded_run, tmp_path, capsys):
    record = next(open_run_store(recorded_run).read(phase="rl"))
    tid, traj = record["trajectory_id"], trajectory_from_record(record)
    assert len(traj.turns) == 2  # a calculator call, then the answer
    out_file = tmp_path / "cut.json"
    argv = ["replay", str(recorded_run), "--trajectory", tid, "--to-turn", "1"]
    rc, out, err = _run(capsys, [*argv, "--json", "--out", str(out_file)])
    assert rc == 0, err
    report = json.loads(out)
    assert report["mismatch"] is None and (report["turns"], report["to_turn"]) == (2, 1)
    # the cut trajectory is the recorded one cut after turn 0 (the calculator's answer is its
    # last message), written to --out as a record that loads back
    expected = trajectory_to_record(truncate_trajectory(traj, 1))
    assert report["trajectory"] == expected
    assert json.loads(out_file.read_text()) == expected
    cut = trajectory_from_record(expected)
    assert len(cut.turns) == 1 and cut.reward is None
    assert cut.messages[-1] == traj.turns[0].observation.messages[-1]
    assert cut.info["rollback"] == {"from_turns": 2, "to_turns": 1}
    # table output; K = 0 (back to the reset) and K = n (the whole episode) work too
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "rolled back to turn 1 of 2" in out and "every observation" in out
    for k, turns in (("0", 0), ("2", 2)):
        rc, out, _ = _run(capsys, [*argv[:-1], k, "--json"])
        assert rc == 0 and len(json.loads(out)["trajectory"]["turns"]) == turns


def test_rollback_reports_a_replay_mismatch(tmp_path, chat, capsys):
    if "test-flaky-v0" not in registry._REGISTRY:
        registry.register("test-flaky-v0", FlakyEnv, "test only: unseeded noise at turn 1")
    traj = _record_flaky(chat)
    traj = traj.__class__(**{**traj.__dict__, "env_id": "test-flaky-v0"})
    TrajectoryStore(tmp_path / "trajectories").append([trajectory_to_record(traj, env_kwargs={})])
    argv = ["replay", str(tmp_path), "--trajectory", traj.trajectory_id, "--to-turn"]
    rc, out, _ = _run(capsys, [*argv, "1", "--json"])  # turn 0 ("ok") replays exactly
    assert rc == 0 and json.loads(out)["mismatch"] is None
    out_file = tmp_path / "cut.json"
    rc, out, _ = _run(capsys, [*argv, "2", "--out", str(out_file)])
    assert rc == 1 and out.startswith("REPLAY MISMATCH") and "turn 1" in out
    assert "observation differs" in out and not out_file.exists()
    rc, out, _ = _run(capsys, [*argv, "2", "--json"])
    report = json.loads(out)
    assert rc == 1 and "turn 1" in report["mismatch"] and "trajectory" not in report


def test_rollback_user_errors(recorded_run, capsys):
    tid = next(open_run_store(recorded_run).read())["trajectory_id"]
    base = ["replay", str(recorded_run)]
    for argv, message in (
        ([*base, "--trajectory", tid, "--to-turn", "3"], "--to-turn must be in 0..2"),
        ([*base, "--trajectory", tid, "--to-turn", "-1"], "--to-turn must be in 0..2"),
        ([*base, "--to-turn", "1"], "needs --trajectory"),
        ([*base, "--trajectory", tid, "--to-turn", "1", "--rescore"], "does not go with"),
        ([*base, "--trajectory", tid, "--out", "x.json"], "--out FILE writes the cut"),
    ):
        rc, _, err = _run(capsys, argv)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and message in lines[0], (argv, err)
