"""Typed, validated training configuration, stored as TOML (docs/design.md, decision 7).

A config file is a TOML document whose sections mirror :class:`TrainConfig`: ``[model]``,
``[env]``, ``[tools]``, ``[rollout]``, ``[reward]``, ``[warmup]``, the RL phase by concern
(``[algorithm]``, ``[sampling]``, ``[loss]``, ``[optim]``, ``[ppo]``), ``[eval]``,
``[tracking]``, ``[scale]``, ``[agent]``. Loading checks every key and value: an unknown key, a wrong type
or an out-of-range value raises :class:`~agentic_rl.errors.ConfigError` naming the key and the
file; a key that moved (``algorithm.lr``) names its new place (``optim.lr``). ``--set
a.b=value`` overrides are parsed as TOML values (``--set optim.lr=3e-6``, ``--set
model.lora=true``, ``--set name='"my-run"'`` or simply ``--set name=my-run``) and validated the
same way. The resolved config is written as ``config.toml`` into every run directory and read
back with :func:`load_run_config` (which also reads run directories of older versions).

Modules: :mod:`~agentic_rl.config.rules` (per-field range rules), ``sections`` (model, env,
tools, warm-up, eval, tracking, scale), ``algorithm`` (the RL sections), ``migration`` (moved
keys), ``loading`` (TrainConfig, load/save).
"""

from agentic_rl.config.agent import AgentConfig
from agentic_rl.config.algorithm import (
    AlgorithmConfig,
    LossConfig,
    OptimConfig,
    PPOConfig,
    SamplingConfig,
)
from agentic_rl.config.loading import (
    MOVED_KEYS,
    TrainConfig,
    config_to_dict,
    load_config,
    load_run_config,
    save_config,
)
from agentic_rl.config.sections import (
    EnvConfig,
    EvalConfig,
    ModelConfig,
    ScaleConfig,
    ToolsConfig,
    TrackingConfig,
    WarmupConfig,
)

__all__ = [
    "MOVED_KEYS",
    "AgentConfig",
    "AlgorithmConfig",
    "EnvConfig",
    "EvalConfig",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "PPOConfig",
    "SamplingConfig",
    "ScaleConfig",
    "ToolsConfig",
    "TrackingConfig",
    "TrainConfig",
    "WarmupConfig",
    "config_to_dict",
    "load_config",
    "load_run_config",
    "save_config",
]
