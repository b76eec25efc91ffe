"""The OpenAI chat-completions wire format, as the policy server reads and writes it.

Requests (``POST …/v1/chat/completions``) are parsed by :func:`parse_request` into a
:class:`ChatRequest`; anything the server cannot honour is an :class:`ApiError`, which the server
answers in the API's error shape (``{"error": {"message", "type", "param", "code"}}``) with a 4xx
status, before any state changes. Supported: ``messages`` (roles ``system``/``developer``,
``user``, ``assistant`` with ``tool_calls``, ``tool``; content as a string or a list of text
parts), ``tools`` (``type: "function"``), ``tool_choice`` (``auto``, ``none``, ``required`` or a
named function), ``n``, ``temperature``, ``max_tokens``/``max_completion_tokens``, ``seed``,
``logprobs``, ``top_p`` = 1 (the trainer scores the plain temperature softmax), ``stream`` =
false, ``return_token_ids`` (vLLM's extension: the prompt's and each choice's token ids).
Image or audio parts, ``stop`` sequences, penalties, ``logit_bias`` and ``response_format`` are
refused with a message naming the parameter.

Replies are built by :func:`choice_message`: the reply's reasoning (a thinking template's
``<think>…</think>``) goes to ``reasoning_content``, its tool calls (parsed in the model's tool
format, :mod:`agentic_rl.tools.definition.formats`) to ``tool_calls`` with their arguments as a
JSON string, and the prose before the first call to ``content`` (the whole text when a call was
malformed, so the agent sees what the model wrote).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agentic_rl.types import ToolCall, ToolCallError

__all__ = [
    "ApiError",
    "ApiToolCall",
    "ChatRequest",
    "choice_message",
    "completion_body",
    "error_body",
    "parse_request",
]

#: request keys that are accepted and ignored (they do not change what is sampled)
_IGNORED = {
    "model",
    "user",
    "metadata",
    "store",
    "parallel_tool_calls",
    "stream_options",
    "service_tier",
    "top_logprobs",
    "reasoning_effort",
    "prompt_cache_key",
    "safety_identifier",
    "extra_body",
}
_KNOWN = _IGNORED | {
    "messages",
    "tools",
    "tool_choice",
    "n",
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "logprobs",
    "top_p",
    "stream",
    "return_token_ids",
    "stop",
    "frequency_penalty",
    "presence_penalty",
}
#: most choices one request may ask for
MAX_N = 64


class ApiError(Exception):
    """A request the server answers with an error (nothing recorded, nothing changed).

    Attributes:
        status: the HTTP status (400 bad request, 404 unknown rollout, 409 closed rollout, …).
        message: what is wrong, naming the parameter.
        type: the API's error type (``invalid_request_error``, ``not_found_error``, …).
        param: the request parameter at fault, or None.
        code: a machine-readable code (``context_length_exceeded``, …), or None.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return error_body(self.message, self.type, self.param, self.code)


