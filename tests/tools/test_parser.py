"""Tests for agentic_rl.tools.definition.parser: the <tool_call>{json}</tool_call> format."""

from __future__ import annotations

import json

from agentic_rl.tools import calculator, execute_tool_calls, parse_tool_calls
from agentic_rl.types import ToolCall


def test_single_call_with_surrounding_text():
    text = 'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call> done'
    calls, errors = parse_tool_calls(text, turn_index=3)
    assert errors == ()
    assert calls == (
        ToolCall(
            name="calculator",
            arguments={"expression": "2+2"},
            raw='{"name": "calculator", "arguments": {"expression": "2+2"}}',
            id="call_3_0",
        ),
    )


def test_whitespace_and_newlines_around_json():
    text = (
        '<tool_call>\n  {"name": "calculator",\n "arguments": {"expression": "1"}}\n\n</tool_call>'
    )
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].arguments == {"expression": "1"}
    assert calls[0].raw == '{"name": "calculator",\n "arguments": {"expression": "1"}}'


def test_no_tags_means_no_calls():
    assert parse_tool_calls('The answer is 4. {"name": "x"}') == ((), ())
    assert parse_tool_calls("") == ((), ())


def test_stray_closing_tag_is_ignored():
    assert parse_tool_calls("oops </tool_call> the answer is 4") == ((), ())


def test_nested_braces():
    payload = {"name": "search", "arguments": {"filter": {"range": {"lo": 1, "hi": [2, {"x": 3}]}}}}
    text = f"<tool_call>{json.dumps(payload)}</tool_call>"
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].arguments == payload["arguments"]


def test_closing_brace_and_closing_tag_inside_a_json_string():
    inner = 'print("}") # </tool_call> is just text here'
    raw = json.dumps({"name": "python", "arguments": {"code": inner}})
    text = f"<tool_call>{raw}</tool_call> after"
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].arguments == {"code": inner}
    assert calls[0].raw == raw


def test_several_calls_in_one_message_keep_order_and_ids():
    text = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>\n'
        "and then\n"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    )
    calls, errors = parse_tool_calls(text, turn_index=1)
    assert errors == ()
    assert [c.arguments["expression"] for c in calls] == ["1+1", "2+2"]
    assert [c.id for c in calls] == ["call_1_0", "call_1_1"]


def test_malformed_json_then_good_call():
    text = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"</tool_call>'
        '<tool_call>{"name": "calculator", "arguments": {"expression": "3+3"}}</tool_call>'
    )
    calls, errors = parse_tool_calls(text)
    assert len(errors) == 1
    assert errors[0].raw == '{"name": "calculator", "arguments": {"expression": "2+2"'
    assert "invalid JSON" in errors[0].message
    assert "<tool_call>" in errors[0].message  # reminds the model of the format
    assert len(calls) == 1
    assert calls[0].arguments == {"expression": "3+3"}
    assert calls[0].id == "call_0_1"  # k counts every <tool_call> block, the rejected one included


def test_malformed_json_without_closing_tag_stops_at_next_opening_tag():
    text = '<tool_call>{"name": oops <tool_call>{"name": "calculator"}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert [e.raw for e in errors] == ['{"name": oops']
    assert [c.name for c in calls] == ["calculator"]


def test_missing_closing_tag():
    text = 'sure <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}} and more'
    calls, errors = parse_tool_calls(text)
    assert calls == ()
    assert len(errors) == 1
    assert "missing closing </tool_call>" in errors[0].message
    assert errors[0].raw.startswith('{"name": "calculator"')


def test_missing_closing_tag_at_end_of_text():
    calls, errors = parse_tool_calls('<tool_call>{"name": "calculator"}')
    assert calls == ()
    assert "missing closing" in errors[0].message


def test_text_between_json_and_closing_tag_is_an_error_and_parsing_continues():
    text = '<tool_call>{"name": "a"} trailing</tool_call><tool_call>{"name": "b"}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert "unexpected text after the JSON object" in errors[0].message
    assert errors[0].raw == '{"name": "a"} trailing'
    assert [c.name for c in calls] == ["b"]


def test_empty_call_and_unterminated_string():
    calls, errors = parse_tool_calls("<tool_call></tool_call><tool_call>")
    assert calls == ()
    assert len(errors) == 2
    assert all("empty tool call" in e.message for e in errors)
    _, errors = parse_tool_calls('<tool_call>{"name": "calc</tool_call>')
    assert "invalid JSON" in errors[0].message


def test_name_missing_or_not_a_string():
    for body, fragment in [
        ('{"arguments": {}}', 'no "name"'),
        ('{"name": 3, "arguments": {}}', '"name" must be a non-empty string'),
        ('{"name": "", "arguments": {}}', '"name" must be a non-empty string'),
        ('["calculator", {}]', "must be a JSON object"),
    ]:
        calls, errors = parse_tool_calls(f"<tool_call>{body}</tool_call>")
        assert calls == (), body
        assert fragment in errors[0].message, (body, errors[0].message)
        assert errors[0].raw == body


def test_arguments_missing_or_null_means_empty():
    calls, _ = parse_tool_calls('<tool_call>{"name": "now"}</tool_call>')
    assert calls[0].arguments == {}
    calls, _ = parse_tool_calls('<tool_call>{"name": "now", "arguments": null}</tool_call>')
    assert calls[0].arguments == {}


def test_arguments_as_json_encoded_string():
    text = '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"2+2\\"}"}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].arguments == {"expression": "2+2"}


def test_arguments_string_that_is_not_an_object_is_an_error():
    for args in ['"2+2"', '"[1, 2]"']:
        calls, errors = parse_tool_calls(
            f'<tool_call>{{"name": "c", "arguments": {args}}}</tool_call>'
        )
        assert calls == ()
        assert '"arguments" is a string' in errors[0].message


def test_non_object_arguments_is_an_error():
    for args in ["[1, 2]", '"x"', "3", "true"]:
        text = f'<tool_call>{{"name": "calculator", "arguments": {args}}}</tool_call>'
        calls, errors = parse_tool_calls(text)
        assert calls == (), args
        assert len(errors) == 1, args
        assert '"arguments"' in errors[0].message


def test_parameters_is_an_alias_of_arguments():
    text = '<tool_call>{"name": "calculator", "parameters": {"expression": "5"}}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert errors == ()
    assert calls[0].arguments == {"expression": "5"}


def test_deeply_nested_json_does_not_raise():
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    calls, errors = parse_tool_calls(text)
    assert calls == ()
    assert len(errors) == 1


def test_end_to_end_with_unknown_tool_and_parser_error():
    text = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "347*28"}}</tool_call>'
        '<tool_call>{"name": "web_search", "arguments": {"q": "x"}}</tool_call>'
        "<tool_call>{not json}</tool_call>"
    )
    calls, errors = parse_tool_calls(text, turn_index=2)
    results = execute_tool_calls(calls, errors, {"calculator": calculator})
    assert [r.ok for r in results] == [True, False, False]  # message order
    assert (results[0].call_id, results[0].name, results[0].content) == (
        "call_2_0",
        "calculator",
        "9716",
    )
    assert results[1].content == "Error: unknown tool 'web_search'. Available tools: calculator"
    assert results[1].call_id == "call_2_1"
    assert results[2].content.startswith("Error: could not parse tool call: invalid JSON")
    assert results[2].call_id == "call_2_2"  # the error is attached to its own block
