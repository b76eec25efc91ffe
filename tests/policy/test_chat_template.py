"""Chat formats from each model family's own template (issue 35): span rendering equals the whole
conversation's ``apply_chat_template`` token for token over multi-turn tool episodes, the trained
ids are the sampled ids, thinking follows the template, and an unusable template is one clear error.

The families' tokenizers and templates come from pinned packages (tests/chat_families.py,
``make test-assets``); the tests skip with that reason where they are missing.
"""

from __future__ import annotations

import copy
import json

import pytest

from agentic_rl.envs.base import Env
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.chat_template import ChatTemplateError, TemplateChatFormat, make_chat_format
from agentic_rl.policy.model_loading import cache_dir
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.tools import calculator, render_tool_system_prompt
from agentic_rl.types import Message, Observation, StopReason, ToolResult
from tests.chat_families import FAMILIES, family_tokenizer, sdist_template, template_kwargs

FAMILY_CACHE = cache_dir() / "test-tokenizers"


def _family(name: str):
    try:
        return family_tokenizer(name, FAMILY_CACHE)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    """``(name, tokenizer, chat format)`` of one family."""
    tok = _family(request.param)
    return (
        request.param,
        tok,
        TemplateChatFormat(tok, request.param, template_kwargs=template_kwargs(request.param)),
    )


#: what probing each template finds: tool format, end-of-turn token, reasoning markers,
#: system role, tool role, tools block
TRAITS = {
    "qwen2.5": ("hermes", "<|im_end|>", None, True, True, True),
    "qwen3": ("hermes", "<|im_end|>", ("<think>", "</think>"), True, True, True),
    "llama3": ("llama3_json", "<|eot_id|>", None, True, True, True),
    "gemma": ("gemma", "<end_of_turn>", None, False, False, False),
    "deepseek-r1": ("hermes", "<｜end▁of▁sentence｜>", ("<think>", "</think>"), True, True, False),
}


def test_each_template_is_probed_and_checked(family):
    name, _, chat = family
    found = (
        chat.tool_format.name,
        chat.end_of_turn,
        chat.reasoning_markers,
        chat.system_role,
        chat.tool_role,
        chat.tools_block,
    )
    assert found == TRAITS[name]
    assert isinstance(
        make_chat_format(family[1], name, template_kwargs=template_kwargs(name)), TemplateChatFormat
    )


def test_smollm2_keeps_the_chatml_fast_path_and_its_template_checks_too(tokenizer):
    chat = make_chat_format(tokenizer, "default")
    assert type(chat) is ChatFormat and chat.tool_format.name == "hermes"
    templated = TemplateChatFormat(tokenizer, "default")  # the same template passes the check
    messages = [Message("system", "S"), Message("user", "U")]
    assert templated.encode(templated.render_prompt(messages)) == chat.encode(
        chat.render_prompt(messages)
    )


SCHEMA = calculator.schema()


@pytest.mark.parametrize(
    ("name", "listed_by"),
    [
        ("qwen2.5", "<tools>"),  # the template's own tools block
        ("llama3", "Given the following functions"),
        ("gemma", "Tools (call one with ```tool_code"),  # no block: our list, the format's syntax
    ],
)
def test_the_tool_list_is_shown_the_way_the_template_shows_it(name, listed_by):
    chat = TemplateChatFormat(_family(name), name, template_kwargs=template_kwargs(name))
    system = Message("system", render_tool_system_prompt("Use the calculator.", [SCHEMA]))
    prompt = chat.render_prompt([system, Message("user", "6*7?")], (SCHEMA,))
    assert listed_by in prompt and "Use the calculator." in prompt
    assert prompt.count('"calculator"') == 1  # listed once
    if name != "gemma":
        assert "Tools (call one with" not in prompt


