"""``products_tools_env``: an OpenEnv MCP environment (RFC 003 tools) for the adapter's tests.

Written in OpenEnv's own API like ``products_env``, but the agent acts through MCP tools only
(``MCPEnvironment``: ``ListToolsAction``/``CallToolAction`` on ``step``): ``multiply(a, b)``
computes a product, ``submit(answer)`` ends the episode with reward 1 when the answer is the
product asked for, else 0.
"""
