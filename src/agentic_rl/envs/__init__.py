"""Environments: the Gymnasium-style contract, the registry, and the built-in envs."""

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.envs.calculator import CalculatorEnv
from agentic_rl.envs.code_repair import CodeRepairEnv
from agentic_rl.envs.memory_recall import MemoryRecallEnv
from agentic_rl.envs.registry import EnvSpec, accepts, make, register, registered
from agentic_rl.envs.games import register_game_envs
from agentic_rl.envs.search_qa import SearchQAEnv

register("calculator-v0", CalculatorEnv, CalculatorEnv.description)
register_game_envs(register)  # frozenlake-v0, taxi-v0, ta-towerofhanoi-v0, ... (envs/games)
register("code-repair-v0", CodeRepairEnv, CodeRepairEnv.description)
register("search-qa-v0", SearchQAEnv, SearchQAEnv.description)
register("memory-recall-v0", MemoryRecallEnv, MemoryRecallEnv.description)

__all__ = ["Env", "EnvSpec", "EpisodeEndedError", "EpisodeNotStartedError", "CalculatorEnv", "CodeRepairEnv", "SearchQAEnv", "MemoryRecallEnv", "accepts", "make", "register", "registered"]
