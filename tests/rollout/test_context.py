"""The context builder: budget respected to the token, system prompt and task always kept, markers."""

from __future__ import annotations

import pytest

from agentic_rl.rollout.context import (
    ELISION_MARKER,
    ContextBudgetError,
    ContextBuilder,
    render_chatml,
)
from agentic_rl.types import Message


def words(text: str) -> int:
    """A toy tokenizer: one token per whitespace-separated word."""
    return len(text.split())


SYSTEM = Message("system", "You are a helpful assistant with memory tools.")
TASK = Message("user", "What is the codeword of Alice Moreau?")
HISTORY = [
    Message("assistant", "I will search my memory first."),
    Message("tool", "Found 0 memories."),
    Message("assistant", "Let me try another query about Alice."),
    Message("tool", " ".join(f"word{i}" for i in range(40))),
    Message("assistant", "Searching once more with the full name Alice Moreau."),
    Message("tool", "Found 1 memory: [1] Alice Moreau codeword falcon"),
]


def _full(builder: ContextBuilder, history=HISTORY, memory=()) -> int:
    return builder.tokens(
        [
            SYSTEM,
            TASK,
            *(
                [Message("user", "\n".join(["Relevant memory:", *(f"- {m}" for m in memory)]))]
                if memory
                else []
            ),
            *history,
        ]
    )


@pytest.mark.parametrize("count", [words, len], ids=["words", "chars"])
def test_budget_is_respected_to_the_token_for_every_budget(count):
    fixed = count(render_chatml([SYSTEM, TASK]))
    full = count(render_chatml([SYSTEM, TASK, *HISTORY]))
    for budget in range(fixed, full + 3):
        built = ContextBuilder(count, budget).build(SYSTEM, TASK, HISTORY)
        assert built.num_tokens == count(render_chatml(built.messages)) <= budget, budget
        assert built.messages[:2] == (SYSTEM, TASK)  # never dropped, never shortened
        if budget >= full:
            assert built.messages[2:] == tuple(HISTORY) and not built.rewritten
        else:
            assert built.rewritten, budget


def test_exactly_fitting_history_is_kept_whole_and_one_token_less_elides():
    full = words(render_chatml([SYSTEM, TASK, *HISTORY]))
    assert ContextBuilder(words, full).build(SYSTEM, TASK, HISTORY).messages[2:] == tuple(HISTORY)
    built = ContextBuilder(words, full - 1).build(SYSTEM, TASK, HISTORY)
    assert built.elided_messages == 2  # the oldest block: an assistant message and its tool result
    assert built.messages[2] == Message("user", ELISION_MARKER.format(n=2))
    assert built.messages[3:] == tuple(HISTORY[2:])


def test_tool_results_are_never_separated_from_their_call():
    for budget in range(30, 200):
        try:
            built = ContextBuilder(words, budget).build(SYSTEM, TASK, HISTORY)
        except ContextBudgetError:
            continue
        kept = built.messages[2:]
        if kept and kept[0].content.startswith("[") and "elided" in kept[0].content:
            kept = kept[1:]
        if kept and not built.truncated_messages:
            assert kept[0].role == "assistant", budget


def test_oversized_tool_outputs_are_cut_with_a_visible_marker():
    builder = ContextBuilder(words, 10_000, max_tool_output_tokens=12)
    built = builder.build(SYSTEM, TASK, HISTORY)
    cut = built.messages[2 + 3]
    assert cut.role == "tool" and cut.content.startswith("word0 word1")
    # k kept words + the marker glued to the last one ("word4…[tool output truncated: 5 of 40
    # tokens kept]" adds 7 words) must be <= 12 words: k = 5
    assert (
        cut.content == "word0 word1 word2 word3 word4…[tool output truncated: 5 of 40 tokens kept]"
    )
    assert words(cut.content) <= 12
    assert built.truncated_messages == 1 and built.elided_messages == 0 and built.rewritten
    assert built.messages[2 + 1] == HISTORY[1]  # short outputs untouched


def test_system_prompt_and_task_over_budget_is_an_error():
    fixed = words(render_chatml([SYSTEM, TASK]))
    with pytest.raises(
        ContextBudgetError, match=f"take {fixed} tokens, over the context budget of {fixed - 1}"
    ):
        ContextBuilder(words, fixed - 1).build(SYSTEM, TASK, HISTORY)


def test_when_even_the_newest_message_does_not_fit_it_is_truncated_with_a_marker():
    fixed = len(render_chatml([SYSTEM, TASK]))
    long_reply = Message("assistant", "x" * 500)
    for budget in range(fixed, fixed + 400, 7):
        built = ContextBuilder(len, budget).build(SYSTEM, TASK, [*HISTORY, long_reply])
        assert built.num_tokens <= budget and built.messages[:2] == (SYSTEM, TASK)
    built = ContextBuilder(len, fixed + 300).build(SYSTEM, TASK, [*HISTORY, long_reply])
    assert built.messages[2].content == ELISION_MARKER.format(n=len(HISTORY))
    assert (
        built.messages[3].content.startswith("xxx")
        and "…[message truncated:" in built.messages[3].content
    )
    assert built.truncated_messages == 1 and built.elided_messages == len(HISTORY)


def test_memory_results_follow_the_task_and_the_lowest_ranked_go_first():
    memory = [
        "[1] Alice Moreau codeword falcon",
        "[4] Bruno Silva codeword otter",
        "[7] a long note " + "z " * 30,
    ]
    roomy = ContextBuilder(words, 10_000).build(SYSTEM, TASK, HISTORY, memory)
    assert roomy.messages[2].content.splitlines() == [
        "Relevant memory:",
        *(f"- {m}" for m in memory),
    ]
    assert roomy.dropped_memory == 0 and not roomy.rewritten
    # room for the memory message without the long note, plus the newest block
    newest = HISTORY[4:]
    budget = words(
        render_chatml(
            [
                SYSTEM,
                TASK,
                Message(
                    "user",
                    "Relevant memory:\n- "
                    + memory[0]
                    + "\n- "
                    + memory[1]
                    + "\n[1 lower-ranked memory results left out to fit the context budget]",
                ),
                Message("user", ELISION_MARKER.format(n=4)),
                *newest,
            ]
        )
    )
    built = ContextBuilder(words, budget).build(SYSTEM, TASK, HISTORY, memory)
    assert built.num_tokens <= budget
    assert built.dropped_memory == 1 and built.messages[2].content.startswith(
        "Relevant memory:\n- [1] Alice"
    )
    assert built.messages[-2:] == tuple(newest)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_tokens"):
        ContextBuilder(words, 0)
    with pytest.raises(ValueError, match="max_tool_output_tokens"):
        ContextBuilder(words, 10, max_tool_output_tokens=0)


def test_real_tokenizer_budget(chat):
    """With SmolLM2's tokenizer: the built prompt encodes to at most the budget."""
    count = lambda text: len(chat.encode(text))  # noqa: E731
    full = count(chat.render_prompt([SYSTEM, TASK, *HISTORY]))
    for budget in (full, full - 1, full - 40, full - 80):
        built = ContextBuilder(count, budget, render=chat.render_prompt).build(
            SYSTEM, TASK, HISTORY
        )
        assert len(chat.encode(chat.render_prompt(built.messages))) == built.num_tokens <= budget
