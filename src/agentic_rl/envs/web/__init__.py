"""Web environments in a real headless browser: the MiniWoB++ tasks (``miniwob/<task>-v0``,
:mod:`agentic_rl.envs.web.miniwob`), on the browser action layer of :mod:`agentic_rl.tools.browser`."""