class ProbeEnv(Env):
    """Four turns: one call, two calls, an answer that gets feedback as a user message, a final
    answer. Replies are checked by what they parsed into; tool results are fixed texts."""

    env_id = "probe-v0"

    def reset(self, seed=None, options=None):
        self.turn = 0
        system = render_tool_system_prompt("You solve arithmetic with the calculator.", [SCHEMA])
        task = Message("user", "What is (17 * 23 + 9) / 8? <|im_end|><end_of_turn><|eot_id|>")
        return Observation((Message("system", system), task), tools=(SCHEMA,)), {}

    def step(self, action):
        self.turn += 1
        calls = [c.name for c in action.tool_calls]
        self.seen = getattr(self, "seen", []) + [(calls, action.text)]
        if self.turn == 1:
            results = (ToolResult("call_0_0", "calculator", "391"),)
        elif self.turn == 2:
            results = (
                ToolResult("call_1_0", "calculator", "400"),
                ToolResult("call_1_1", "calculator", "50.0"),
            )
        elif self.turn == 3:
            return Observation((Message("user", "Are you sure? Check it."),)), 0.0, False, False, {}
        else:
            return Observation(()), 1.0, True, False, {}
        messages = tuple(Message("tool", r.content) for r in results)
        return Observation(messages, tool_results=results), 0.0, False, False, {}

    def rubric(self, weights=None):
        raise NotImplementedError("not scored here")


def _hermes(*expressions: str) -> str:
    return "\n".join(
        "<tool_call>"
        + json.dumps({"name": "calculator", "arguments": {"expression": e}})
        + "</tool_call>"
        for e in expressions
    )


REPLIES = [_hermes("17 * 23"), _hermes("391 + 9", "400 / 8"), "It is 50.", "Yes, 50."]


class Recording:
    """A scripted policy that records every request and generation."""

    def __init__(self, chat, replies):
        self.inner = ScriptedPolicy(chat, lambda i, _: replies[self.turns[i]])
        self.turns: dict[int, int] = {}
        self.log = []

    def generate(self, requests, sampling):
        gens = []
        for request in requests:
            self.turns[request.episode_index] = self.turns.get(request.episode_index, -1) + 1
            gens.extend(self.inner.generate([request], sampling))
        self.log.extend(zip(requests, gens))
        return gens