def error_body(
    message: str, type: str = "invalid_request_error", param: str | None = None, code=None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``, the API's error shape."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(frozen=True)
class ApiToolCall:
    """A tool call as it travels in the API: ``id``, function ``name`` and ``arguments`` (the
    decoded JSON object; the wire carries it as a string)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ApiMessage:
    """One request message: ``role`` (``developer`` read as ``system``), its text, and for an
    assistant message its tool calls, for a tool message the id of the call it answers."""

    role: str
    content: str
    tool_calls: tuple[ApiToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """A parsed chat-completions request (module docstring).

    Attributes:
        messages: the conversation, in order (at least one).
        tools: the function schemas (``{"name", "description", "parameters"}``), in order.
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` or the name of a function.
        n: choices to sample (1 … 64). temperature: None = the server's; 0 = greedy.
        max_tokens: most tokens per choice (None = the server's budget).
        seed: the request's sampling seed (None: the server chooses).
        logprobs: return each sampled token's logprob. return_token_ids: return token ids.
    """

    messages: tuple[ApiMessage, ...]
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"
    n: int = 1
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    logprobs: bool = False
    return_token_ids: bool = False


def _text(content: Any, param: str) -> str:
    """The text of a message's content: a string, null or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "input_text", "output_text") or not isinstance(
                part.get("text"), str
            ):
                raise _bad(
                    f"{param}[{i}]: only text content parts are supported, got {kind!r}", param
                )
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{param} must be a string, null or a list of text parts", param)


def _arguments(raw: Any, param: str) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw  # kept as written: the agent's own (malformed) call
    if isinstance(raw, dict):
        return raw
    raise _bad(f"{param} must be a JSON string", param)


def _tool_calls(raw: Any, param: str) -> tuple[ApiToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad(f"{param} must be a list", param)
    calls = []
    for i, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(f"{param}[{i}] needs a function with a name", f"{param}[{i}]")
        args = _arguments(fn.get("arguments", "{}"), f"{param}[{i}].function.arguments")
        calls.append(ApiToolCall(str(call.get("id") or ""), fn["name"], args))
    return tuple(calls)


def _message(raw: Any, i: int) -> ApiMessage:
    param = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise _bad(f"{param} must be an object", param)
    role = raw.get("role")
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise _bad(
            f"{param}.role must be system, developer, user, assistant or tool, got {role!r}",
            f"{param}.role",
        )
    content = _text(raw.get("content"), f"{param}.content")
    if role == "assistant":
        return ApiMessage(role, content, _tool_calls(raw.get("tool_calls"), f"{param}.tool_calls"))
    if role == "tool":
        return ApiMessage(role, content, tool_call_id=str(raw.get("tool_call_id") or ""))
    return ApiMessage(role, content)


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad("tools must be a list", "tools")
    out = []
    for i, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _bad(f"tools[{i}]: only type 'function' is supported", f"tools[{i}]")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"tools[{i}].function needs a name", f"tools[{i}].function")
        schema: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description") is not None:
            schema["description"] = str(fn["description"])
        if fn.get("parameters") is not None:
            if not isinstance(fn["parameters"], dict):
                raise _bad(f"tools[{i}].function.parameters must be an object", f"tools[{i}]")
            schema["parameters"] = fn["parameters"]
        out.append(schema)
    return tuple(out)


def _tool_choice(raw: Any, tools: tuple[dict[str, Any], ...]) -> str:
    if raw is None:
        return "auto"
    if raw in ("auto", "none", "required"):
        if raw == "required" and not tools:
            raise _bad("tool_choice 'required' needs tools", "tool_choice")
        return raw
    name = raw.get("function", {}).get("name") if isinstance(raw, dict) else None
    if not isinstance(name, str):
        raise _bad(
            "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', "
            "'function': {'name': ...}}",
            "tool_choice",
        )
    if name not in {t["name"] for t in tools}:
        raise _bad(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
    return name


def _number(body: dict, key: str, kind: type, low: float, high: float) -> Any:
    value = body.get(key)
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or not math.isfinite(float(value)) or not low <= value <= high:
        raise _bad(f"{key} must be a {kind.__name__} in [{low}, {high}], got {value!r}", key)
    return kind(value)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise _bad(f"unsupported parameter(s): {', '.join(unknown)}", unknown[0])
    if body.get("stream"):
        raise _bad(
            "stream = true is not supported by this server: call with stream = false "
            "(the recorded reply is returned whole)",
            "stream",
        )
    if body.get("stop") not in (None, [], ""):
        raise _bad("stop sequences are not supported (the reply ends at end of turn)", "stop")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise _bad(f"{key} is not supported: the trainer scores the plain softmax", key)
    top_p = body.get("top_p")
    if top_p is not None and top_p != 1:
        raise _bad(
            f"top_p must be 1 (got {top_p!r}): the trainer scores the plain temperature softmax",
            "top_p",
        )


def parse_request(body: Any) -> ChatRequest:
    """The :class:`ChatRequest` of a decoded JSON body.

    Raises:
        ApiError: 400 for a malformed or unsupported request (the message names the parameter).
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    _refuse_unsupported(body)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _bad("messages must be a non-empty list", "messages")
    messages = tuple(_message(m, i) for i, m in enumerate(raw))
    tools = _tools(body.get("tools"))
    n = _number(body, "n", int, 1, MAX_N)
    max_tokens = _number(body, "max_completion_tokens", int, 1, 2**31)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", int, 1, 2**31)
    seed = _number(body, "seed", int, -(2**63), 2**63 - 1)
    return ChatRequest(
        messages,
        tools,
        _tool_choice(body.get("tool_choice"), tools),
        1 if n is None else n,
        _number(body, "temperature", float, 0.0, 2.0),
        max_tokens,
        seed,
        bool(body.get("logprobs")),
        bool(body.get("return_token_ids")),
    )


#: where the prose of a reply ends, per tool format (calls written after it)
_CALL_MARKERS = {
    "hermes": "<tool_call>",
    "qwen3_coder": "<tool_call>",
    "mistral": "[TOOL_CALLS]",
    "gemma": "```tool_code",
}


def choice_message(
    text: str,
    reasoning: str,
    calls: tuple[ToolCall, ...],
    errors: tuple[ToolCallError, ...],
    tool_format: str,
) -> dict[str, Any]:
    """The ``message`` of one choice (module docstring).

    Args:
        text: the reply's content (after any reasoning), end-of-turn token removed.
        reasoning: the reply's reasoning ("" when none).
        calls, errors: the tool calls parsed from ``text``.
        tool_format: the model's tool format name.
    """
    content: str | None = text
    if calls and not errors:
        marker = _CALL_MARKERS.get(tool_format)
        at = text.find(marker) if marker else 0
        content = text[: max(at, 0)].strip() or None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in calls
        ]
    return message


def completion_body(
    model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The ``chat.completion`` object of a response."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
