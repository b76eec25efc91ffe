"""Typed TOML config: defaults, validation errors naming key and file, --set overrides, round trip."""

from __future__ import annotations

import dataclasses

import pytest

from agentic_rl.config import (
    MOVED_KEYS,
    AlgorithmConfig,
    EnvConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    config_to_dict,
    load_config,
    load_run_config,
    save_config,
)
from agentic_rl.errors import ConfigError
from agentic_rl.rewards import RewardWeights
from agentic_rl.rollout import RolloutConfig


def _write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_defaults():
    config = load_config(None)
    assert config == TrainConfig()
    assert config.env.id == "calculator-v0" and config.model.path == "default"
    assert config.algorithm.name == "grpo" and config.reward == RewardWeights()
    assert config.rollout == RolloutConfig()


def test_file_values(tmp_path):
    path = _write(
        tmp_path,
        """
name = "exp"
seed = 3
[algorithm]
steps = 7
[optim]
lr = 3e-6
[env]
id = "calculator-v0"
kwargs = { levels = ["direct"] }
[reward]
process = 0
[model]
lora = true
""",
    )
    config = load_config(path)
    assert config.name == "exp" and config.seed == 3
    assert config.algorithm.steps == 7 and config.optim.lr == 3e-6
    assert (
        config.algorithm.group_size == AlgorithmConfig().group_size
    )  # untouched keys keep defaults
    assert config.env.kwargs == {"levels": ["direct"]}
    assert config.reward.process == 0.0 and isinstance(
        config.reward.process, float
    )  # int accepted as float
    assert config.model.lora is True


@pytest.mark.parametrize(
    "text, key",
    [
        ("[algorithm]\nbogus = 1\n", "algorithm.bogus"),
        ("bogus = 1\n", "bogus"),
        ("[nosuchsection]\nx = 1\n", "nosuchsection"),
        ("[rollout]\nmax_turn = 3\n", "rollout.max_turn"),
    ],
)
def test_unknown_key_names_key_and_file(tmp_path, text, key):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as exc_info:
        load_config(path)
    message = str(exc_info.value)
    assert f"unknown key '{key}'" in message and str(path) in message


def test_unknown_key_lists_known_keys(tmp_path):
    with pytest.raises(ConfigError, match="known keys here: .*group_size"):
        load_config(_write(tmp_path, "[algorithm]\ngroupsize = 4\n"))


@pytest.mark.parametrize(
    "text, key, kind",
    [
        ('[algorithm]\nsteps = "ten"\n', "algorithm.steps", "int"),
        ("[algorithm]\nsteps = 2.5\n", "algorithm.steps", "int"),
        ("[algorithm]\nsteps = true\n", "algorithm.steps", "int"),  # a bool is not an int
        ('[optim]\nlr = "fast"\n', "optim.lr", "float"),
        ("[model]\nlora = 1\n", "model.lora", "bool"),
        ("name = 5\n", "name", "str"),
        ('[env]\nkwargs = "levels"\n', "env.kwargs", "dict"),
        ("[reward]\nrisk = false\n", "reward.risk", "float"),
    ],
)
def test_wrong_type_names_key_and_file(tmp_path, text, key, kind):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as exc_info:
        load_config(path)
    message = str(exc_info.value)
    assert f"'{key}' must be {kind}" in message and str(path) in message


def test_section_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match="'algorithm' must be a table"):
        load_config(_write(tmp_path, "algorithm = 3\n"))


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "[algorithm\nsteps = 1\n"))


def test_overrides_numbers_bools_strings_tables():
    config = load_config(
        None,
        [
            "algorithm.steps=5",
            "optim.lr=3e-6",
            "loss.kl_coef=0",  # an int where a float is expected
            "model.lora=true",
            "optim.skip_zero_advantage=false",
            "name=my-run",  # a bare string
            "output_dir='/tmp/some dir'",  # a TOML string
            'model.path="/models/x"',
            'env.kwargs={levels=["direct", "word"]}',  # an inline table
            'warmup.env_kwargs.levels=["direct"]',  # a dotted key into a dict
        ],
    )
    assert config.algorithm.steps == 5 and config.optim.lr == 3e-6
    assert config.loss.kl_coef == 0.0 and isinstance(config.loss.kl_coef, float)
    assert config.model.lora is True and config.optim.skip_zero_advantage is False
    assert config.name == "my-run" and config.output_dir == "/tmp/some dir"
    assert config.model.path == "/models/x"
    assert config.env.kwargs == {"levels": ["direct", "word"]}
    assert config.warmup.env_kwargs == {"levels": ["direct"]}


