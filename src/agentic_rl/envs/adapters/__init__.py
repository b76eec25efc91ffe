"""Adapters that load other frameworks' environments as agentic-rl envs (id families, resolved lazily).

Their families (``skyrl/<env>-v0``, ``openenv/<module>-v0``, ``verifiers/<taskset>-v0``) are
registered by :mod:`agentic_rl.envs.builtin` with string entry points: no adapter module and
no adapted package is imported until one of their ids is resolved (docs/env_adapters.md).
"""
