"""The ChatML fast path with a tool format (issue 35): same tokens as before with Hermes, the
prompt's call syntax, the parser and the demonstrations follow another format when one is set."""

from __future__ import annotations

import json

from agentic_rl.policy.chat import IM_END, ChatFormat
from agentic_rl.tools import calculator, render_tool_system_prompt
from agentic_rl.tools.definition.formats import get_tool_format
from agentic_rl.types import Message

TOOLS = [calculator.schema()]
SYSTEM = Message("system", render_tool_system_prompt("Solve it.", TOOLS))
HERMES_CALL = (
    "<tool_call>"
    + json.dumps({"name": "calculator", "arguments": {"expression": "6*7"}})
    + "</tool_call>"
)


def test_hermes_is_the_default_and_changes_nothing():
    chat = ChatFormat(None)
    messages = [SYSTEM, Message("user", "6*7?")]
    assert chat.tool_format.name == "hermes"
    assert chat.render_prompt(messages, TOOLS) == chat.render_prompt(messages)
    assert chat.render_assistant_reply(HERMES_CALL) == HERMES_CALL + IM_END
    calls, errors = chat.parse_tool_calls(HERMES_CALL, 3)
    assert [c.id for c in calls] == ["call_3_0"] and errors == ()


def test_next_context_is_the_chatml_continuation():
    chat = ChatFormat(None)
    conversation = [SYSTEM, Message("user", "q"), Message("assistant", "a"), Message("tool", "42")]
    expected = chat.render_continuation([Message("tool", "42")], reply_closed=True)
    assert chat.next_context(conversation, "prompt a" + IM_END) == expected
    assert chat.next_context(conversation, "prompt a") == IM_END + expected  # reply not closed


def test_another_tool_format_rewrites_the_prompt_the_parser_and_the_demonstrations():
    chat = ChatFormat(None, get_tool_format("pythonic"))
    prompt = chat.render_prompt([SYSTEM, Message("user", "6*7?")], TOOLS)
    assert "Tools (call one with [NAME(arg=value, ...)] as the whole reply):" in prompt
    assert "<tool_call>" not in prompt
    reply = chat.render_assistant_reply(HERMES_CALL)
    assert reply == "[calculator(expression='6*7')]" + IM_END
    calls, _ = chat.parse_tool_calls(reply.removesuffix(IM_END), 0)
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "6*7"})]
    custom = Message("system", "My own prompt: call tools as you like.")
    assert "My own prompt" in chat.render_prompt([custom, Message("user", "q")], TOOLS)
