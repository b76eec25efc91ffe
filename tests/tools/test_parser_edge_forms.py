"""The tool-call parser against the edge forms small models emit, huge numbers and adversarial sizes.

Each case pins what the parser does with one form: accepted (and how), or an error whose message
says what is wrong. Timing cases use CPU time (``time.process_time``), so a loaded machine does
not make them flaky.
"""

from __future__ import annotations

import gc
import json
import time

import pytest

from agentic_rl.tools import calculator, execute_tool_calls, parse_tool_calls


def _one(text):
    calls, errors = parse_tool_calls(text)
    assert len(calls) + len(errors) == 1, (calls, errors)
    return (calls[0] if calls else None), (errors[0] if errors else None)


def _call(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


# --- huge numbers (issue 19, item 16) ---------------------------------------------------------------


def test_integer_over_the_int_digit_limit_is_an_error_not_a_crash():
    """Python refuses int("9" * 5000) (4,300-digit limit): json.loads raised ValueError out of the parser."""
    digits = "9" * 5000
    call, error = _one(_call('{"name": "calculator", "arguments": {"n": ' + digits + "}}"))
    assert call is None
    assert "5000 digits" in error.message and "4300" in error.message
    # inside a double-encoded arguments string too
    call, error = _one(
        _call(json.dumps({"name": "calculator", "arguments": '{"n": ' + digits + "}"}))
    )
    assert call is None and "5000 digits" in error.message


def test_long_integers_under_the_limit_and_huge_floats_are_accepted():
    call, _ = _one(
        _call(
            '{"name": "f", "arguments": {"n": ' + "7" * 4000 + ', "x": 1e999999, "y": -0.5e-400}}'
        )
    )
    assert call.arguments["n"] == int("7" * 4000)
    assert call.arguments["x"] == float("inf") and call.arguments["y"] == 0.0


def test_huge_number_call_next_to_a_good_call_keeps_the_good_call():
    text = _call('{"name": "calculator", "arguments": {"expression": ' + "1" * 9000 + "}}") + _call(
        '{"name": "calculator", "arguments": {"expression": "6*7"}}'
    )
    calls, errors = parse_tool_calls(text)
    results = execute_tool_calls(calls, errors, {"calculator": calculator})
    assert [r.content for r in results][1] == "42"
    assert results[0].content.startswith(
        "Error: could not parse tool call: invalid tool call: a number has 9000"
    )


# --- linear time (item 16) -----------------------------------------------------------------------------


def _cpu_seconds(text: str) -> float:
    """Best of three CPU times with the cyclic GC paused: a gen-2 collection over the 50,000 error
    objects of the large input (or a noisy neighbour) once made one timing 18x the small one."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            start = time.process_time()
            parse_tool_calls(text)
            best = min(best, time.process_time() - start)
    finally:
        if enabled:
            gc.enable()
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "<tool_call>",  # unclosed tags (1.4 s / 8 s at 20,000 / 50,000 before)
        "<tool_call>{",  # unfinished objects
        '<tool_call>{"name": "a"}',  # objects without their closing tag
        '<tool_call>"x',  # an unterminated string that used to swallow the next tags
        "<tool_call>[1, ",  # unfinished arrays
    ],
)
def test_adversarial_messages_parse_in_linear_time(unit):
    small, large = _cpu_seconds(unit * 10_000), _cpu_seconds(unit * 50_000)
    # relative, not a speed target: 5x the input costs ~5x the time (quadratic: 25x; before the fix
    # 50,000 unclosed tags took 8 s); the absolute bound only catches a hang on a slow machine
    assert large < 12 * max(small, 0.005), (small, large)
    assert large < 10.0, f"{large:.2f} s of CPU for 50,000 blocks"
    calls, errors = parse_tool_calls(unit * 50_000)
    assert (len(calls), len(errors)) == (0, 50_000)


def test_deep_nesting_is_an_error():
    call, error = _one(_call('{"name": "a", "arguments": ' + "[" * 100_000))
    assert call is None and "invalid JSON" in error.message


# --- ambiguous or duplicated argument fields (item 14) -----------------------------------------------


@pytest.mark.parametrize(
    "body, key",
    [
        ('{"name": "a", "name": "b", "arguments": {}}', "name"),
        ('{"name": "a", "arguments": {"x": 1}, "arguments": {"x": 2}}', "arguments"),
        ('{"name": "a", "arguments": {"x": 1, "x": 2}}', "x"),
        ('{"name": "a", "arguments": {"opts": {"k": 1, "k": 1}}}', "k"),
    ],
)
def test_duplicate_keys_are_an_error_naming_the_key(body, key):
    """json.loads keeps the last of two equal keys silently; a call must not mean two things."""
    call, error = _one(_call(body))
    assert call is None
    assert f'the key "{key}" appears twice' in error.message


def test_both_arguments_and_parameters_is_ambiguous():
    call, error = _one(_call('{"name": "a", "arguments": {"x": 1}, "parameters": {"x": 2}}'))
    assert call is None and '"arguments" and "parameters"' in error.message


@pytest.mark.parametrize("key", ["args", "input", "kwargs"])
def test_arguments_under_another_key_are_not_silently_dropped(key):
    call, error = _one(_call(json.dumps({"name": "calculator", key: {"expression": "1+1"}})))
    assert call is None and f'"{key}"' in error.message and '"arguments"' in error.message


def test_other_scalar_keys_are_ignored():
    call, _ = _one(_call('{"type": "function", "id": "x1", "name": "a", "arguments": {"x": 1}}'))
    assert (call.name, call.arguments) == ("a", {"x": 1})


# --- empty arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", ["{}", "null", '""', '"   "', '"{}"', '" {} "'])
def test_empty_arguments_mean_no_arguments(arguments):
    call, _ = _one(_call('{"name": "a", "arguments": ' + arguments + "}"))
    assert call.arguments == {}
    call, _ = _one(_call('{"name": "a"}'))
    assert call.arguments == {}


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ("[]", "got list"),
        ("0", "got int"),
        ('"null"', "does not decode to a JSON object"),
        ('"[1]"', "does not decode to a JSON object"),
    ],
)
def test_arguments_that_are_not_an_object_are_an_error(arguments, fragment):
    call, error = _one(_call('{"name": "a", "arguments": ' + arguments + "}"))
    assert call is None and fragment in error.message


# --- arguments as a JSON string -------------------------------------------------------------------------


def test_double_encoded_arguments_are_decoded_once():
    once = json.dumps({"expression": "2+2"})
    call, _ = _one(_call(json.dumps({"name": "calculator", "arguments": once})))
    assert call.arguments == {"expression": "2+2"}
    twice = json.dumps(
        once
    )  # a string of a string of an object: decoded once, it is still a string
    call, error = _one(_call(json.dumps({"name": "calculator", "arguments": twice})))
    assert call is None and "does not decode to a JSON object" in error.message


def test_arguments_string_with_trailing_junk_is_an_error():
    call, error = _one(_call(json.dumps({"name": "a", "arguments": '{"x": 1} extra'})))
    assert call is None and "text after its JSON value" in error.message
    call, error = _one(_call(json.dumps({"name": "a", "arguments": '{"x": 1'})))
    assert call is None and "not valid JSON" in error.message


# --- trailing junk and nested braces in strings -------------------------------------------------------


@pytest.mark.parametrize("junk", ["}", "]}", ", ", " </tool", "```"])
def test_trailing_junk_after_the_object_is_an_error_that_quotes_it(junk):
    call, error = _one(f'<tool_call>{{"name": "a", "arguments": {{}}}}{junk}</tool_call>')
    assert call is None
    assert "unexpected text after the JSON object" in error.message
    assert repr(junk.strip()) in error.message


def test_trailing_junk_preview_says_how_long_it_was():
    junk = "x" * 500
    _, error = _one(f'<tool_call>{{"name": "a"}} {junk}</tool_call>')
    assert "… (500 chars)" in error.message  # the preview is cut, and says so truthfully


def test_text_after_the_closing_tag_is_outside_the_call():
    call, _ = _one('<tool_call>{"name": "a", "arguments": {}}</tool_call> and then }}} junk')
    assert call.name == "a"


def test_trailing_comma_and_single_quotes_are_invalid_json():
    for body in ('{"name": "a", "arguments": {"x": 1,}}', "{'name': 'a', 'arguments': {}}"):
        call, error = _one(_call(body))
        assert call is None and "invalid JSON" in error.message


@pytest.mark.parametrize(
    "code",
    [
        "d = {'a': {'b': '}'}}; print(d)",
        'print("{" * 3 + "}}}")',
        "s = '\\\"}' # quote, brace",
        "print('</tool_call>')",
    ],
)
def test_nested_braces_and_tags_inside_strings(code):
    raw = json.dumps({"name": "python", "arguments": {"code": code}})
    call, _ = _one(_call(raw))
    assert call.arguments == {"code": code} and call.raw == raw


def test_markdown_fence_inside_the_tags_is_an_error_with_the_format_hint():
    call, error = _one(_call('```json\n{"name": "a", "arguments": {}}\n```'))
    assert call is None
    assert error.raw.startswith("```json") and "<tool_call>" in error.message


# --- an opening tag inside a call -------------------------------------------------------------------


def test_opening_tag_inside_a_string_starts_a_new_block_and_says_so():
    text = _call(json.dumps({"name": "python", "arguments": {"code": "print('<tool_call>')"}}))
    calls, errors = parse_tool_calls(text)
    assert calls == () and len(errors) == 2
    assert "a new <tool_call> began before this call's JSON ended" in errors[0].message


def test_escaped_opening_tag_inside_a_string_is_fine():
    raw = '{"name": "python", "arguments": {"code": "print(\'\\u003ctool_call>\')"}}'
    call, _ = _one(_call(raw))
    assert call.arguments == {"code": "print('<tool_call>')"}


def test_whitespace_only_and_empty_blocks():
    for text in (
        "<tool_call></tool_call>",
        "<tool_call>  \n </tool_call>",
        "<tool_call>",
        "<tool_call>\n",
    ):
        call, error = _one(text)
        assert call is None and error.message.startswith("empty tool call")


def test_special_tokens_in_arguments_are_plain_text():
    code = "print('<|im_end|><|endoftext|><|im_start|>system')"
    call, _ = _one(_call(json.dumps({"name": "python", "arguments": {"code": code}})))
    assert call.arguments["code"] == code
