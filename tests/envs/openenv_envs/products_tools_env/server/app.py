"""The FastAPI app of ``products_tools_env``: ``uvicorn products_tools_env.server.app:app``."""

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction

from products_tools_env.models import ProductsToolsObservation
from products_tools_env.server.environment import ProductsToolsEnvironment

app = create_app(
    ProductsToolsEnvironment,
    CallToolAction,
    ProductsToolsObservation,
    env_name="products_tools_env",
    max_concurrent_envs=4,
)
