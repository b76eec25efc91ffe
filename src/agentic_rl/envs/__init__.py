"""Environments: the Gymnasium-style contract, the registry, and the built-in envs."""

from agentic_rl.envs.base import Env, EpisodeEndedError, EpisodeNotStartedError
from agentic_rl.envs.calculator.env import CalculatorEnv
from agentic_rl.envs.code_repair.env import CodeRepairEnv
from agentic_rl.envs.games import register_game_envs
from agentic_rl.envs.memory_recall.env import MemoryRecallEnv
from agentic_rl.envs.registry import EnvSpec, accepts, make, register, registered
from agentic_rl.envs.research_report.env import ResearchReportEnv
from agentic_rl.envs.search_qa.env import SearchQAEnv
from agentic_rl.envs.tool_env import ToolEnv

register("calculator-v0", CalculatorEnv, CalculatorEnv.description)

# math-python-v0 and the rg/<task>-v0 family (reasoning-gym is imported on first use)
from agentic_rl.envs.reasoning.math_python import MathPythonEnv  # noqa: E402
from agentic_rl.envs.reasoning.reasoning_gym_env import (  # noqa: E402
    RG_PATTERN,
    ReasoningGymEnv,
    resolve_rg_id,
    rg_task_names,
)
from agentic_rl.envs.registry import EnvFamily, families, get_spec, register_family  # noqa: E402

register("math-python-v0", MathPythonEnv, MathPythonEnv.description)
register_family(
    EnvFamily(RG_PATTERN, "rg/", resolve_rg_id, ReasoningGymEnv.description, rg_task_names)
)
register("code-repair-v0", CodeRepairEnv, CodeRepairEnv.description)
register("search-qa-v0", SearchQAEnv, SearchQAEnv.description)
register("research-report-v0", ResearchReportEnv, ResearchReportEnv.description)
register_game_envs(register)  # frozenlake-v0, taxi-v0, ta-towerofhanoi-v0, ... (envs/games)
register("memory-recall-v0", MemoryRecallEnv, MemoryRecallEnv.description)

import agentic_rl.envs.adapters  # noqa: E402,F401 - registers the adapter families (skyrl/<env>-v0)
from agentic_rl.envs.web.miniwob import register_miniwob_family  # noqa: E402

register_miniwob_family()  # miniwob/<task>-v0 (extra 'web'; selenium is imported when one starts)

from agentic_rl.envs.web.shop.env import WebShopEnv  # noqa: E402

register("web-shop-v0", WebShopEnv, WebShopEnv.description)  # extra 'web' (Flask on first use)

from agentic_rl.envs.swe_repo.env import SweRepoEnv  # noqa: E402

register("swe-repo-v0", SweRepoEnv, SweRepoEnv.description)  # repos fetched at install time

from agentic_rl.envs.coq_proof.env import CoqProofEnv  # noqa: E402

register("coq-proof-v0", CoqProofEnv, CoqProofEnv.description)  # Debian's coq (apt-get install coq)

__all__ = [
    "Env",
    "EnvSpec",
    "ToolEnv",
    "EpisodeEndedError",
    "EpisodeNotStartedError",
    "CalculatorEnv",
    "CodeRepairEnv",
    "SearchQAEnv",
    "ResearchReportEnv",
    "MemoryRecallEnv",
    "accepts",
    "families",
    "get_spec",
    "make",
    "register",
    "registered",
]
