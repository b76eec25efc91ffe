"""Fixtures of the policy-server tests: a scripted calculator policy and servers around it."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the policy server needs the 'serve' extra (fastapi)")
pytest.importorskip("uvicorn", reason="the policy server needs the 'serve' extra (uvicorn)")
pytest.importorskip("openai", reason="the tests drive the server with the real openai client")

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "69 * 64"}}</tool_call>'
ANSWER = "<answer>4416</answer>"
SYSTEM = "You solve arithmetic with the calculator."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def calculator_script(index: int, context: str) -> str:
    """A tool call first; the answer once a tool result is in the context."""
    return ANSWER if "<|im_start|>tool" in context else CALL


@pytest.fixture
def scripted_server(chat):
    from agentic_rl.agents.recorder import Budget
    from agentic_rl.agents.server import PolicyServer
    from agentic_rl.policy.scripted import ScriptedPolicy

    server = PolicyServer(
        ScriptedPolicy(chat, calculator_script), chat, Budget(64, 2048), temperature=1.0
    ).start()
    yield server
    server.close()
