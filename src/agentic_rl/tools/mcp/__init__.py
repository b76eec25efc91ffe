"""MCP tools: the tools of Model Context Protocol servers (stdio or streamable HTTP) as agent tools,
run through the tool executor (:mod:`~agentic_rl.tools.mcp.tools`), one server session per episode
(:mod:`~agentic_rl.tools.mcp.session`), stdio servers in the bubblewrap sandbox
(:mod:`~agentic_rl.tools.mcp.sandboxed`), configured by :class:`~agentic_rl.tools.mcp.spec.McpServerSpec`.
Needs the ``mcp`` extra (``pip install 'agentic-rl[mcp]'``: fastmcp); nothing here imports it
before a server is used."""

from agentic_rl.tools.mcp.session import McpError, McpServerError, McpTimeoutError, McpToolError
from agentic_rl.tools.mcp.spec import McpServerSpec
from agentic_rl.tools.mcp.tools import McpTools, discover_tools, mcp_unavailable_reason

__all__ = [
    "McpError",
    "McpServerError",
    "McpServerSpec",
    "McpTimeoutError",
    "McpToolError",
    "McpTools",
    "discover_tools",
    "mcp_unavailable_reason",
]
