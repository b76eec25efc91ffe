"""Tool-call formats by name (issue 35): each format's parser, the registry, auto-detection and the
rewriting of Hermes demonstrations."""

from __future__ import annotations

import gc
import json
import time

import pytest

from agentic_rl.tools import calculator, execute_tool_calls
from agentic_rl.tools.definition.formats import (
    TOOL_FORMATS,
    convert_hermes_reply,
    detect_tool_format,
    get_tool_format,
)
from agentic_rl.tools.definition.json_calls import parse_llama3_json, parse_mistral
from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.tools.definition.pythonic_calls import parse_gemma, parse_pythonic
from agentic_rl.tools.definition.xml_calls import parse_qwen3_coder
from agentic_rl.types import ToolCall

CALLS = (
    ToolCall("calculator", {"expression": "6*7"}),
    ToolCall("search", {"query": 'é "quoted" \\ \n', "k": 3, "flags": [True, None, 1.5]}),
)


@pytest.mark.parametrize("name", list(TOOL_FORMATS))
def test_written_calls_parse_back_with_ids_in_order(name):
    fmt = get_tool_format(name)
    calls, errors = fmt.parse(fmt.write_calls(CALLS), 5)
    assert errors == ()
    assert [(c.name, c.arguments, c.id) for c in calls] == [
        ("calculator", {"expression": "6*7"}, "call_5_0"),
        ("search", CALLS[1].arguments, "call_5_1"),
    ]
    assert all(c.raw for c in calls)


@pytest.mark.parametrize("name", list(TOOL_FORMATS))
def test_a_plain_answer_has_no_calls(name):
    assert get_tool_format(name).parse("The answer is <answer>42</answer>.", 0) == ((), ())


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        (
            "llama3_json",
            '{"name": "calculator", "parameters": {"expression": "6*7"}}; {"name": 3}',
            "non-empty string",
        ),
        (
            "mistral",
            '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "6*7"}}, [1]]',
            "JSON object",
        ),
        ("pythonic", '[calculator(expression="6*7"), calculator("6*7")]', "by name"),
        (
            "gemma",
            '```tool_code\ncalculator(expression="6*7")\ncalculator(expression=x)\n```',
            "not a literal",
        ),
        (
            "qwen3_coder",
            "<tool_call>\n<function=calculator>\n<parameter=expression>\n6*7\n</parameter>\n"
            "</function>\n</tool_call><tool_call><function=calculator></tool_call>",
            "missing closing </function>",
        ),
    ],
)
def test_a_bad_call_is_an_error_in_its_own_place(name, text, fragment):
    calls, errors = get_tool_format(name).parse(text, 2)
    assert [c.id for c in calls] == ["call_2_0"] and calls[0].arguments == {"expression": "6*7"}
    assert len(errors) == 1 and fragment in errors[0].message
    order = in_call_order(calls, errors)
    assert [(cid, type(i).__name__) for cid, i in order] == [
        ("call_2_0", "ToolCall"),
        ("call_2_1", "ToolCallError"),
    ]
    results = execute_tool_calls(calls, errors, {"calculator": calculator})
    assert [r.call_id for r in results] == ["call_2_0", "call_2_1"]
    assert results[0].content == "42" and not results[1].ok


def test_llama3_json_needs_the_call_first_and_accepts_the_python_tag():
    assert parse_llama3_json('I will call {"name": "a"}') == ((), ())
    calls, _ = parse_llama3_json('<|python_tag|>{"name": "a", "arguments": {"x": 1}}')
    assert calls[0].arguments == {"x": 1}
    calls, errors = parse_llama3_json('{"name": "a"} and some prose')
    assert calls[0].name == "a" and "unexpected text" in errors[0].message


def test_llama3_json_broken_json_is_one_error_with_the_rest_as_raw():
    calls, errors = parse_llama3_json('{"name": "a"}; {"name": "b", "parameters": {')
    assert [c.name for c in calls] == ["a"]
    assert errors[0].raw == '{"name": "b", "parameters": {' and "invalid JSON" in errors[0].message


def test_mistral_both_generations_and_prose_before():
    calls, errors = parse_mistral(
        'Sure. [TOOL_CALLS]calculator[ARGS]{"expression": "1+1"}[TOOL_CALLS]search{"query": "x"}'
    )
    assert errors == () and [(c.name, c.arguments) for c in calls] == [
        ("calculator", {"expression": "1+1"}),
        ("search", {"query": "x"}),
    ]
    calls, errors = parse_mistral('[TOOL_CALLS]calculator[ARGS]{"expression": "1"} trailing')
    assert calls == () and "unexpected text" in errors[0].message
    assert parse_mistral("[TOOL_CALLS]")[1][0].message.startswith("no arguments object")


def test_pythonic_rejects_what_is_not_data():
    calls, errors = parse_pythonic("[f(a={(1, 2): 3}), g(b=b'x'), h(c=1j), k(d=null, e=true)]")
    assert [(c.name, c.arguments) for c in calls] == [("k", {"d": None, "e": True})]
    assert [e.message for e in errors] == [
        "f: the value of 'a' is not a literal",
        "g: the value of 'b' is not a literal",
        "h: the value of 'c' is not a literal",
    ]
    assert json.dumps(calls[0].arguments)
    _, errors = parse_pythonic("[f(a=1) +]")
    assert errors[0].message.startswith("not valid Python")
    assert parse_pythonic("[" * 10_000)[1][0].message.startswith("not valid Python")


