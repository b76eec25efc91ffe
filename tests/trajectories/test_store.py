"""Tests for the Parquet-shard TrajectoryStore: exact round trip, filters, other readers,
atomic shards, deletion, and crash safety under a real SIGKILL."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq
import pytest

from agentic_rl.errors import RunDirError
from agentic_rl.trajectories import TrajectoryStore, open_run_store, trajectory_to_record
from agentic_rl.types import StopReason


def _records(make_trajectory, n, **extra):
    return [trajectory_to_record(make_trajectory(i), step=i, phase="rl", **extra) for i in range(n)]


def test_round_trip_is_exact_with_optional_keys(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "sub" / "traj")  # creates the folder
    assert len(store) == 0 and list(store.read()) == []
    rec = trajectory_to_record(
        make_trajectory(0),
        run_id="run-1",
        phase="rl",
        step=3,
        rl_step=3,
        policy_version=2,
        env_kwargs={"levels": ["direct"]},
        advantage=0.5,
        advantages={"turn": [0.5, 0.5], "token": [0.0, 0.0, 0.5, 0.5, 0.5, 0.5]},
        timings={"rollout_s": 1.25},
        custom={"anything": [1, None]},
    )
    plain = trajectory_to_record(make_trajectory(1, reward=None, stop_reason=StopReason.MAX_TURNS))
    assert store.append([rec, plain]) == 2
    back = list(store.read())
    assert back == [rec, plain]
    assert list(store.read_trajectories()) == [
        dataclasses.replace(make_trajectory(0), policy_version=2),  # the extra key is the field
        make_trajectory(1, reward=None, stop_reason=StopReason.MAX_TURNS),
    ]


def test_one_shard_per_append_and_len_from_footers(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t")
    store.append(_records(make_trajectory, 3))
    store.append(_records(make_trajectory, 2))
    assert store.append([]) == 0  # an empty batch writes no shard
    assert [p.name for p in store.shards()] == ["part-000001.parquet", "part-000002.parquet"]
    assert len(store) == 5


def test_filters(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t")
    recs = [
        trajectory_to_record(
            make_trajectory(
                i,
                reward=float(i),
                stop_reason=StopReason.MAX_TURNS if i % 2 else StopReason.TERMINATED,
            ),
            step=i // 2,
            phase="eval" if i == 4 else "rl",
            run_id="a" if i < 3 else "b",
        )
        for i in range(5)
    ]
    recs.append(
        trajectory_to_record(make_trajectory(5, reward=None), step=9, phase="rl", run_id="b")
    )
    store.append(recs[:3])
    store.append(recs[3:])
    ids = lambda **f: [r["trajectory_id"] for r in store.read(**f)]  # noqa: E731
    assert ids(step=1) == ["t2", "t3"]
    assert ids(phase="eval") == ["t4"]
    assert ids(run_id="a") == ["t0", "t1", "t2"]
    assert ids(min_reward=1.0, max_reward=3.0) == [
        "t1",
        "t2",
        "t3",
    ]  # inclusive; None reward never matches
    assert ids(min_reward=-100) == ["t0", "t1", "t2", "t3", "t4"]
    assert ids(stop_reason="max_turns") == ids(stop_reason=StopReason.MAX_TURNS) == ["t1", "t3"]
    assert ids(env_id="calculator-v0", run_id="b", max_reward=3.5) == ["t3"]
    assert ids(trajectory_id="t5") == ["t5"]
    with pytest.raises(ValueError, match="unknown trajectory filter"):
        list(store.read(rewards=1))
    with pytest.raises(ValueError):
        list(store.read(stop_reason="exploded"))


def test_other_tools_read_the_folder(tmp_path, make_trajectory):
    duckdb = pytest.importorskip("duckdb")
    pd = pytest.importorskip("pandas")
    store = TrajectoryStore(tmp_path / "t")
    store.append(_records(make_trajectory, 2))
    store.append(_records(make_trajectory, 1))
    glob = str(tmp_path / "t" / "*.parquet")
    n, ids = duckdb.sql(
        f"SELECT count(*), list(trajectory_id ORDER BY trajectory_id) FROM '{glob}'"
    ).fetchall()[0]
    assert n == 3 and ids == ["t0", "t0", "t1"]
    # nested columns unnest in SQL: the first turn's first tool call arguments (JSON text)
    args = duckdb.sql(
        f"SELECT turns[1].tool_calls[1].arguments_json FROM '{glob}' LIMIT 1"
    ).fetchall()[0][0]
    assert '"expr": "2+3"' in args
    frame = pd.read_parquet(tmp_path / "t")
    assert len(frame) == 3 and list(frame["token_ids"].iloc[0]) == [1, 2, 3, 4, 5, 6]


def test_bad_records_write_nothing(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t")
    good = trajectory_to_record(make_trajectory(0))
    with pytest.raises(TypeError):
        store.append([good, ["not", "a", "dict"]])
    with pytest.raises(ValueError, match="missing field 'turns'"):
        store.append([good, {k: v for k, v in good.items() if k != "turns"}])
    with pytest.raises(TypeError):
        store.append([good, {**good, "custom": object()}])
    with pytest.raises(ValueError, match="schema_version"):
        store.append([{**good, "schema_version": 1}])
    assert len(store) == 0 and list((tmp_path / "t").iterdir()) == []


def test_read_only_and_wrong_paths(tmp_path, make_trajectory):
    with pytest.raises(FileNotFoundError):
        TrajectoryStore(tmp_path / "nope", read_only=True)
    (tmp_path / "old.jsonl").write_text("{}\n")
    with pytest.raises(NotADirectoryError):
        TrajectoryStore(tmp_path / "old.jsonl")
    TrajectoryStore(tmp_path / "t")
    reader = TrajectoryStore(tmp_path / "t", read_only=True)
    with pytest.raises(PermissionError):
        reader.append(_records(make_trajectory, 1))
    with pytest.raises(RunDirError, match="no trajectory store"):
        open_run_store(tmp_path / "not-a-run")


def test_leftover_temp_shard_is_ignored_and_cleaned(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t")
    store.append(_records(make_trajectory, 2))
    leftover = tmp_path / "t" / ".part-000002.parquet.tmp"
    leftover.write_bytes(b"PAR1 half a shard")  # a crash between write and rename
    assert len(TrajectoryStore(tmp_path / "t", read_only=True)) == 2  # readers ignore it
    assert leftover.exists()  # read_only never touches the folder
    live = tmp_path / "t" / f".part-new.{os.getpid()}.tmp"  # a temp shard of a writer still running
    live.write_bytes(b"in progress")
    store = TrajectoryStore(tmp_path / "t")
    assert not leftover.exists() and live.exists()
    store.append(_records(make_trajectory, 1))
    assert len(store) == 3


def test_delete_where_rewrites_or_removes_shards(tmp_path, make_trajectory):
    store = TrajectoryStore(tmp_path / "t")
    store.append(_records(make_trajectory, 3))  # steps 0, 1, 2
    store.append(_records(make_trajectory, 2))  # steps 0, 1
    assert store.delete_where(lambda r: r["step"] >= 1) == 3
    assert [r["step"] for r in store.read()] == [0, 0]
    assert store.delete_where(lambda r: r["step"] == 0 and r["trajectory_id"] == "t0") == 2
    assert store.shards() == [] and len(store) == 0


_WRITER = textwrap.dedent(
    """
    import sys
    from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
    sys.path.insert(0, sys.argv[2])
    from conftest import build_trajectory
    store = TrajectoryStore(sys.argv[1])
    payload = "x" * 20000
    i = 0
    while True:  # runs until SIGKILL
        store.append([trajectory_to_record(build_trajectory(k), step=i, payload=payload) for k in range(8)])
        i += 1
    """
)


def test_sigkill_mid_append_leaves_every_completed_shard_readable(tmp_path, make_trajectory):
    path = tmp_path / "t"
    here = str(__import__("pathlib").Path(__file__).parent)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), here])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.is_dir() and len(list(path.glob("part-*.parquet"))) >= 10:
                break
            assert proc.poll() is None, "writer exited early"
            time.sleep(0.02)
        else:
            pytest.fail("writer produced too few shards")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    store = TrajectoryStore(path, read_only=True)
    shards = store.shards()
    for shard in shards:  # every completed shard is a whole, valid Parquet file of 8 records
        assert pq.ParquetFile(shard).metadata.num_rows == 8
    records = list(store.read())
    assert len(records) == 8 * len(shards)
    steps = sorted({r["step"] for r in records})
    assert steps == list(range(len(shards)))  # no gap, no torn batch
    for r in records:
        assert r["payload"] == "x" * 20000
        assert {k: v for k, v in r.items() if k not in ("step", "payload")} == trajectory_to_record(
            make_trajectory(int(r["trajectory_id"][1:]))
        )
    store = TrajectoryStore(path)  # reopening for writing cleans a temp shard, if any
    assert not list(path.glob(".*.tmp"))
    store.append([trajectory_to_record(make_trajectory(0), step=-1)])
    assert len(store) == len(records) + 1


_APPENDER = textwrap.dedent(
    """
    import sys
    from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
    sys.path.insert(0, sys.argv[2])
    from conftest import build_trajectory
    store = TrajectoryStore(sys.argv[1])
    for i in range(25):
        store.append([trajectory_to_record(build_trajectory(k), step=i, writer=sys.argv[3]) for k in range(3)])
    """
)


def test_concurrent_writers_never_clobber_each_other(tmp_path):
    here = str(__import__("pathlib").Path(__file__).parent)
    procs = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, str(tmp_path / "t"), here, name])
        for name in "ab"
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = TrajectoryStore(tmp_path / "t", read_only=True)
    assert len(store.shards()) == 50 and len(store) == 150
    by_writer = {w: sorted(r["step"] for r in store.read() if r["writer"] == w) for w in "ab"}
    assert by_writer == {w: sorted(list(range(25)) * 3) for w in "ab"}
    assert not list((tmp_path / "t").glob(".*"))


def test_segment_starts_have_a_column_and_old_shards_read_as_one_segment(tmp_path, make_trajectory):
    import dataclasses

    import pyarrow as pa

    from agentic_rl.trajectories.arrow_schema import records_to_table

    store = TrajectoryStore(tmp_path / "t")
    t = dataclasses.replace(make_trajectory(0), segment_starts=(0, 4))
    store.append([trajectory_to_record(t)])
    assert store.table().column("segment_starts").to_pylist() == [[0, 4]]
    # a shard written before the column existed: same schema minus segment_starts
    old = records_to_table([trajectory_to_record(make_trajectory(1))]).drop_columns(
        ["segment_starts"]
    )
    assert isinstance(old, pa.Table)
    pq.write_table(old, tmp_path / "t" / "part-999999.parquet")
    back = {x.trajectory_id: x for x in store.read_trajectories()}
    assert back[t.trajectory_id] == t and back[make_trajectory(1).trajectory_id].segment_starts == (
        0,
    )


def test_turn_truncated_has_a_field_and_old_shards_read_false(tmp_path, make_trajectory):
    import dataclasses

    import pyarrow as pa

    from agentic_rl.trajectories.arrow_schema import SCHEMA, records_to_table

    store = TrajectoryStore(tmp_path / "t")
    t = make_trajectory(0)
    t = dataclasses.replace(
        t, turns=(dataclasses.replace(t.turns[0], truncated=True), *t.turns[1:])
    )
    store.append([trajectory_to_record(t)])
    assert next(iter(store.read_trajectories())) == t
    # a shard written before the field existed: the turn struct without "truncated"
    old = records_to_table([trajectory_to_record(make_trajectory(1))])
    turn_type = SCHEMA.field("turns").type.value_type
    old_turn = pa.struct([f for f in turn_type if f.name != "truncated"])
    turns = pa.array(
        [
            [{k: v for k, v in x.items() if k != "truncated"} for x in row]
            for row in old.column("turns").to_pylist()
        ],
        pa.list_(old_turn),
    )
    old = old.set_column(old.schema.get_field_index("turns"), "turns", turns)
    pq.write_table(old, tmp_path / "t" / "part-999999.parquet")
    back = {x.trajectory_id: x for x in store.read_trajectories()}
    assert back[t.trajectory_id] == t
    assert not any(x.truncated for x in back[make_trajectory(1).trajectory_id].turns)
