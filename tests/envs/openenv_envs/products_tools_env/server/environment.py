"""``ProductsToolsEnvironment``: multiply two 2-3 digit numbers with the ``multiply`` tool, ``submit`` the product.

The seed picks the factors (``random.Random(seed)``). ``submit`` ends the episode (reward 1 for
the right product, else 0); any other call leaves it running with reward 0.
"""

import random

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Observation, State

from products_tools_env.models import ProductsToolsObservation


class ProductsToolsEnvironment(MCPEnvironment):
    """One multiplication question per episode, answered through MCP tools."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("products-tools")
        env = self

        @mcp.tool()
        def multiply(a: int, b: int) -> int:
            """Multiply two integers."""
            return a * b

        @mcp.tool()
        def submit(answer: int) -> str:
            """Submit the final answer; this ends the episode."""
            env._submitted = answer
            return f"submitted {answer}"

        super().__init__(mcp)
        self._state = State(episode_id="", step_count=0)
        self._answer, self._submitted = 0, None

    def reset(self, seed=None, episode_id=None, **kwargs) -> ProductsToolsObservation:
        """Start the task of ``seed``."""
        rng = random.Random(seed)
        a, b = rng.randint(11, 999), rng.randint(11, 99)
        self._answer, self._submitted = a * b, None
        self._state = State(episode_id=episode_id or "", step_count=0)
        prompt = f"What is {a} * {b}? Compute it with the multiply tool, then call submit with it."
        return ProductsToolsObservation(prompt=prompt, done=False, reward=0.0)

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        """OpenEnv's MCP routing, then ``done``/``reward`` once ``submit`` was called."""
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction):
            self._state.step_count += 1
            if action.tool_name == "submit" and self._submitted is not None:
                observation.done = True
                observation.reward = float(self._submitted == self._answer)
            else:
                observation.reward = 0.0
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        """Non-MCP actions: none exist here."""
        raise ValueError(
            f"products_tools_env acts through MCP tools only, got {type(action).__name__}"
        )

    @property
    def state(self) -> State:
        """The episode id and step count."""
        return self._state
