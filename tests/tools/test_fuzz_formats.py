"""The parser fuzz of issue 19, for every tool-call format of issue 35.

Each format gets 10,000 seeded cases: its own call syntax, good and broken (the JSON values and
atoms of :mod:`tests.tools.test_fuzz`: lone surrogates raw and escaped, NUL, huge numbers, deep
nesting, special tokens), mutated, mixed with prose and with the other formats' markers. The claim:
no case raises, none takes over 1 s of CPU, every call and error is valid text whose arguments JSON
can hold, and the ids interleave calls and errors in message order. The Hermes parser keeps its own
fuzz (tests/tools/test_fuzz.py). A failing case prints its seed: ``_case(name, Random(seed))``.
"""

from __future__ import annotations

import json
import random

import pytest

from agentic_rl.tools.definition.formats import get_tool_format
from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.types import ToolCall, ToolCallError
from tests.tools.test_fuzz import ATOMS, MAX_CASE_CPU_S, NAMES, _encodable, _timed, _value

CASES = 10_000
MARKERS = [
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|python_tag|>",
    "```tool_code",
    "```",
    "```tool_code\n",
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    ">",
    "<|python_start|>",
    "<|python_end|>",
    ";",
    "(",
    ")",
    "=",
    "**",
    "lambda: 0",
    "__import__('os')",
    "'",
    "'''",
    "#",
    "\\\n",
]


