"""Adapters that load other frameworks' environments as agentic-rl envs (id families, resolved lazily).

Importing this package registers each adapter's family; no adapted package is imported until
one of its ids is resolved (docs/env_adapters.md).
"""

from agentic_rl.envs.adapters.openenv import register_openenv_family
from agentic_rl.envs.adapters.skyrl import register_skyrl_family
from agentic_rl.envs.adapters.verifiers import register_verifiers_family

register_skyrl_family()  # skyrl/<env>-v0 (extra 'skyrl')
register_openenv_family()  # openenv/<module>-v0 (extra 'openenv')
register_verifiers_family()  # verifiers/<taskset>-v0 (own virtualenv: make install-verifiers)
