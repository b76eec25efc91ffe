"""``agentic-rl envs``: the registered ids, the installed plugins and the id families."""

from __future__ import annotations

import textwrap

__all__ = ["cmd_envs"]


def cmd_envs(args) -> int:
    """Print one line per registered env id, per installed plugin (entry points of the group
    ``agentic_rl.envs``, or why one does not load) and per family with its members."""
    from agentic_rl.envs import families, registered
    from agentic_rl.envs.registry import plugins

    for spec in registered():
        print(f"{spec.env_id:<24} {spec.description}")
    for plugin in plugins():
        env_id, text = (plugin.env_id, plugin.description) if hasattr(plugin, "env_id") else plugin
        print(f"{env_id:<24} {text} (installed plugin)")
    for family in families():
        members = family.member_names()
        print(f"{family.pattern:<24} {family.description} ({len(members)} tasks):")
        print(
            textwrap.fill(
                ", ".join(members), width=100, initial_indent=" " * 25, subsequent_indent=" " * 25
            )
        )
    return 0