def test_gemma_blocks_anywhere_and_an_unclosed_block():
    text = 'Let me see.\n```tool_code\nsearch(query="a")\n```\nthen\n```tool_code\nsearch(query="b"'
    calls, errors = parse_gemma(text, 1)
    assert [c.arguments for c in calls] == [{"query": "a"}]
    assert (
        errors[0].message.startswith("unclosed block")
        and in_call_order(calls, errors)[1][0] == "call_1_1"
    )


def test_lone_surrogates_become_valid_text_in_every_format():
    for name, text in [
        ("llama3_json", '{"name": "a\\ud800", "parameters": {"x": "\\udfff"}}'),
        ("mistral", '[TOOL_CALLS][{"name": "a\ud800", "arguments": {"x": "\\udfff"}}]'),
        ("pythonic", '[a(x="\ud800")]'),
        ("gemma", '```tool_code\na(x="\udfff")\n```'),
    ]:
        calls, errors = get_tool_format(name).parse(text, 0)
        assert errors == (), name
        json.dumps(calls[0].arguments, ensure_ascii=False).encode("utf-8")
        calls[0].name.encode("utf-8")


def test_qwen3_coder_values_json_or_text_and_repeated_parameters():
    text = (
        "Calling.\n<tool_call>\n<function=search>\n<parameter=query>\nrain in\nParis\n</parameter>\n"
        '<parameter=k>\n3\n</parameter>\n<parameter=opts>\n{"a": [1, "\\ud800"]}\n</parameter>\n'
        "</function>\n</tool_call>"
    )
    (call,), errors = parse_qwen3_coder(text, 4)
    assert errors == () and call.id == "call_4_0"
    assert call.arguments == {"query": "rain in\nParis", "k": 3, "opts": {"a": [1, "\ufffd"]}}
    twice = "<parameter=x>1</parameter><parameter=x>2</parameter>"
    _, errors = parse_qwen3_coder(f"<tool_call><function=a>{twice}</function></tool_call>")
    assert "given twice" in errors[0].message
    prose = "prose<parameter=x>1</parameter>"
    _, errors = parse_qwen3_coder(f"<tool_call><function=a>{prose}</function></tool_call>")
    assert "unexpected text between parameters" in errors[0].message


def test_registry_and_unknown_names():
    assert set(TOOL_FORMATS) == {
        "hermes",
        "llama3_json",
        "mistral",
        "pythonic",
        "gemma",
        "qwen3_coder",
    }
    with pytest.raises(ValueError, match="unknown tool format 'xml'; known: hermes"):
        get_tool_format("xml")


@pytest.mark.parametrize(
    ("template", "name"),
    [
        ("{{ '<tool_call>' }}", "hermes"),
        ("{{ '<tool_call>\\n<function=' }}", "qwen3_coder"),
        ("{{ '[TOOL_CALLS]' }}", "mistral"),
        ("{{ '<|python_tag|>' }}", "llama3_json"),
        ("{{ '<start_of_turn>' }}", "gemma"),
        ("{{ '<|im_start|>' }}", "hermes"),
        (None, "hermes"),
    ],
)
def test_detect_tool_format(template, name):
    assert detect_tool_format(template) == name


def test_hermes_demonstrations_are_rewritten_in_the_models_format():
    hermes = get_tool_format("hermes")
    text = "I'll compute.\n" + hermes.write_calls(CALLS[:1])
    assert convert_hermes_reply(text, hermes) == text
    assert convert_hermes_reply(text, get_tool_format("llama3_json")) == (
        '{"name": "calculator", "parameters": {"expression": "6*7"}}'
    )
    assert convert_hermes_reply(text, get_tool_format("gemma")) == (
        "I'll compute.\n```tool_code\ncalculator(expression='6*7')\n```"
    )
    assert convert_hermes_reply("<answer>42</answer>", get_tool_format("mistral")) == (
        "<answer>42</answer>"
    )
    broken = '<tool_call>{"name": </tool_call>'
    assert convert_hermes_reply(broken, get_tool_format("pythonic")) == broken


def _cpu_seconds(parse, text: str) -> float:
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            start = time.process_time()
            parse(text, 0)
            best = min(best, time.process_time() - start)
    finally:
        if enabled:
            gc.enable()
    return best


@pytest.mark.parametrize(
    ("parse", "unit"),
    [
        (parse_llama3_json, '{"name": "a"}; '),
        (parse_llama3_json, "{" * 50 + "}" * 50 + ";"),
        (parse_mistral, "[TOOL_CALLS]"),
        (parse_mistral, "[TOOL_CALLS]a[ARGS]{"),
        (parse_mistral, '[TOOL_CALLS][{"name": "a"}, '),
        (parse_pythonic, "f(a=1), "),
        (parse_gemma, "```tool_code\n"),
        (parse_gemma, "```tool_code\nf(a=1)\n```"),
        (parse_gemma, "```tool_code\nf(a=[1,\n```"),
        (parse_qwen3_coder, "<tool_call>"),
        (parse_qwen3_coder, "<tool_call><function=a><parameter=x>"),
        (
            parse_qwen3_coder,
            "<tool_call><function=a><parameter=x>[1,</parameter></function></tool_call>",
        ),
    ],
)
def test_adversarial_messages_parse_in_linear_time(parse, unit):
    prefix = "[" if parse is parse_pythonic else ""
    small = _cpu_seconds(parse, prefix + unit * 4_000)
    large = _cpu_seconds(parse, prefix + unit * 20_000)
    # 5x the input costs ~5x the time (quadratic would be 25x); the absolute bound catches a hang
    assert large < 12 * max(small, 0.005), (small, large)
    assert large < 10.0