def _py_value(rng: random.Random, depth: int = 0) -> str:
    """Python-literal-ish text: mostly valid, sometimes not."""
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice(
            [
                repr(rng.choice(ATOMS)),
                str(rng.randint(-(10**6), 10**6)),
                "9" * rng.choice([10, 4300, 4301]),
                "1e400",
                "None",
                "null",
                "true",
                "x",
                "f(1)",
                rng.choice(ATOMS),
            ]
        )
    if roll < 0.6:
        return "[" + ", ".join(_py_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    if roll < 0.65:
        n = rng.choice([50, 250, 3000])
        return rng.choice(["(" * n + ")" * n, "[" * n + "]" * n, "{'a': " * n])
    items = ", ".join(
        f"{rng.choice(['1', repr('k'), '(1, 2)', 'x'])}: {_py_value(rng, depth + 1)}"
        for _ in range(rng.randint(0, 3))
    )
    return "{" + items + rng.choice(["}", "}", ""])


def _py_call(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"calculator(expression={rng.choice(['6*7', '2+2', chr(0xD800), 'é'])!r})"
    name = rng.choice(NAMES + ["a.b", "1x", "f"]) or "f"
    args = ", ".join(
        rng.choice(
            [f"{rng.choice(['expression', 'seed', 'x', 'é'])}={_py_value(rng)}", _py_value(rng)]
        )
        for _ in range(rng.randint(0, 3))
    )
    return f"{name}({args}{rng.choice([')', ')', '', '))'])}"


def _json_call(rng: random.Random, key: str) -> str:
    if rng.random() < 0.5:
        return json.dumps({"name": "calculator", key: {"expression": rng.choice(["6*7", "é"])}})
    name = rng.choice(NAMES)
    body = f'{{"name": "{name}", "{key}": {_value(rng)}}}'
    return body if rng.random() < 0.85 else body[: rng.randrange(len(body) + 1)]


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(chars) + 1)
        op = rng.random()
        if op < 0.4:
            chars.insert(i, rng.choice(ATOMS + MARKERS))
        elif op < 0.7 and i < len(chars):
            del chars[i]
        elif i < len(chars):
            chars[i] = rng.choice(ATOMS + MARKERS)
    return "".join(chars)


def _calls(name: str, rng: random.Random) -> str:
    n = rng.randint(1, 3)
    if name == "llama3_json":
        sep = rng.choice(["; ", ";", " ", "\n", " junk "])
        body = sep.join(_json_call(rng, rng.choice(["parameters", "arguments"])) for _ in range(n))
        return rng.choice(["", "<|python_tag|>", " "]) + body
    if name == "mistral":
        if rng.random() < 0.5:
            items = ", ".join(_json_call(rng, "arguments") for _ in range(n))
            return f"[TOOL_CALLS][{items}{rng.choice([']', ']', ''])}"
        return "".join(
            f"[TOOL_CALLS]{rng.choice(NAMES)}{rng.choice(['[ARGS]', '', '[ARGS] '])}"
            f"{rng.choice([_value(rng), '{}', json.dumps({'expression': '6*7'})])}"
            for _ in range(n)
        )
    if name == "qwen3_coder":
        return "".join(_xml_call(rng) for _ in range(n))
    if name == "pythonic":
        body = ", ".join(_py_call(rng) for _ in range(n))
        return f"{rng.choice(['', '<|python_start|>'])}[{body}{rng.choice([']', ']', ''])}"
    blocks = [
        f"```tool_code\n{chr(10).join(_py_call(rng) for _ in range(rng.randint(1, 2)))}\n"
        f"{rng.choice(['```', '```', ''])}"
        for _ in range(n)
    ]
    return rng.choice(["", "Let me check.\n"]) + "\n".join(blocks)


def _xml_call(rng: random.Random) -> str:
    params = "".join(
        f"<parameter={rng.choice(['expression', 'seed', 'x', ''])}>\n"
        f"{rng.choice([_value(rng), '6*7', rng.choice(ATOMS)])}\n"
        f"{rng.choice(['</parameter>', '</parameter>', ''])}\n"
        for _ in range(rng.randint(0, 3))
    )
    name = rng.choice(NAMES) if rng.random() < 0.5 else "calculator"
    close = rng.choice(["</function>\n</tool_call>"] * 4 + ["", "</function>", "</tool_call>"])
    return f"<tool_call>\n<function={name}>\n{params}{close}"


def _case(name: str, rng: random.Random) -> str:
    """One model message for format ``name``."""
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(MARKERS + ["{", "[", "[TOOL_CALLS][", "[f(a="]) * rng.randint(1, 5000)
    if roll < 0.08:
        return "".join(rng.choices(ATOMS + MARKERS, k=rng.randint(1, 60)))
    text = _calls(name, rng)
    if rng.random() < 0.3:
        text = _mutate(rng, text)
    if rng.random() < 0.15:
        text = rng.choice(["The answer is 4. ", rng.choice(ATOMS)]) + text
    return text


@pytest.mark.parametrize("name", ["llama3_json", "mistral", "pythonic", "gemma", "qwen3_coder"])
def test_fuzz_format_parser(name):
    parse = get_tool_format(name).parse
    rng = random.Random(35)
    worst, found = 0.0, 0
    for case in range(CASES):
        seed = rng.randrange(2**32)
        text = _case(name, random.Random(seed))
        (calls, errors), seconds = _timed(parse, text, case % 7)
        worst = max(worst, seconds)
        assert seconds < MAX_CASE_CPU_S, f"seed {seed}: {seconds:.2f} s"
        assert all(isinstance(c, ToolCall) for c in calls), f"seed {seed}"
        assert all(isinstance(e, ToolCallError) for e in errors), f"seed {seed}"
        for c in calls:
            assert c.name.strip() and isinstance(c.arguments, dict), f"seed {seed}"
            assert _encodable(c.name) and _encodable(c.raw), f"seed {seed}"
            assert _encodable(json.dumps(c.arguments, ensure_ascii=False)), f"seed {seed}"
        assert all(_encodable(e.raw) and _encodable(e.message) for e in errors), f"seed {seed}"
        order = in_call_order(calls, errors, turn_index=case % 7)
        assert [cid for cid, _ in order] == [
            f"call_{case % 7}_{k}" for k in range(len(calls) + len(errors))
        ], f"seed {seed}"
        found += len(calls)
    assert found > CASES // 10  # the generator does produce good calls
    print(f"{name}: {CASES} cases, {found} calls, slowest {worst * 1000:.1f} ms CPU")
