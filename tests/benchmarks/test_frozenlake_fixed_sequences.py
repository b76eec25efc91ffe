"""benchmarks/frozenlake_fixed_sequences.py: the map-blind baseline, on hand-made maps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "frozenlake_fixed_sequences.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("frozenlake_fixed_sequences", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_moves_follow_gymnasium(bench):
    desc = ["SF", "HG"]
    assert bench.step(desc, 0, 0) == 0  # left into the border: stays
    assert bench.step(desc, 0, 1) == bench.FELL  # down onto H
    assert bench.step(desc, 0, 2) == 1  # right onto F
    assert bench.step(desc, 1, 1) == bench.WON
    assert bench.step(desc, bench.FELL, 2) == bench.FELL  # absorbing


def test_best_sequence_on_maps_that_want_different_paths(bench):
    # map a: only right-then-down wins; map b: only down-then-right; map c: both do
    a, b, c = ["SF", "HG"], ["SH", "FG"], ["SF", "FG"]
    wins, seq = bench.best_fixed_sequence([a, b, c], horizon=2)
    assert wins == 2 and len(seq) == 2  # no fixed sequence of 2 moves wins on a and b together
    # with 4 moves still no sequence wins all three: on a, down falls; on b, right falls
    assert bench.best_fixed_sequence([a, b, c], horizon=4)[0] == 2
    assert bench.best_fixed_sequence([c], horizon=1) == (0, ())  # G is two moves away
    with pytest.raises(ValueError):
        bench.best_fixed_sequence([])


def test_seeded_maps_are_the_envs(bench):
    """The script's maps are the env's: same generator, same seed -> same desc as frozenlake-v0."""
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    from agentic_rl.envs import make

    env = make("frozenlake-v0")
    env.reset(seed=1_000_003)
    desc = ["".join(c.decode() for c in row) for row in env._gym.unwrapped.desc]
    assert desc == generate_random_map(size=4, p=0.8, seed=1_000_003)
    env.close()
