"""Each trajectory records how it was sampled (issue 39, item 12).

Before, a stored record did not say with which seed and parameters its rollout was sampled, so it
could not tell how the G members of its group differed, nor be re-sampled. Now
``Trajectory.sampling`` (:class:`~agentic_rl.types.RolloutSampling`) holds the round's seed, the
episode's stream, the temperature, greedy and ``max_new_tokens``, in the JSON record and the
Parquet schema (version 4), and records of older versions still read (with ``sampling`` None).
The rollouts here are real: the tiny random Llama plays calculator-v0 through the engine.
"""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentic_rl.envs import make
from agentic_rl.policy.hf import HFPolicy
from agentic_rl.policy.model_loading import load_model
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.trajectories import TrajectoryStore, trajectory_from_record, trajectory_to_record
from agentic_rl.trajectories.arrow_schema import records_to_table
from agentic_rl.types import RolloutSampling, request_seed

CONFIG = RolloutConfig(max_turns=1, max_new_tokens=8, temperature=0.9)


@pytest.fixture(scope="module")
def policy(tiny_model_dir, chat):
    return HFPolicy(load_model(tiny_model_dir), chat.eos_token_id, 0)


def _group(policy, chat, size=3, seed=11, **kwargs):
    envs = [make("calculator-v0") for _ in range(size)]
    gids = ["g"] * size
    return run_episodes(policy, chat, envs, [seed] * size, gids, CONFIG, sample_seed=123, **kwargs)


def test_each_member_of_a_group_records_its_seed_and_parameters(policy, chat):
    group = _group(policy, chat)
    assert [t.sampling for t in group] == [
        RolloutSampling(seed=123, stream=i, temperature=0.9, greedy=False, max_new_tokens=8)
        for i in range(3)
    ]
    # the members differ by stream only: their turn-0 requests had these seeds
    assert len({t.sampling.turn_seed(0) for t in group}) == 3
    assert group[1].sampling.turn_seed(0) == request_seed(123, 1, 0)
    greedy = run_episodes(policy, chat, [make("calculator-v0")], [11], ["e"], CONFIG, greedy=True)
    assert greedy[0].sampling == RolloutSampling(None, 0, 0.9, True, 8)


def test_a_member_re_samples_from_its_record_alone(policy, chat):
    group = _group(policy, chat)
    record = json.loads(json.dumps(trajectory_to_record(group[2])))  # what the store keeps
    how = trajectory_from_record(record).sampling
    assert how is not None
    config = dataclasses.replace(
        CONFIG, temperature=how.temperature, max_new_tokens=how.max_new_tokens
    )
    (again,) = run_episodes(
        policy,
        chat,
        [make(record["env_id"])],
        [record["seed"]],
        ["again"],
        config,
        sample_seed=how.seed,
        first_index=how.stream,
    )
    assert again.token_ids == group[2].token_ids and again.sampling == how


def test_sampling_round_trips_through_json_and_parquet(tmp_path, policy, chat):
    traj = _group(policy, chat, size=1)[0]
    assert trajectory_from_record(json.loads(json.dumps(trajectory_to_record(traj)))) == traj
    store = TrajectoryStore(tmp_path / "t")
    store.append([trajectory_to_record(traj)])
    assert next(iter(store.read_trajectories())) == traj
    column = store.table().column("sampling").to_pylist()
    assert column == [
        {"seed": 123, "stream": 0, "temperature": 0.9, "greedy": False, "max_new_tokens": 8}
    ]


def test_records_of_older_schema_versions_read_with_no_sampling(tmp_path, policy, chat):
    traj = _group(policy, chat, size=1)[0]
    unsampled = dataclasses.replace(traj, sampling=None)
    # a JSON record of version 3: no "sampling" key
    record = trajectory_to_record(traj)
    del record["sampling"]
    record["schema_version"] = 3
    assert trajectory_from_record(record) == unsampled
    # a Parquet shard of version 3: no "sampling" column, read through today's store
    store = TrajectoryStore(tmp_path / "t")
    old = records_to_table([trajectory_to_record(traj)]).drop_columns(["sampling"])
    versions = pa.array([3] * old.num_rows, pa.int32())
    old = old.set_column(old.schema.get_field_index("schema_version"), "schema_version", versions)
    (tmp_path / "t").mkdir(exist_ok=True)
    pq.write_table(old, tmp_path / "t" / "part-000000.parquet")
    (back,) = store.read_trajectories()
    assert back == unsampled


def test_a_seed_the_record_cannot_hold_fails_before_any_work(policy, chat):
    with pytest.raises(ValueError, match="signed 64-bit"):
        run_episodes(policy, chat, [make("calculator-v0")], [0], ["g"], CONFIG, sample_seed=2**64)