def test_overrides_apply_on_top_of_a_file(tmp_path):
    path = _write(tmp_path, "[algorithm]\nsteps = 7\ngroup_size = 3\n")
    config = load_config(path, ["algorithm.steps=9"])
    assert config.algorithm.steps == 9 and config.algorithm.group_size == 3


def test_override_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.bogus'.*") as exc_info:
        load_config(None, ["algorithm.bogus=1"])
    assert "--set" in str(exc_info.value)
    with pytest.raises(ConfigError, match="'algorithm.steps' must be int"):
        load_config(None, ["algorithm.steps=many"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["algorithm.steps"])


def test_override_into_a_scalar_is_rejected(tmp_path):
    path = _write(tmp_path, 'name = "a"\n')
    with pytest.raises(ConfigError, match="'name' is not a table"):
        load_config(path, ["name.x=1"])


@pytest.mark.parametrize(
    "override",
    [
        "algorithm.steps=0",
        "algorithm.steps=-1",
        "algorithm.group_size=0",
        "algorithm.tasks_per_step=0",
        "optim.micro_batch_size=0",
        "optim.lr=0",
        "optim.lr=-1e-5",
        "warmup.batch_size=0",
        "warmup.num_demos=0",
        "eval.size=0",
        "rollout.max_turns=0",
        "rollout.max_new_tokens=0",
        "checkpoint_every=0",  # rollout.temperature: tests/test_config_bounds.py
    ],
)
def test_non_positive_values_rejected(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"'{key}' must be > 0"):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override",
    [
        "loss.kl_coef=-0.1",
        "optim.max_grad_norm=-1",
        "eval.every=-1",
        "optim.weight_decay=-0.01",
        "model.num_threads=-2",
    ],
)
def test_negative_values_rejected(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"'{key}' must be >= 0"):
        load_config(None, [override])


def test_zero_allowed_where_it_means_off():
    config = load_config(None, ["loss.kl_coef=0", "optim.max_grad_norm=0", "eval.every=0"])
    assert config.loss.kl_coef == 0.0 and config.eval.every == 0


def test_dataclass_validation_becomes_config_error():
    # max_total_tokens=1 passes "> 0" but RolloutConfig needs >= 2
    with pytest.raises(ConfigError, match="invalid 'rollout'"):
        load_config(None, ["rollout.max_total_tokens=1"])


def test_save_then_load_round_trips(tmp_path):
    config = TrainConfig(
        name="round-trip",
        seed=7,
        model=ModelConfig(path="/models/x", lora=True, lora_rank=4, lora_dropout=0.05),
        env=EnvConfig(kwargs={"levels": ["direct", "word"]}, train_seed_start=100),
        rollout=RolloutConfig(max_turns=3, max_new_tokens=48, temperature=0.7),
        reward=RewardWeights(process=0.25, risk=0.0),
        algorithm=AlgorithmConfig(name="rloo", steps=3),
        loss=LossConfig(kl_coef=0.01),
        optim=OptimConfig(lr=3e-6, skip_zero_advantage=False),
    )
    path = tmp_path / "config.toml"
    save_config(config, path)
    assert load_config(path) == config
    save_config(TrainConfig(), path)
    assert load_config(path) == TrainConfig()


def test_config_to_dict_and_replace():
    d = config_to_dict(TrainConfig())
    assert (
        d["algorithm"]["steps"] == TrainConfig().algorithm.steps
        and d["rollout"]["max_turns"] == RolloutConfig().max_turns
    )
    assert dataclasses.replace(TrainConfig(), name="x").name == "x"


def test_shipped_default_toml_equals_the_built_in_defaults():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "configs" / "default.toml"
    assert load_config(path) == TrainConfig()


def test_default_warmup_demonstrates_only_the_easiest_level():
    assert TrainConfig().warmup.env_kwargs == {"levels": ["direct"]}


