"""``[[env.mix]]``: a mixture's entries are typed and validated like every section; each entry
takes its env's recipe defaults for the per-env keys it leaves unset (agentic_rl.config.mixture)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentic_rl.config import TrainConfig, load_config, load_run_config, save_config
from agentic_rl.errors import ConfigError

MIX = "env.mix=[{id='calculator-v0'}, {id='search-qa-v0', weight=2.0}]"


def test_entries_take_their_envs_recipe_defaults_and_the_run_a_mixture_name():
    config = load_config(None, [MIX])
    calc, sq = config.env.mix
    assert config.name == "mixture-grpo"
    assert (calc.id, calc.weight, sq.weight) == ("calculator-v0", 1.0, 2.0)
    # calculator-v0's recipe is the built-in defaults: its warm-up demonstrates the easiest level
    assert calc.warmup_kwargs == {"levels": ["direct"]} and calc.rollout == {}
    # search-qa-v0's budgets (train --env search-qa-v0) become the entry's; run-wide keys do not
    assert sq.rollout == {"max_turns": 4, "max_new_tokens": 96, "max_total_tokens": 1536}
    assert sq.warmup_kwargs == {} and config.optim.lr_warmup_steps == 0
    assert config.algorithm.steps == TrainConfig().algorithm.steps


def test_an_entry_keeps_what_it_sets():
    config = load_config(
        None,
        [
            "env.mix=[{id='search-qa-v0', rollout={max_new_tokens=64}, eval_size=5, "
            "kwargs={question_kinds=['founder']}, warmup_demos=3}]",
            "name=mine",
        ],
    )
    (sq,) = config.env.mix
    assert sq.rollout == {"max_new_tokens": 64, "max_turns": 4, "max_total_tokens": 1536}
    assert (sq.eval_size, sq.warmup_demos, config.name) == (5, 3, "mine")
    assert sq.kwargs == {"question_kinds": ["founder"]}


def test_a_saved_mixture_config_loads_again_as_it_was(tmp_path):
    config = load_config(None, [MIX, "env.reward_norm='std'"])
    save_config(config, tmp_path / "config.toml")
    text = (tmp_path / "config.toml").read_text()
    assert "[[env.mix]]" in text and 'id = "calculator-v0"' in text
    # a mixture's file has no env.id: it loads as a config (train --config) and as a run's config
    assert load_config(tmp_path / "config.toml") == config
    assert load_run_config(tmp_path / "config.toml") == config


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "env.mix=[{id='calculater-v0'}]",
            r"key 'env.mix\[0\].id': unknown env id .*calculator-v0",
        ),
        ("env.mix=[{id='calculator-v0'}, {id='nope-v0'}]", r"key 'env.mix\[1\].id': unknown env"),
        ("env.mix=[{id='calculator-v0', weight=0}]", r"key 'env.mix\[0\].weight' must be > 0"),
        ("env.mix=[{id='calculator-v0', weight=-1.5}]", r"key 'env.mix\[0\].weight' must be > 0"),
        ("env.mix=[{id='calculator-v0', weight='a'}]", r"key 'env.mix\[0\].weight' must be float"),
        ("env.mix=[{id='calculator-v0', weight=nan}]", r"key 'env.mix\[0\].weight' must be a fin"),
        ("env.mix=[{weight=1.0}]", r"key 'env.mix\[0\].id' must name an env"),
        (
            "env.mix=[{id='calculator-v0'}, {id='calculator-v0'}]",
            r"key 'env.mix\[1\].id': calculator-v0 is already env.mix\[0\]",
        ),
        ("env.mix=[{id='calculator-v0', colour=1}]", r"unknown key 'env.mix\[0\].colour'"),
        (
            "env.mix=[{id='calculator-v0', rollout={backend='vllm'}}]",
            r"key 'env.mix\[0\].rollout.backend' is not a per-env rollout key",
        ),
        (
            "env.mix=[{id='calculator-v0', rollout={max_new_tokens=0}}]",
            r"key 'env.mix\[0\].rollout.max_new_tokens' must be > 0",
        ),
        (
            "env.mix=[{id='calculator-v0', rollout={max_turns=2.5}}]",
            r"key 'env.mix\[0\].rollout.max_turns' must be a finite int",
        ),
        (
            "env.mix=[{id='calculator-v0', warmup_demos=-2}]",
            r"key 'env.mix\[0\].warmup_demos' must be -1",
        ),
        ("env.mix=[{id='calculator-v0', eval_size=-1}]", r"key 'env.mix\[0\].eval_size' must be"),
        ("env.mix=3", r"key 'env.mix' must be an array of tables"),
        ("env.reward_norm='std'", r"key 'env.reward_norm' = 'std' .* needs \[\[env.mix\]\]"),
    ],
)
def test_a_wrong_entry_is_one_error_naming_its_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize(
    "extra, key",
    [("env.id='search-qa-v0'", "env.id"), ("warmup.env_kwargs={}", "warmup.env_kwargs")],
)
def test_single_env_keys_beside_a_mixture_are_rejected(extra, key):
    with pytest.raises(ConfigError, match=f"key '{key}' is set beside env.mix"):
        load_config(None, [MIX, extra])


def test_train_env_with_a_mixture_config_is_one_error_line(tmp_path):
    path = tmp_path / "mix.toml"
    path.write_text('[[env.mix]]\nid = "calculator-v0"\n\n[[env.mix]]\nid = "search-qa-v0"\n')
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentic_rl.cli",
            "train",
            "--config",
            str(path),
            "--env",
            "taxi-v0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "key 'env.id' is set beside env.mix" in lines[-1]
    assert not any(line.startswith("Traceback") for line in lines)


def test_the_shipped_mixture_config_loads():
    from pathlib import Path

    from agentic_rl.trainer.sampling.mixture import env_slots

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "mixture.toml")
    slots = env_slots(config)
    assert [s.id for s in slots] == ["calculator-v0", "search-qa-v0", "math-python-v0"]
    assert [s.warmup_demos for s in slots] == [16, 16, 16]
    assert [s.rollout.max_new_tokens for s in slots] == [48, 96, 128]


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{id='search-qa-v0', kwargs={colour=1}}", r"env.mix\[1\].kwargs rejected by search-qa-v0"),
        (
            "{id='search-qa-v0', warmup_kwargs={question_kinds=['nope']}}",
            r"env.mix\[1\].warmup_kwargs rejected by search-qa-v0",
        ),
    ],
)
def test_an_entry_the_env_rejects_fails_before_any_work(entry, message):
    from agentic_rl.trainer.run import validate

    config = load_config(None, [f"env.mix=[{{id='calculator-v0'}}, {entry}]"])
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_eval_of_a_mixture_config_needs_an_env(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", "eval", "--set", MIX],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == (
        "error: the config trains a mixture (calculator-v0, search-qa-v0): choose its env with "
        "--env ID"
    )
