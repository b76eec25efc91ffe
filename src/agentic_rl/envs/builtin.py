"""The built-in env ids: one lazy registry entry each (entry point, description, recipe).

Nothing here imports an env module: each entry point is a ``"module:attribute"`` string loaded on
the first :func:`~agentic_rl.envs.make` of its id. Each entry declares the env's recipe
(``recipe_overrides``: the ``{dotted config key: value}`` that ``agentic-rl train --env ID``
applies, :mod:`agentic_rl.config.env_recipe`), with the measurements behind it. The id families
(``rg/``, ``miniwob/``, ``skyrl/``, ``openenv/``, ``verifiers/``) are resolved by their own
modules, imported on first use of one of their ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentic_rl.envs.games.textarena_games import GAMES, TEXTARENA_IDS
from agentic_rl.envs.registry import EnvFamily

__all__ = ["register_builtin_envs"]

# budgets of ``agentic-rl train --env search-qa-v0`` (the oracle's search + open reply is up to
# ~80 tokens; two hops and the answer take 3 turns) and a linear lr warm-up over the first 2 RL
# steps: without it the first update broke the tool-call format; 10 RL steps (with the default
# guidance: +13.3 and +15.8 points on 120 held-out tasks, seeds 0 and 1; docs/training_runs.md)
SEARCH_QA_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 4,
    "rollout.max_new_tokens": 96,
    "rollout.max_total_tokens": 1536,
    "optim.lr_warmup_steps": 8,
    "algorithm.steps": 10,
}

# ``agentic-rl train --env swe-repo-v0``, sized for SmolLM2-135M on a CPU: the easy level
# (the 135M model has no signal elsewhere), evaluated on held-out bugs; budgets from the
# oracle's episodes (4 turns, replies up to 272 tokens, episodes up to ~1,500 tokens on the
# easy level, SmolLM2 tokenizer, signature prompt; tests/envs/test_swe_repo.py checks them);
# small RL steps (4 tasks x 4), 20 held-out tasks; warm-up and RL settings of web-shop-v0's
# run that lifted (docs/training_runs.md)
SWE_REPO_RECIPE: dict[str, Any] = {
    "env.kwargs.levels": ["easy"],
    "env.kwargs.heldout_from_seed": 1_000_000,  # eval.seed_start: evaluation on unseen bugs
    "env.kwargs.tool_prompt": "signature",
    "rollout.max_turns": 8,
    "rollout.max_new_tokens": 320,
    "rollout.max_total_tokens": 3072,
    "warmup.num_demos": 32,
    "warmup.epochs": 2,
    "algorithm.tasks_per_step": 4,
    "algorithm.group_size": 4,
    "sampling.rollout_tasks": 4,
    "sampling.max_sample_rounds": 1,
    "eval.size": 20,
    "optim.lr": 1e-5,
    "rollout.temperature": 0.7,
    "loss.loss_agg": "seq-mean-token-mean",
    "loss.kl_coef": 0.04,
}

# the warm-up's demonstrations come from the easiest level
SWE_REPO_WARMUP: dict[str, Any] = {"levels": ["easy"]}

MATH_PYTHON_RECIPE: dict[str, Any] = {
    "rollout.max_new_tokens": 128,
    "rollout.max_total_tokens": 1536,
}

# budgets of ``agentic-rl train --env web-shop-v0``: the oracle needs 7 turns (11 for
# ``replace``), one page load each; its longest reply (the product form, 4 calls) is 125
# SmolLM2 tokens and its longest episode 2,639 tokens in all (seeds 0-11, JSON tool prompt);
# the typed-signature tool prompt is ~300 tokens shorter than the schemas. Warm-up and RL
# settings: those of the one run that lifted (docs/training_runs.md, 2026-12-03): with the
# global ones (lr 3e-5, T = 1, token-mean, no KL) the same warm-up fell from 30 % to 5 %
WEB_SHOP_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 12,
    "rollout.max_new_tokens": 160,
    "rollout.max_total_tokens": 4096,
    "env.kwargs.tool_prompt": "signature",
    "warmup.num_demos": 32,
    "warmup.epochs": 2,
    "optim.lr": 1e-5,
    "rollout.temperature": 0.7,
    "loss.loss_agg": "seq-mean-token-mean",
    "loss.kl_coef": 0.04,
}

# ``agentic-rl train --env coq-proof-v0``: level 1 only (what a 135M model on a CPU can
# learn in a ~30-minute run), a few short turns. SmolLM2 tokens with the signature tool
# prompt: first prompt 140 (level 1) to 394 (level 3), oracle reply at most 45 (level 1)
# and 122 (level 3, ``sum_list_rev``)
COQ_PROOF_RECIPE: dict[str, Any] = {
    "env.kwargs.levels": [1],
    "env.kwargs.tool_prompt": "signature",
    "warmup.env_kwargs": {"levels": [1], "tool_prompt": "signature"},
    "rollout.max_turns": 3,
    "rollout.max_new_tokens": 128,
    "rollout.max_total_tokens": 1536,
    "warmup.num_demos": 32,
    "sampling.rollout_tasks": 4,
    "sampling.max_sample_rounds": 1,
}

# ``train --env memory-recall-v0`` budgets: the oracle's longest reply (one memory_write
# with the whole profile) takes up to 48 tokens with 3 facts; leave a margin
MEMORY_RECALL_RECIPE: dict[str, Any] = {"rollout.max_new_tokens": 64}

# budgets of ``agentic-rl train --env research-report-v0``: the oracle's replies are at most 96
# SmolLM2 tokens (the report) and its episodes at most ~1100 tokens in all (2 search + open
# turns, then the report), with room for a longer report; lr warm-up as search-qa-v0
RESEARCH_REPORT_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 4,
    "rollout.max_new_tokens": 160,
    "rollout.max_total_tokens": 1536,
    "optim.lr_warmup_steps": 8,
}

# budgets of ``agentic-rl train --env code-repair-v0`` (the oracle's reply that writes the fixed
# solution.py is up to ~740 tokens, the first prompt up to ~830, SmolLM2 tokenizer)
CODE_REPAIR_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 4,
    "rollout.max_new_tokens": 768,
    "rollout.max_total_tokens": 3072,
}

# ``agentic-rl train --env``'s recipe (docs/training_runs.md, "A Markov observation: the
# shipped recipe"): rollout budgets, the neighbour line and one short context per turn, a
# 24-demonstration warm-up that teaches the format only, an lr warm-up and 12 RL steps
FROZEN_LAKE_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 16,
    "rollout.max_new_tokens": 24,
    "rollout.max_total_tokens": 2048,
    "env.kwargs.describe_neighbours": True,
    "env.kwargs.keep_history": False,
    "warmup.num_demos": 24,
    "optim.lr_warmup_steps": 8,
    "algorithm.steps": 12,
}

# rollout budgets of ``agentic-rl train --env`` (~110 tokens a turn)
TAXI_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 40,
    "rollout.max_new_tokens": 24,
    "rollout.max_total_tokens": 6144,
}

# rollout budgets of ``agentic-rl train --env`` (~150 tokens a turn)
CLIFF_WALKING_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 40,
    "rollout.max_new_tokens": 24,
    "rollout.max_total_tokens": 8192,
}

# rollout budgets of ``agentic-rl train --env`` (the opening is ~250 tokens, a turn ~120)
TEXTWORLD_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 30,
    "rollout.max_new_tokens": 24,
    "rollout.max_total_tokens": 6144,
}

_GAMES = "agentic_rl.envs.games"

#: ``(id, entry point, description, recipe_overrides, default kwargs)`` of the built-in ids
BUILTIN: tuple[tuple[str, str, str, dict[str, Any], dict[str, Any]], ...] = (
    (
        "calculator-v0",
        "agentic_rl.envs.calculator.env:CalculatorEnv",
        "Arithmetic questions (direct, multi-op, word problems) solved with a calculator tool",
        {},
        {},
    ),
    (
        "math-python-v0",
        "agentic_rl.envs.reasoning.math_python:MathPythonEnv",
        "Multi-step math word problems (reasoning-gym) solved with a sandboxed stateful Python tool",
        MATH_PYTHON_RECIPE,
        {},
    ),
    (
        "code-repair-v0",
        "agentic_rl.envs.code_repair.env:CodeRepairEnv",
        "Fix a seeded bug in a HumanEval function with file tools and visible tests; hidden "
        "tests grade",
        CODE_REPAIR_RECIPE,
        {},
    ),
    (
        "search-qa-v0",
        "agentic_rl.envs.search_qa.env:SearchQAEnv",
        "Answer single- and multi-hop questions about a generated fictional encyclopedia "
        "with BM25 search and open",
        SEARCH_QA_RECIPE,
        {},
    ),
    (
        "research-report-v0",
        "agentic_rl.envs.research_report.env:ResearchReportEnv",
        "Search a generated encyclopedia and write a short report citing document ids; "
        "verified citations and coverage",
        RESEARCH_REPORT_RECIPE,
        {},
    ),
    (
        "frozenlake-v0",
        f"{_GAMES}.gym_games:FrozenLakeTextEnv",
        "FrozenLake (not slippery): walk from S to G on a random 4x4 map",
        FROZEN_LAKE_RECIPE,
        {},
    ),
    (
        "frozenlake-slippery-v0",
        f"{_GAMES}.gym_games:FrozenLakeTextEnv",
        "FrozenLake on slippery ice (random 4x4 map)",
        FROZEN_LAKE_RECIPE,
        {"is_slippery": True},
    ),
    (
        "taxi-v0",
        f"{_GAMES}.gym_games:TaxiTextEnv",
        "Taxi: pick up the passenger and drop them at the destination",
        TAXI_RECIPE,
        {},
    ),
    (
        "cliffwalking-v0",
        f"{_GAMES}.gym_games:CliffWalkingTextEnv",
        "CliffWalking: reach the goal along a cliff edge without falling",
        CLIFF_WALKING_RECIPE,
        {},
    ),
    (
        "textworld-v0",
        f"{_GAMES}.textworld_env:TextWorldEnv",
        "TextWorld: a generated text adventure per seed (admissible commands, intermediate "
        "rewards) (extra 'textworld')",
        TEXTWORLD_RECIPE,
        {},
    ),
    (
        "gym-v0",
        f"{_GAMES}.gym_games:gym_text_env",
        "Any Gymnasium env with discrete actions, by env.kwargs.gym_id (default CliffWalking-v1)",
        CLIFF_WALKING_RECIPE,
        {},
    ),
    (
        "memory-recall-v0",
        "agentic_rl.envs.memory_recall.env:MemoryRecallEnv",
        "Remember a customer's profile across sessions whose history is wiped, using memory "
        "tools (write/search/update/delete)",
        MEMORY_RECALL_RECIPE,
        {},
    ),
    (
        "web-shop-v0",  # extra 'web' (Flask on first use)
        "agentic_rl.envs.web.shop.env:WebShopEnv",
        "Buy the one product that fits hidden constraints in a local Flask + SQLite web shop "
        "(text browser or Chromium); reward read from the database (extra 'web')",
        WEB_SHOP_RECIPE,
        {},
    ),
    (
        "swe-repo-v0",  # repos fetched at install time
        "agentic_rl.envs.swe_repo.env:SweRepoEnv",
        "Fix a bug injected into a real Python repository (7 pinned PyPI projects, their own "
        "pytest suites) with bash, file tools and run_tests in the sandbox; graded on pristine "
        "tests",
        SWE_REPO_RECIPE,
        {},
    ),
    (
        "coq-proof-v0",  # Debian's coq (apt-get install coq)
        "agentic_rl.envs.coq_proof.env:CoqProofEnv",
        "Prove Coq lemmas (nat arithmetic, lists, induction) tactic by tactic; coqc checks the "
        "proof",
        COQ_PROOF_RECIPE,
        {},
    ),
)

_ADAPTERS = "agentic_rl.envs.adapters"

#: ``(pattern, prefix, "module:resolve", description, "module:members")`` of the id families
FAMILIES: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "rg/<task>-v0",
        "rg/",
        "agentic_rl.envs.reasoning.reasoning_gym_env:resolve_rg_id",
        "Any reasoning-gym task (100+ procedural generators with verifiers)",
        "agentic_rl.envs.reasoning.reasoning_gym_env:rg_task_names",
    ),
    (
        "skyrl/<env>-v0",
        "skyrl/",
        f"{_ADAPTERS}.skyrl:resolve_skyrl_id",
        "SkyRL-Gym text envs fed with generated tasks (extra 'skyrl')",
        f"{_ADAPTERS}.skyrl:skyrl_env_names",
    ),
    (
        "openenv/<module>-v0",
        "openenv/",
        f"{_ADAPTERS}.openenv:resolve_openenv_id",
        "OpenEnv envs, each served by its own local process (extra 'openenv')",
        f"{_ADAPTERS}.openenv:openenv_modules",
    ),
    (
        "verifiers/<taskset>-v0",
        "verifiers/",
        f"{_ADAPTERS}.verifiers:resolve_verifiers_id",
        "verifiers single-turn tasksets, in their own virtualenv (make install-verifiers)",
        f"{_ADAPTERS}.verifiers:verifiers_tasksets",
    ),
    (
        "miniwob/<task>-v0",
        "miniwob/",
        "agentic_rl.envs.web.miniwob:resolve_miniwob_id",
        "MiniWoB++ web tasks in headless Chromium (extra 'web')",
        "agentic_rl.envs.web.miniwob:miniwob_task_names",
    ),
)

#: warm-up env kwargs of the ids whose warm-up plays another setting than their RL
WARMUP_KWARGS: dict[str, dict[str, Any]] = {"swe-repo-v0": SWE_REPO_WARMUP}


def register_builtin_envs(
    register: Callable[..., None], register_family: Callable[[EnvFamily], None]
) -> None:
    """Register the built-in ids and the TextArena games with ``register`` and the id families
    with ``register_family`` (lazily: no env module is imported).

    Raises:
        ValueError: an id or family is already registered.
    """
    for env_id, entry_point, description, recipe, kwargs in BUILTIN:
        register(
            env_id,
            entry_point,
            description,
            recipe_overrides=recipe,
            warmup_kwargs=WARMUP_KWARGS.get(env_id),
            **kwargs,
        )
    for game, env_id in TEXTARENA_IDS.items():
        needs = " (needs NLTK corpora installed locally)" if GAMES[game].nltk_resources else ""
        register(
            env_id,
            f"{_GAMES}.textarena_adapter:TextArenaEnv",
            f"TextArena {game} (single player){needs}",
            recipe_overrides=GAMES[game].recipe_overrides,
            game=game,
        )
    for pattern, prefix, resolve, description, members in FAMILIES:
        register_family(EnvFamily(pattern, prefix, resolve, description, members))
