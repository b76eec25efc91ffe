"""Tests for agentic_rl.tools.definition.prompt and the tools package's layer rule."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import agentic_rl.tools
from agentic_rl.tools import calculator, render_tool_system_prompt
from agentic_rl.tools.definition.prompt import tool_signature


def test_render_tool_system_prompt():
    assert render_tool_system_prompt("Solve it.", []) == "Solve it."
    prompt = render_tool_system_prompt("Solve it.", [calculator.schema()])
    lines = prompt.split("\n")
    assert lines[0] == "Solve it."
    assert lines[1] == ""
    assert lines[2] == (
        'Tools (call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>):'
    )
    assert lines[3].startswith('{"name": "calculator", "description": "Evaluate')
    assert len(lines) == 4
    with pytest.raises(TypeError, match="must be dicts"):
        render_tool_system_prompt("x", [calculator])  # type: ignore[list-item]


def test_signature_style_lists_typed_signatures_with_the_same_header():
    scroll = {
        "name": "scroll",
        "description": "Scroll the page.",
        "parameters": {
            "type": "object",
            "properties": {
                "ref": {"type": "integer", "description": "an element"},
                "direction": {"type": "string", "enum": ["up", "down"]},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "x": {"type": ["number", "null"]},
            },
            "required": ["direction"],
        },
    }
    assert tool_signature(scroll) == (
        'scroll(direction: "up" | "down", ref?: integer, ids?: array of integer, '
        "x?: number | null) - Scroll the page."
    )
    assert tool_signature({"name": "now", "parameters": {}}) == "now()"
    prompt = render_tool_system_prompt("Solve it.", [calculator.schema(), scroll], "signature")
    lines = prompt.split("\n")
    assert lines[2] == render_tool_system_prompt("x", [scroll]).split("\n")[2]  # the header
    assert lines[3].startswith("calculator(expression: string) - Evaluate")
    assert lines[4].startswith("scroll(direction:") and len(lines) == 5
    assert len(prompt) < len(render_tool_system_prompt("Solve it.", [calculator.schema(), scroll]))
    with pytest.raises(ValueError, match="tool prompt style"):
        render_tool_system_prompt("x", [scroll], "yaml")
    with pytest.raises(TypeError, match="must be dicts"):
        tool_signature("scroll")  # type: ignore[arg-type]


def test_each_tool_is_one_json_line():
    schemas = [calculator.schema(), {"name": "échec", "description": "ü", "parameters": {}}]
    lines = render_tool_system_prompt("x", schemas).split("\n")[3:]
    assert [json.loads(line) for line in lines] == schemas
    assert "échec" in lines[1]  # non-ASCII kept, not \u-escaped


def test_tools_package_imports_only_stdlib_and_types():
    allowed = set(sys.stdlib_module_names) | {"agentic_rl"}
    package = Path(agentic_rl.tools.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, (path.name, name)
                if name.startswith("agentic_rl."):
                    assert name.split(".")[1] in ("types", "tools"), (path.name, name)


def test_importing_tools_does_not_import_torch():
    code = "import sys, agentic_rl.tools; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
