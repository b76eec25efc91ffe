"""Loading and saving the whole run configuration (``TrainConfig``, one TOML file).

Every key and value is checked: an unknown key, a wrong type, a non-finite float or an
out-of-range value raises :class:`~agentic_rl.errors.ConfigError` naming the key and the file
(range rules sit beside their fields, :mod:`agentic_rl.config.rules`). A key that moved to
another section (``algorithm.lr`` is now ``optim.lr``, :data:`MOVED_KEYS`) fails with one line
naming its new place, except in a saved run directory's ``config.toml``
(:func:`load_run_config`), where it is read at its new place.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from agentic_rl.config.agent import AgentConfig
from agentic_rl.config.algorithm import (
    AlgorithmConfig,
    LossConfig,
    OptimConfig,
    PPOConfig,
    SamplingConfig,
    check_off_policy,
    check_rollouts_per_round,
)
from agentic_rl.config.bounds import (
    MAX_STEPS,
    MAX_TEMPERATURE,
    MAX_TIMEOUT_S,
    MAX_TOKENS,
    MAX_TURNS,
    MIN_TEMPERATURE,
    Bounds,
    check_text,
)
from agentic_rl.config.env_recipe import fill_env_recipe
from agentic_rl.config.migration import MOVED_KEYS, migrate_keys, moved_keys
from agentic_rl.config.mixture import (
    MixEntry,
    check_mix_exclusive,
    fill_mix_recipes,
    mix_rollout,
)
from agentic_rl.config.rules import check_rules, positive, text
from agentic_rl.config.sections import (
    EnvConfig,
    EvalConfig,
    ModelConfig,
    ScaleConfig,
    ToolsConfig,
    TrackingConfig,
    WarmupConfig,
)
from agentic_rl.errors import ConfigError, UnknownEnvError
from agentic_rl.rewards.rubric import RewardWeights
from agentic_rl.rollout.engine import RolloutConfig

__all__ = [
    "MOVED_KEYS",
    "TrainConfig",
    "config_to_dict",
    "load_config",
    "load_run_config",
    "save_config",
]


@dataclass(frozen=True)
class TrainConfig:
    """The whole run configuration (one TOML file).

    Attributes:
        name: the run directory's name (``<output_dir>/<name>``, ``-2``, ``-3`` … if taken):
            one plain directory name (:func:`~agentic_rl.config.bounds.check_name`).
        seed: the run's seed (Python, torch and the sampler; [0, 2**32)).
        output_dir: where run directories go (not empty: ``.`` is the current directory).
        checkpoint_every: RL steps between checkpoints (for ``--resume``; > 0).
        model … agent: the sections, one dataclass each (``[agent]``: an agent program trained
            through the policy server, :mod:`agentic_rl.config.agent`).
    """

    name: str = text("calculator-grpo", "name")
    seed: int = 0
    output_dir: str = text("runs", "path")
    checkpoint_every: int = positive(5, MAX_STEPS)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardWeights = field(default_factory=RewardWeights)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)

    def __post_init__(self) -> None:
        check_rules(self, "")
        check_off_policy(self)
        check_rollouts_per_round(self)
        for i, entry in enumerate(self.env.mix):  # each env's budgets fit together
            mix_rollout(self.rollout, entry, i, _FOREIGN_RULES)


#: ranges of ``[rollout]`` and ``[reward]`` (:class:`~agentic_rl.rollout.engine.RolloutConfig`
#: and :class:`~agentic_rl.rewards.rubric.RewardWeights` live in layers that know nothing of
#: config files; their own checks are in their __post_init__). Reward weights are >= 0: the
#: formula R = λo·outcome + λp·process − λc·cost − λr·risk carries the signs.
_FOREIGN_RULES = {
    "rollout.max_turns": Bounds(0, MAX_TURNS, low_open=True),
    "rollout.max_new_tokens": Bounds(0, MAX_TOKENS, low_open=True),
    "rollout.max_total_tokens": Bounds(0, MAX_TOKENS, low_open=True),
    "rollout.temperature": Bounds(MIN_TEMPERATURE, MAX_TEMPERATURE),
    "rollout.context_max_tokens": Bounds(0, MAX_TOKENS),
    **{f"reward.{k}": Bounds(0) for k in ("outcome", "process", "cost", "risk")},
    "reward.timeout_s": Bounds(0, MAX_TIMEOUT_S, low_open=True),
}


_INT_RANGE = (-(2**63), 2**63)  # every int key fits a signed 64-bit integer (torch, numpy, Arrow)


def _is_seed(key: str) -> bool:
    """``seed`` and every ``*seed_start`` key: Python's, torch's and numpy's seeds take [0, 2**32)."""
    last = key.rsplit(".", 1)[-1]
    return last == "seed" or last.endswith("seed_start")