def _float_keys(cls=TrainConfig, prefix=""):
    """Every float field of every config section, as dotted keys."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _float_keys(hints[f.name], f"{prefix}{f.name}.")
        elif hints[f.name] is float:
            yield f"{prefix}{f.name}"


FLOAT_KEYS = sorted(_float_keys())


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "1" + "0" * 400])
def test_every_float_key_must_be_finite(key, value):
    """Generic: no float key of any section takes nan, ±inf or a number too large for a float."""
    with pytest.raises(ConfigError, match=f"'{key}' must be a finite number"):
        load_config(None, [f"{key}={value}"])


def test_float_keys_cover_every_section():
    wanted = {
        "optim.lr",
        "loss.kl_coef",
        "warmup.lr",
        "reward.outcome",
        "rollout.temperature",
    }
    assert wanted <= set(FLOAT_KEYS)


@pytest.mark.parametrize(
    "key", ["seed", "env.train_seed_start", "warmup.seed_start", "eval.seed_start"]
)
@pytest.mark.parametrize("value", [-1, 2**32, 10**30])
def test_seeds_must_be_in_the_range_every_rng_takes(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config(None, [f"{key}={value}"])
    assert load_config(
        None, [f"{key}={2**32 - 1}"]
    )  # the largest seed numpy, torch and random all take


def test_every_int_key_fits_in_64_bits():
    with pytest.raises(ConfigError, match=r"'algorithm.steps' must be in \[-2\*\*63, 2\*\*63\)"):
        load_config(None, [f"algorithm.steps={2**63}"])


@pytest.mark.parametrize("old, new", sorted(MOVED_KEYS.items()))
def test_a_moved_key_names_its_new_place_in_one_line(old, new):
    with pytest.raises(ConfigError) as exc_info:
        load_config(None, [f"{old}=1"])
    message = str(exc_info.value)
    assert f"{old} moved to {new}" in message and "\n" not in message


def test_a_moved_key_in_a_user_file_names_its_new_place(tmp_path):
    with pytest.raises(ConfigError, match=r"run.toml: algorithm.lr moved to optim.lr"):
        load_config(_write(tmp_path, "[algorithm]\nsteps = 3\nlr = 1e-5\n"))


OLD_RUN_CONFIG = """
name = "old-run"
seed = 0
[algorithm]
name = "ppo"
steps = 3
group_size = 4
lr = 1e-5
weight_decay = 0.01
kl_coef = 0.05
kl_mode = "reward"
micro_batch_size = 2
ppo_epochs = 2
minibatches = 1
skip_zero_advantage = false
task_sampling = "sequential"
dynamic_sampling = false
value_lr = 0.002
value_clip = 0.1
gamma = 0.9
[optim]
max_grad_norm = 0.5
"""


def test_an_old_run_directory_config_still_loads(tmp_path):
    """A RUN_DIR/config.toml written before [algorithm] was split (an old --resume, eval
    --model RUN_DIR or report target) reads each moved key at its new place."""
    path = tmp_path / "config.toml"
    path.write_text(OLD_RUN_CONFIG)
    config = load_run_config(path)
    assert config.algorithm.name == "ppo" and config.algorithm.steps == 3
    assert config.algorithm.group_size == 4 and config.algorithm.gamma == 0.9
    assert config.optim == OptimConfig(
        lr=1e-5,
        weight_decay=0.01,
        max_grad_norm=0.5,  # set at its new place already: that one wins
        micro_batch_size=2,
        ppo_epochs=2,
        minibatches=1,
        skip_zero_advantage=False,
    )
    assert config.loss == LossConfig(kl_coef=0.05, kl_mode="reward")
    assert config.sampling.task_sampling == "sequential" and not config.sampling.dynamic_sampling
    assert config.ppo.value_lr == 0.002 and config.ppo.value_clip == 0.1
    with pytest.raises(ConfigError, match="moved to"):  # as a user config it is rejected
        load_config(path)


def test_rules_sit_beside_their_fields():
    """Each section checks its own ranges (no central list): building it in code fails too."""
    with pytest.raises(ValueError, match="'optim.lr' must be > 0"):
        OptimConfig(lr=0.0)
    with pytest.raises(ValueError, match="'loss.kl_coef' must be >= 0"):
        LossConfig(kl_coef=-1.0)
    with pytest.raises(ValueError, match="loss.kl_mode must be one of loss, reward"):
        LossConfig(kl_mode="both")
