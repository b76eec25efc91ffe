"""``products_env``: a small OpenEnv environment for the adapter's tests, written in OpenEnv's own API.

openenv-core 0.3.0 ships no runnable environment (only the ``openenv init`` template), so this
package is a real OpenEnv env laid out as ``openenv init`` lays one out: ``models.py`` (the
pydantic Action and Observation), ``server/environment.py`` (an ``Environment`` subclass) and
``server/app.py`` (``create_app``: the FastAPI server with OpenEnv's ``/ws``, ``/reset``,
``/step``, ``/schema`` and ``/health`` routes). The adapter starts it with uvicorn and talks
to it with OpenEnv's ``GenericEnvClient``; nothing of it is imported by agentic-rl.
"""
