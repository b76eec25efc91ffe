"""Tests for TrajectoryStore: appends, filters, crash safety (real SIGKILL) and tail repair."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
from agentic_rl.types import StopReason


def _lines(path):
    return path.read_bytes().split(b"\n")


def test_append_writes_one_line_per_record(tmp_path, make_trajectory):
    path = tmp_path / "sub" / "traj.jsonl"
    store = TrajectoryStore(path)  # creates parent dirs and the file
    assert path.exists() and len(store) == 0
    n = store.append(trajectory_to_record(make_trajectory(i), step=i, phase="rl") for i in range(3))
    assert n == 3 and len(store) == 3
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 3
    for line in raw.splitlines():  # strict JSON, ASCII only, one object per line
        json.loads(line)
        line.decode("ascii")
    assert store.append([]) == 0
    assert [r["step"] for r in store.read()] == [0, 1, 2]


def test_filters_and_read_trajectories(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append_trajectories([make_trajectory(0, reward=0.0)], step=1, phase="rl")
    store.append_trajectories([make_trajectory(1, reward=1.0)], step=1, phase="eval")
    store.append_trajectories(
        [make_trajectory(2, reward=None, stop_reason=StopReason.MAX_TURNS)], step=2, phase="rl")
    ids = lambda **kw: [r["trajectory_id"] for r in store.read(**kw)]  # noqa: E731
    assert ids() == ["t0", "t1", "t2"]
    assert ids(step=1) == ["t0", "t1"]
    assert ids(phase="rl") == ["t0", "t2"]
    assert ids(min_reward=0.5) == ["t1"]
    assert ids(max_reward=0.5) == ["t0"]  # a record without reward never matches a bound
    assert ids(min_reward=0.0, max_reward=1.0) == ["t0", "t1"]
    assert ids(stop_reason=StopReason.MAX_TURNS) == ["t2"]
    assert ids(stop_reason="terminated", phase="eval") == ["t1"]
    with pytest.raises(ValueError):
        list(store.read(stop_reason="nonsense"))
    trajs = list(store.read_trajectories(phase="rl"))
    assert trajs == [make_trajectory(0, reward=0.0),
                     make_trajectory(2, reward=None, stop_reason=StopReason.MAX_TURNS)]


def test_bad_records_raise_before_anything_is_written(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    with pytest.raises(TypeError):
        store.append([{"a": 1}, ["not", "a", "dict"]])
    with pytest.raises(TypeError):
        store.append([{"a": 1}, {"b": object()}])
    assert len(store) == 0 and (tmp_path / "t.jsonl").read_bytes() == b""


def test_partial_tail_is_truncated_on_open(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1}\n{"step": 2, "tur')
    reader = TrajectoryStore(path, read_only=True)
    assert [r["step"] for r in reader.read()] == [0, 1]  # readers skip the partial tail
    assert path.read_bytes().endswith(b'"tur')  # read_only never touches the file
    with pytest.raises(PermissionError):
        reader.append([{"step": 9}])
    with caplog.at_level(logging.WARNING):
        store = TrajectoryStore(path)
    assert "truncating" in caplog.text
    assert path.read_bytes() == b'{"step": 0}\n{"step": 1}\n'
    store.append([{"step": 3}])
    assert [json.loads(x)["step"] for x in path.read_bytes().splitlines()] == [0, 1, 3]


def test_partial_tail_without_any_newline_is_truncated(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"step": 0, "x": [1, 2')
    store = TrajectoryStore(path)
    assert path.read_bytes() == b"" and len(store) == 0


def test_complete_tail_missing_newline_is_kept(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1}')
    assert len(TrajectoryStore(path, read_only=True)) == 2
    store = TrajectoryStore(path)
    store.append([{"step": 2}])
    assert [r["step"] for r in store.read()] == [0, 1, 2]


def test_corrupt_middle_line_raises(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": \n{"step": 2}\n')
    with pytest.raises(ValueError, match=":2:"):
        list(TrajectoryStore(path).read())


def test_read_only_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        TrajectoryStore(tmp_path / "nope.jsonl", read_only=True)


_WRITER = textwrap.dedent(
    """
    import sys
    from agentic_rl.trajectories import TrajectoryStore
    store = TrajectoryStore(sys.argv[1])
    payload = "x" * 20000
    i = 0
    while True:  # runs until SIGKILL
        store.append({"step": i, "k": k, "payload": payload} for k in range(8))
        i += 1
    """
)


def test_sigkill_mid_append_leaves_every_line_readable(tmp_path):
    path = tmp_path / "t.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= 40:
                break
            assert proc.poll() is None, "writer exited early"
            time.sleep(0.02)
        else:
            pytest.fail("writer produced too few lines")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    *complete, tail = _lines(path)
    for line in complete:  # every line the writer completed parses
        assert json.loads(line)["payload"] == "x" * 20000
    n = len(complete)
    assert len(TrajectoryStore(path, read_only=True)) == n  # partial tail (if any) skipped
    store = TrajectoryStore(path)  # repairs the tail, if any
    assert path.read_bytes().endswith(b"\n")
    store.append([{"step": -1, "after": "crash"}])
    records = [json.loads(x) for x in path.read_bytes().splitlines()]
    assert len(records) == n + 1 and records[-1] == {"step": -1, "after": "crash"}
    assert len(store) == n + 1
