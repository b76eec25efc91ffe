"""``vf_dialog``: vf_products' tasks played through a multi-turn ``vf.Env`` of their own.

The adapter supports single-turn tasksets only; this package is the test that it refuses one
with its own ``Env.run`` (a dialogue verifiers drives through its harness programs) by name.
"""

import verifiers.v1 as vf
from vf_products import ProductsTaskset


class DialogEnvConfig(vf.EnvConfig):
    """One seat, the player."""

    player: vf.AgentConfig = vf.AgentConfig()


class DialogEnv(vf.Env[DialogEnvConfig]):
    """Asks twice: the player's first reply is answered with "Are you sure?"."""

    async def run(self, task, agents):
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            if not segment.terminated:
                await interaction.turn("Are you sure?")


__all__ = ["DialogEnv", "ProductsTaskset"]
