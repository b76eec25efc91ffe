"""The FastAPI routes of :class:`~agentic_rl.agents.server.PolicyServer` (one function per route;
the logic lives in the server). Every error is answered in the OpenAI error shape.

Imported only when a server starts (FastAPI and uvicorn are the ``serve`` extra). No
``from __future__ import annotations`` here: FastAPI reads the route parameters' annotations.
"""

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from agentic_rl.agents.api import ApiError, error_body

__all__ = ["build_app"]

log = logging.getLogger(__name__)


def build_app(server: Any):
    """The ASGI app serving ``server`` (a :class:`~agentic_rl.agents.server.PolicyServer`)."""
    from agentic_rl.agents.server import error_response_body

    app = FastAPI(title="agentic-rl policy server", docs_url=None, redoc_url=None)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        return JSONResponse(error_response_body(exc.status_code, str(exc.detail)), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return JSONResponse(error_body(str(exc.errors())), status_code=400)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception):
        log.exception("the policy server failed on %s", request.url.path)
        body = error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error")
        return JSONResponse(body, status_code=500)

    async def _json(request: Request) -> Any:
        try:
            return await request.json()
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await server.chat_completion(await _json(request), None)

    @app.post("/rollouts/{rollout_id}/v1/chat/completions")
    async def rollout_chat(rollout_id: str, request: Request):
        return await server.chat_completion(await _json(request), rollout_id)

    def models() -> dict[str, Any]:
        model = {"id": server.model_name, "object": "model", "created": 0, "owned_by": "agentic-rl"}
        return {"object": "list", "data": [model]}

    app.get("/v1/models")(models)
    app.get("/rollouts/{rollout_id}/v1/models")(lambda rollout_id: models())

    @app.post("/rollouts/{rollout_id}/reward")
    async def reward(rollout_id: str, request: Request):
        return server.post_reward(rollout_id, await _json(request))

    @app.get("/rollouts/{rollout_id}")
    async def state(rollout_id: str):
        return server.rollout_state(rollout_id)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app
