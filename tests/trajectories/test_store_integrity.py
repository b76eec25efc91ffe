"""The store's manifest: every shard listed with rows, size and SHA-256; a missing, truncated,
emptied or bit-flipped shard is an error naming the file, never silently fewer trajectories."""

from __future__ import annotations

import json

import pytest

from agentic_rl.errors import RunDirError
from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record
from agentic_rl.trajectories.store import MANIFEST_NAME, CorruptStoreError


def _store(tmp_path, make_trajectory, shards=3, per_shard=2):
    store = TrajectoryStore(tmp_path / "t")
    for s in range(shards):
        store.append(
            [trajectory_to_record(make_trajectory(i), step=s, phase="rl") for i in range(per_shard)]
        )
    return store


def test_manifest_lists_every_shard(tmp_path, make_trajectory):
    store = _store(tmp_path, make_trajectory)
    manifest = json.loads((store.path / MANIFEST_NAME).read_text())
    assert sorted(manifest["shards"]) == [p.name for p in store.shards()]
    for shard in store.shards():
        entry = manifest["shards"][shard.name]
        assert (
            entry["rows"] == 2
            and entry["bytes"] == shard.stat().st_size
            and len(entry["sha256"]) == 64
        )
    assert len(store) == 6 and issubclass(CorruptStoreError, RunDirError)


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.unlink(), "is missing"),
        (lambda p: p.write_bytes(p.read_bytes()[:200]), "bytes, the manifest says"),
        (lambda p: p.write_bytes(b""), "0 bytes"),
        (_flip, "SHA-256 differs"),
    ],
)
def test_damaged_shard_is_an_error_naming_it(tmp_path, make_trajectory, damage, message):
    store = _store(tmp_path, make_trajectory)
    shard = store.shards()[1]
    damage(shard)
    reader = TrajectoryStore(store.path, read_only=True)
    for read in (
        lambda: list(reader.read()),
        lambda: len(reader),
        lambda: reader.table(phase="rl"),
    ):
        with pytest.raises(CorruptStoreError, match=message) as info:
            read()
        assert str(shard) in str(info.value)
    with pytest.raises(CorruptStoreError):
        store.delete_where(lambda r: False)


def test_unreadable_shard_without_manifest_is_named(tmp_path, make_trajectory):
    """A store written before manifests existed: a broken shard still gives a named error."""
    store = _store(tmp_path, make_trajectory)
    (store.path / MANIFEST_NAME).unlink()
    shard = store.shards()[0]
    shard.write_bytes(b"PAR1 not really")
    with pytest.raises(CorruptStoreError, match="not a readable Parquet file") as info:
        list(TrajectoryStore(store.path, read_only=True).read())
    assert str(shard) in str(info.value)


def test_a_writer_adopts_unlisted_shards(tmp_path, make_trajectory):
    store = _store(tmp_path, make_trajectory)
    (
        store.path / MANIFEST_NAME
    ).unlink()  # an old store, or a writer killed before listing its shard
    assert len(TrajectoryStore(store.path, read_only=True)) == 6  # read as they are
    TrajectoryStore(store.path)  # opening for writing lists them
    manifest = json.loads((store.path / MANIFEST_NAME).read_text())
    assert sorted(manifest["shards"]) == [p.name for p in store.shards()]
    store.shards()[2].unlink()
    with pytest.raises(CorruptStoreError, match="is missing"):
        list(TrajectoryStore(store.path, read_only=True).read())


def test_delete_where_keeps_the_manifest_true(tmp_path, make_trajectory):
    store = _store(tmp_path, make_trajectory)
    assert store.delete_where(lambda r: r["step"] == 2 or r["trajectory_id"] == "t0") == 4
    assert len(store) == 2 and [r["step"] for r in store.read()] == [0, 1]
    manifest = json.loads((store.path / MANIFEST_NAME).read_text())["shards"]
    assert sorted(manifest) == [p.name for p in store.shards()] and all(
        e["rows"] == 1 for e in manifest.values()
    )
    assert all("next" not in e for e in manifest.values())


def test_a_rewrite_killed_halfway_reads_either_version(tmp_path, make_trajectory):
    """delete_where records the new version as pending before it replaces the file: a crash on
    either side of the replace leaves a shard that matches one of the two entries."""
    store = _store(tmp_path, make_trajectory, shards=1)
    shard = store.shards()[0]
    path = store.path / MANIFEST_NAME
    before = json.loads(path.read_text())
    old_bytes = shard.read_bytes()
    store.delete_where(lambda r: r["trajectory_id"] == "t0")
    after = json.loads(path.read_text())
    pending = {**before["shards"][shard.name], "next": after["shards"][shard.name]}
    path.write_text(
        json.dumps({**after, "shards": {shard.name: pending}})
    )  # killed after the replace
    assert len(TrajectoryStore(store.path, read_only=True)) == 1
    shard.write_bytes(old_bytes)  # killed before the replace
    assert len(TrajectoryStore(store.path, read_only=True)) == 2
    TrajectoryStore(store.path)  # the next writer settles the entry on the file it finds
    assert "next" not in json.loads(path.read_text())["shards"][shard.name]
    assert len(TrajectoryStore(store.path, read_only=True)) == 2


def test_other_readers_ignore_the_manifest(tmp_path, make_trajectory):
    import pandas as pd

    store = _store(tmp_path, make_trajectory)
    assert len(pd.read_parquet(store.path)) == 6  # pyarrow skips '_'-prefixed files in a folder
