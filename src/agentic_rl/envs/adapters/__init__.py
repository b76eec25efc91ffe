"""Adapters that load other frameworks' environments as agentic-rl envs (id families, resolved lazily).

Importing this package registers each adapter's family; no adapted package is imported until
one of its ids is resolved (docs/env_adapters.md).
"""

from agentic_rl.envs.adapters.skyrl import register_skyrl_family

register_skyrl_family()  # skyrl/<env>-v0 (extra 'skyrl')