def _finite_float(key: str, value: int | float, source: str) -> float:
    """``value`` as a float; every float key of every section must be finite (no nan, inf).

    Raises:
        ConfigError: ``value`` is nan or ±inf, or an int too large for a float.
    """
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ConfigError(f"{source}: key '{key}' must be a finite number, got {value!r}")
    return out


def _check_value(key: str, hint: Any, value: Any, source: str) -> Any:
    origin = typing.get_origin(hint)
    ok = True
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = _finite_float(key, value, source) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is dict or hint is dict:
        ok = isinstance(value, dict)
    if not ok:
        name = getattr(hint, "__name__", str(hint))
        raise ConfigError(
            f"{source}: key '{key}' must be {name}, got {type(value).__name__} {value!r}"
        )
    if hint is int and not _INT_RANGE[0] <= value < _INT_RANGE[1]:
        raise ConfigError(f"{source}: key '{key}' must be in [-2**63, 2**63), got {value!r}")
    if hint is int and _is_seed(key) and not 0 <= value < 2**32:
        raise ConfigError(
            f"{source}: key '{key}' is a seed and must be in [0, 2**32), got {value!r}"
        )
    try:
        if hint is str:
            check_text(key, value)
        if key in _FOREIGN_RULES:
            _FOREIGN_RULES[key].check(key, value)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return value


def _build(cls: type, data: dict[str, Any], prefix: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: '{prefix.rstrip('.')}' must be a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"{source}: unknown key '{prefix}{key}' (known keys here: {known})")
    values = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value, f"{prefix}{key}.", source)
        elif typing.get_args(hint)[:1] == (MixEntry,):  # [[env.mix]]: an array of tables
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(f"{source}: key '{prefix}{key}' must be an array of tables")
            values[key] = tuple(
                _build(MixEntry, v, f"{prefix}{key}[{i}].", source) for i, v in enumerate(value)
            )
        else:
            values[key] = _check_value(f"{prefix}{key}", hint, value, source)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        if message.startswith("key '"):  # a field rule names its key already
            raise ConfigError(f"{source}: {message}") from exc
        raise ConfigError(f"{source}: invalid '{prefix.rstrip('.') or 'config'}': {exc}") from exc


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (TOML-serialisable)."""
    return dataclasses.asdict(config)


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set: expected key=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string
    return key.split("."), value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    migrate: bool = False,
) -> TrainConfig:
    """Load a TOML config (or the defaults when ``path`` is None) and apply ``--set`` overrides.

    Args:
        path: the TOML file; None = the built-in defaults.
        overrides: ``key=value`` strings (``--set``), values parsed as TOML.
        migrate: read keys that moved (:data:`MOVED_KEYS`) at their new place instead of
            rejecting them (saved run directories: :func:`load_run_config`).

    When the file or an override sets ``env.id`` to another env than calculator-v0, that env's
    recipe defaults fill the keys they leave unset (:mod:`agentic_rl.config.env_recipe`).

    Raises:
        ConfigError: missing/unparseable file, unknown key, wrong type or value, a key that
            moved (``algorithm.lr moved to optim.lr``); the message names the key and the file.
    """
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    for item in overrides:
        keys, value = _parse_override(item)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item}: '{k}' is not a table")
        node[keys[-1]] = value
    if overrides:
        source = f"{source} + --set"
    moved = moved_keys(data)
    if moved and not migrate:
        old, new = moved[0]
        raise ConfigError(f"{source}: {old} moved to {new}")
    if not migrate:  # a saved run's config.toml holds every key already
        single = check_mix_exclusive(data)
        if single:
            raise ConfigError(
                f"{source}: key '{single}' is set beside env.mix: a mixture's envs are its "
                "[[env.mix]] entries (set id, kwargs and warmup_kwargs in each; --env cannot "
                "be combined with a mixture)"
            )
        try:
            fill_mix_recipes(data)  # each [[env.mix]] entry: its env's recipe defaults
        except UnknownEnvError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        fill_env_recipe(data)  # env.id from the file or --set: the env's own recipe defaults
    return _build(TrainConfig, migrate_keys(data) if migrate else data, "", source)


def load_run_config(path: str | Path) -> TrainConfig:
    """The resolved config a run wrote (``RUN_DIR/config.toml``), also one written by an older
    version: keys that moved to another section since (:data:`MOVED_KEYS`) are read at their
    new place.

    Raises:
        ConfigError: as :func:`load_config`.
    """
    return load_config(path, migrate=True)


def save_config(config: TrainConfig, path: Path) -> None:
    """Write the resolved config as TOML (a mixture's without ``env.id``, ``env.kwargs`` and
    ``warmup.env_kwargs``, which it does not use: the file loads again as a config)."""
    data = config_to_dict(config)
    if config.env.mix:
        del data["env"]["id"], data["env"]["kwargs"], data["warmup"]["env_kwargs"]
    path.write_text(tomli_w.dumps(data))
