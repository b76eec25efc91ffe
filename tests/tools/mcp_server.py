"""A small, real MCP server (fastmcp) that the MCP tests start: stdio by default, or streamable HTTP.

Tools:

- ``add(a, b)``: a + b (read-only, annotated so);
- ``write_note(name, text)``: writes ``text`` to ``<notes dir>/<name>.txt`` (a side effect);
- ``sleep(seconds)``: sleeps, then says so (to test a hanging server);
- ``crash()``: the server process exits at once with status 3 (to test a dying server);
- ``fail(message)``: raises, so the server answers with an MCP tool error.

Every call is appended to the calls log (one JSON line ``{"tool", "arguments", "pid"}``) *before*
the tool does anything, so a test can prove that a denied call never reached the server.

Usage::

    python mcp_server.py --calls CALLS.jsonl --notes DIR            # stdio
    python mcp_server.py --calls CALLS.jsonl --notes DIR --port N   # streamable HTTP on 127.0.0.1:N/mcp
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from fastmcp import FastMCP
from mcp.types import ToolAnnotations

ARGS = argparse.Namespace()
mcp = FastMCP("agentic-rl-test-server")


def _record(tool: str, arguments: dict) -> None:
    with open(ARGS.calls, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()}) + "\n")


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    _record("add", {"a": a, "b": b})
    return a + b


@mcp.tool(
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
)
def write_note(name: str, text: str) -> str:
    """Write a note to the notes directory."""
    _record("write_note", {"name": name, "text": text})
    path = Path(ARGS.notes) / f"{name}.txt"
    path.write_text(text, encoding="utf-8")
    return f"wrote {len(text)} chars to {path.name}"


@mcp.tool
def sleep(seconds: float) -> str:
    """Sleep for a number of seconds."""
    _record("sleep", {"seconds": seconds})
    time.sleep(seconds)
    return f"slept {seconds} s"


@mcp.tool
def crash() -> str:
    """Exit the server process at once."""
    _record("crash", {})
    os._exit(3)


@mcp.tool
def fail(message: str) -> str:
    """Raise an error with this message."""
    _record("fail", {"message": message})
    raise ValueError(message)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", required=True)
    parser.add_argument("--notes", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.parse_args(namespace=ARGS)
    if ARGS.port:
        mcp.run(transport="http", host="127.0.0.1", port=ARGS.port, show_banner=False)
    else:
        mcp.run(show_banner=False)


if __name__ == "__main__":
    main()
