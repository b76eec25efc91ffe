"""Environments: the Gymnasium-style contract, the registry, and the built-in envs."""

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.envs.calculator import CalculatorEnv
from agentic_rl.envs.registry import EnvSpec, accepts, make, register, registered

register("calculator-v0", CalculatorEnv, CalculatorEnv.description)

__all__ = ["Env", "EnvSpec", "EpisodeEndedError", "EpisodeNotStartedError", "CalculatorEnv", "accepts", "make", "register", "registered"]
