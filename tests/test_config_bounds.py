"""Every config value has a range: counts, sizes and durations an upper bound, numbers a lower
one, text no control characters (``agentic_rl.config.bounds``). A bad value is one
``ConfigError`` naming the key, never an allocation that grows until the OOM killer comes."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from agentic_rl.config import TrainConfig, load_config
from agentic_rl.config.bounds import MAX_ROLLOUTS_PER_STEP, Bounds
from agentic_rl.config.loading import _FOREIGN_RULES, _is_seed
from agentic_rl.errors import ConfigError


def _fields(cls=TrainConfig, prefix=""):
    """(dotted key, type hint, dataclass field) of every leaf field of every section."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _fields(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hints[f.name], f


def _bounds(key, f) -> Bounds | None:
    return f.metadata.get("bounds") or _FOREIGN_RULES.get(key)


NUMBERS = [(k, h, f) for k, h, f in _fields() if h in (int, float)]
BOUNDED = sorted((k, _bounds(k, f)) for k, _h, f in NUMBERS if _bounds(k, f) is not None)
STRINGS = sorted(k for k, h, _f in _fields() if h is str)


def test_every_number_has_a_range_and_every_count_an_upper_bound():
    """Generic over all sections: a new numeric key without a rule fails here."""
    unruled = [k for k, _h, f in NUMBERS if _bounds(k, f) is None and not _is_seed(k)]
    assert unruled == []
    unbounded_counts = [
        k for k, h, f in NUMBERS if h is int and not _is_seed(k) and _bounds(k, f).high is None
    ]
    assert unbounded_counts == []
    assert len(BOUNDED) >= 50  # all sections, rollout and reward included


def test_the_defaults_lie_in_their_ranges():
    config = TrainConfig()
    for key, bounds in BOUNDED:
        value = config
        for part in key.split("."):
            value = getattr(value, part)
        bounds.check(key, value)


@pytest.mark.parametrize("key, bounds", [(k, b) for k, b in BOUNDED if b.high is not None])
def test_a_value_above_the_upper_bound_names_the_key(key, bounds):
    hint = dict((k, h) for k, h, _f in NUMBERS)[key]
    value = int(bounds.high) + 1 if hint is int else bounds.high * 2
    with pytest.raises(ConfigError, match=f"'{key}' must be <=? "):
        load_config(None, [f"{key}={value}"])


@pytest.mark.parametrize(
    "override, key",
    [  # issue 39, item 24, and their neighbours
        (f"algorithm.group_size={2**63 - 1}", "algorithm.group_size"),
        (f"eval.size={2**62}", "eval.size"),
        (f"model.num_threads={2**40}", "model.num_threads"),
        ("loss.clip_eps_low=-0.5", "loss.clip_eps_low"),
        ("loss.clip_eps_high=-0.1", "loss.clip_eps_high"),
        ("model.lora_alpha=-3", "model.lora_alpha"),
        ("model.lora_alpha=0", "model.lora_alpha"),
        ("model.lora_dropout=1.0", "model.lora_dropout"),
        ("rollout.temperature=1e-300", "rollout.temperature"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("rollout.temperature=1000", "rollout.temperature"),
        ("reward.cost=-1", "reward.cost"),
        ("scale.env_worker_timeout_s=1e300", "scale.env_worker_timeout_s"),
        ("algorithm.time_budget_s=1e300", "algorithm.time_budget_s"),
        ("rollout.max_new_tokens=100000000", "rollout.max_new_tokens"),
    ],
)
def test_bad_numbers(override, key):
    with pytest.raises(ConfigError, match=f"'{key}' must be"):
        load_config(None, [override])


def test_rollouts_per_round_are_bounded_as_a_product():
    """Each factor within its bound, the product not: tasks × G rollouts per sampling round."""
    with pytest.raises(ConfigError, match=r"'algorithm.tasks_per_step' × 'algorithm.group_size'"):
        load_config(None, ["algorithm.tasks_per_step=1024", "algorithm.group_size=1024"])
    with pytest.raises(ConfigError, match=r"'sampling.rollout_tasks' × 'algorithm.group_size'"):
        load_config(None, ["sampling.rollout_tasks=60000", "algorithm.group_size=2"])
    ok = load_config(None, ["algorithm.tasks_per_step=64", "algorithm.group_size=1024"])
    assert ok.algorithm.tasks_per_step * ok.algorithm.group_size == MAX_ROLLOUTS_PER_STEP


@pytest.mark.parametrize(
    "value",
    [
        r'"a\nb"',  # a newline: a forged line in every log that names the run
        r'"a\u0000b"',  # NUL: no file name can hold it (was a traceback)
        r'"a\u202eb"',  # right-to-left override: the name displays as something else
        r'"a\u2028b"',  # line separator
        '"' + "x" * 201 + '"',  # longer than a directory name may be, with its -N suffix
        '""',
        '"."',
        '"a/b"',
    ],
)
def test_name_is_one_plain_directory_name(value):
    with pytest.raises(ConfigError, match="'name' must"):
        load_config(None, [f"name={value}"])


@pytest.mark.parametrize("value", ['""', '"   "', r'"runs\u0000x"', r'"runs\nx"'])
def test_output_dir_is_a_path(value):
    with pytest.raises(ConfigError, match="'output_dir' must"):
        load_config(None, [f"output_dir={value}"])


@pytest.mark.parametrize("key", STRINGS)
def test_no_string_key_takes_a_control_character(key):
    """Generic: every string key of every section (paths, URLs, ids, choices)."""
    with pytest.raises(ConfigError, match=f"'?{key}'? must"):
        load_config(None, [rf'{key}="x\u0000y"'])


def test_a_file_is_checked_like_an_override(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "two\\nlines"\n[algorithm]\ngroup_size = 9223372036854775807\n')
    with pytest.raises(ConfigError, match=f"{path}: key 'name'"):
        load_config(path)


def test_mcp_timeouts_are_finite_and_bounded():
    from agentic_rl.tools.mcp.spec import MAX_TIMEOUT_S, McpServerSpec

    base = {"name": "s", "url": "http://127.0.0.1:9/mcp"}
    for value in (math.inf, math.nan, 0, -1, 1e300, MAX_TIMEOUT_S * 2, 10**400, "soon"):
        for key in ("call_timeout_s", "startup_timeout_s"):
            with pytest.raises(ValueError, match=key):
                McpServerSpec.from_dict({**base, key: value})
    assert McpServerSpec.from_dict({**base, "call_timeout_s": MAX_TIMEOUT_S}).call_timeout_s == (
        MAX_TIMEOUT_S
    )
