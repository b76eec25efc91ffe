"""Environments: the Gymnasium-style contract, the registry, and the built-in envs.

Importing this package registers every built-in id and id family (:mod:`agentic_rl.envs.builtin`)
without importing any env module: an env's module is imported on the first
:func:`~agentic_rl.envs.registry.make` of its id, and the env classes named below on first
access (``from agentic_rl.envs import CalculatorEnv`` imports the calculator's module then).
"""

from __future__ import annotations

import importlib
from typing import Any

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError, EpisodeState
from agentic_rl.envs.builtin import register_builtin_envs
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.registry import (
    EnvFamily,
    EnvSpec,
    families,
    get_spec,
    make,
    register,
    register_family,
    registered,
)

register_builtin_envs(register, register_family)

#: public class -> its module (imported on first access, PEP 562)
_LAZY = {
    "ToolEnv": "agentic_rl.envs.tool_env",
    "CalculatorEnv": "agentic_rl.envs.calculator.env",
    "CodeRepairEnv": "agentic_rl.envs.code_repair.env",
    "SearchQAEnv": "agentic_rl.envs.search_qa.env",
    "ResearchReportEnv": "agentic_rl.envs.research_report.env",
    "MemoryRecallEnv": "agentic_rl.envs.memory_recall.env",
}


def __getattr__(name: str) -> Any:
    """The env classes named in ``__all__``, imported on first access (PEP 562).

    Raises:
        AttributeError: not a public name of this package.
    """
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = [
    "Env",
    "EnvContext",
    "EnvFamily",
    "EnvSpec",
    "EpisodeEndedError",
    "EpisodeNotStartedError",
    "EpisodeState",
    "ToolEnv",
    "CalculatorEnv",
    "CodeRepairEnv",
    "SearchQAEnv",
    "ResearchReportEnv",
    "MemoryRecallEnv",
    "families",
    "get_spec",
    "make",
    "register",
    "register_family",
    "registered",
]
