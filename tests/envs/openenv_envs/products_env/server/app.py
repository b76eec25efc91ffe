"""The FastAPI app of ``products_env`` (OpenEnv's ``create_app``): ``uvicorn products_env.server.app:app``."""

from openenv.core.env_server.http_server import create_app

from products_env.models import ProductsAction, ProductsObservation
from products_env.server.environment import ProductsEnvironment

app = create_app(
    ProductsEnvironment,
    ProductsAction,
    ProductsObservation,
    env_name="products_env",
    max_concurrent_envs=4,
)
