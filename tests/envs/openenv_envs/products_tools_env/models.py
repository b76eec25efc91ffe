"""The reset observation of ``products_tools_env`` (tool calls answer with OpenEnv's own MCP types)."""

from openenv.core.env_server.types import Observation
from pydantic import Field


class ProductsToolsObservation(Observation):
    """The question shown on reset."""

    prompt: str = Field(default="", description="text shown to the agent")
