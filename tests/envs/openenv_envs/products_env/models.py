"""Action and observation of ``products_env`` (OpenEnv pydantic models)."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class ProductsAction(Action):
    """The agent's reply: free text whose last integer is its answer."""

    message: str = Field(..., description="the reply; its last integer is the answer")


class ProductsObservation(Observation):
    """What the agent reads: the question, or feedback on its last answer."""

    prompt: str = Field(default="", description="text shown to the agent")
    tries_left: int = Field(default=0, description="answers the agent may still give")