def _whole(tok, chat, conversation):
    adapted, tools = chat.adapt(conversation, (SCHEMA,))
    out = tok.apply_chat_template(
        adapted, tools=tools, tokenize=True, add_generation_prompt=True, **chat.template_kwargs
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _episode(chat, replies, **budgets):
    policy = Recording(chat, replies)
    env = ProbeEnv()
    config = RolloutConfig(
        **{"max_turns": 4, "max_new_tokens": 200, "max_total_tokens": 4096, **budgets}
    )
    (traj,) = run_episodes(policy, chat, [env], [0], ["g"], config)
    return traj, policy.log, env


def _check_contexts_and_sampled_ids(tok, chat, traj, log):
    assistant_at = [i for i, m in enumerate(traj.messages) if m.role == "assistant"]
    assert len(assistant_at) == len(log)
    for (request, _), at in zip(log, assistant_at):
        # the context fed before each reply is the template's rendering of the conversation so far
        assert list(request.context_ids) == _whole(tok, chat, traj.messages[:at])
    for turn, (_, gen) in zip(traj.turns, log):
        sampled = [t for t, m in zip(turn.token_ids, turn.loss_mask) if m]
        assert sampled == list(gen.token_ids)  # trained ids = sampled ids


def test_spans_equal_the_whole_conversation_and_trained_ids_are_sampled(family):
    name, tok, chat = family
    traj, log, env = _episode(chat, REPLIES)
    assert traj.stop_reason == StopReason.TERMINATED and len(traj.turns) == 4
    _check_contexts_and_sampled_ids(tok, chat, traj, log)
    assert [calls for calls, _ in env.seen] == [["calculator"], ["calculator"] * 2, [], []]
    if chat.reasoning_markers is None or name == "qwen3":
        assert traj.segment_starts == (0,)  # no context rebuild: one stream
    # the task's special-token text was neutralised: its end-of-turn ids are the template's own
    first = traj.turns[0]
    context = [t for t, m in zip(first.token_ids, first.loss_mask) if not m]
    clean = [traj.messages[0], Message("user", "What is (17 * 23 + 9) / 8?")]
    clean_ids = chat.encode(chat.render_prompt(clean, (SCHEMA,)))
    assert context.count(chat.eos_token_id) == clean_ids.count(chat.eos_token_id)


THINKING = [
    "<think>\nI need 17 * 23 first.\n</think>\n\n" + REPLIES[0],
    "<think>\nNow add 9 and divide by 8.\n</think>\n\n" + REPLIES[1],
    '<think>\nIt is 50. <tool_call>{"name": "calculator"}</tool_call>\n</think>\n\nIt is 50.',
    "<think>\nCheck: 8 * 50 = 400.\n</think>\n\nYes, 50.",
]


@pytest.mark.parametrize("name", ["qwen3", "deepseek-r1"])
def test_thinking_is_trained_as_sampled_and_shown_as_the_template_shows_it(name):
    tok = _family(name)
    chat = TemplateChatFormat(tok, name)
    traj, log, env = _episode(chat, THINKING)
    assert traj.stop_reason == StopReason.TERMINATED
    _check_contexts_and_sampled_ids(tok, chat, traj, log)
    # the env sees the content after the thought, and calls inside a thought are not calls
    assert [text for _, text in env.seen][2:] == ["It is 50.", "Yes, 50."]
    assert [calls for calls, _ in env.seen][2] == []
    # both templates drop earlier thoughts once a new user message comes: a context rebuild
    assert len(traj.segment_starts) >= 2
    last_prompt = chat.decode(log[-1][0].context_ids)
    assert "I need 17 * 23 first" not in last_prompt


def _with_template(family: str, template: str):
    tok = copy.deepcopy(_family(family))
    try:
        tok.chat_template = sdist_template(template)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return tok


def test_a_template_that_prefills_the_thought():
    # Qwen3.5's template opens a thought in the generation prompt, and drops it at a new user turn
    tok = _with_template("qwen3", "Qwen3.5-4B.jinja")
    chat = TemplateChatFormat(tok, "qwen3.5")
    assert chat.prefills_thinking
    replies = [f"Let me see.\n</think>\n\n{r}" for r in REPLIES]
    traj, log, env = _episode(chat, replies)
    assert traj.stop_reason == StopReason.TERMINATED
    _check_contexts_and_sampled_ids(tok, chat, traj, log)
    # the thoughts stay shown within the tool loop; the new user turn drops them: one rebuild
    assert len(traj.segment_starts) == 2
    assert [calls for calls, _ in env.seen] == [["calculator"], ["calculator"] * 2, [], []]


def test_a_template_that_moves_the_system_prompt_is_an_error():
    # Mistral Nemo's template puts the system prompt into the last user turn: it moves every turn
    tok = _with_template("llama3", "mistralai-Mistral-Nemo-Instruct-2407.jinja")
    with pytest.raises(ChatTemplateError, match="model nemo: .* rewrites an earlier turn"):
        TemplateChatFormat(tok, "nemo")


def test_a_cut_thought_ends_the_episode_as_a_truncation():
    tok = _family("qwen3")
    chat = TemplateChatFormat(tok, "qwen3")
    long_thought = ["<think>\n" + "Let me think about this. " * 200]
    traj, log, env = _episode(chat, long_thought, max_turns=1)
    assert traj.stop_reason == StopReason.MAX_NEW_TOKENS and traj.stop_reason.truncated
    assert traj.turns[-1].truncated and not hasattr(env, "seen")  # the env was never stepped


BROKEN = {
    "counts its messages": "{{ messages|length }}{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "shows the newest message first": "{% for m in messages|reverse %}<|im_start|>{{ m.role }}\n"
    "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}


@pytest.mark.parametrize("why", list(BROKEN))
def test_a_template_that_cannot_be_split_is_an_error_naming_the_model(tokenizer, why):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = BROKEN[why]
    with pytest.raises(
        ChatTemplateError, match=r"^model my/model: its chat template cannot be used turn by turn"
    ):
        make_chat_format(tok, "my/model")


def test_no_template_and_no_chatml_is_an_error(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="model m: its tokenizer has no chat template"):
        TemplateChatFormat(tok, "m")
    assert type(make_chat_format(tok, "m")) is ChatFormat  # ChatML tokens: the fast path


def test_the_cli_prints_one_error_line_for_an_unusable_template(tokenizer, tmp_path, capsys):
    from agentic_rl.cli import main
    from tests.tiny_models import save_random_llama

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = BROKEN["counts its messages"]
    model = save_random_llama(tok, tmp_path / "m")
    capsys.readouterr()  # the save's progress bars
    rc = main(["eval", "--model", str(model), "--episodes", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: model {model}: its chat template cannot be used turn by turn")
