"""OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (tests/policy/openai_stub_server.py):
token-in/token-out rollouts with server logprobs, the importance ratio against the trainer's
scoring, retries, timeouts and failed requests as failed trajectories; chat completions with
structured tool calls. (The same path against a real vLLM server is tested in
test_openai_vllm.py.)"""

from __future__ import annotations

import pytest

pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")

import torch  # noqa: E402

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.policy.openai_compat import OpenAICompatPolicy, make_client, mark_failed_requests  # noqa: E402
from agentic_rl.rollout import RolloutConfig, run_episodes  # noqa: E402
from agentic_rl.rollout.chat_completions import run_chat_episodes  # noqa: E402
from agentic_rl.trainer.learning.scoring import pack, score  # noqa: E402
from agentic_rl.types import StopReason  # noqa: E402
from tests.policy.openai_stub_server import StubServer  # noqa: E402

CONFIG = RolloutConfig(max_turns=2, max_new_tokens=6, max_total_tokens=1024, temperature=0.7)


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _rollout(server, chat, seeds, extra_body=None, **client_kwargs):
    client = make_client(server.base_url, **{"timeout_s": 30.0, "max_retries": 0, **client_kwargs})
    policy = OpenAICompatPolicy(
        client,
        "tiny",
        chat.eos_token_id,
        max_concurrency=2,
        policy_version=3,
        extra_body=extra_body,
    )
    envs = [make("calculator-v0") for _ in seeds]
    trajs = run_episodes(policy, chat, envs, seeds, [str(s) for s in seeds], CONFIG)
    return policy, mark_failed_requests(trajs, policy.failures)


def test_server_logprobs_match_trainer_scoring(tiny_model, chat):
    """At equal weights the importance ratio exp(logp_trainer − logp_server) is 1 on every
    sampled token (tolerance 1e-4 in log space: two fp32 forward passes, different code paths)."""
    with StubServer(tiny_model, chat.tokenizer, chat.eos_token_id) as server:
        policy, trajs = _rollout(server, chat, [1, 2], extra_body={"top_k": 0})
        body = server.completion_requests[0]
    assert not policy.failures
    assert (
        body["top_k"] == 0
        and body["return_tokens_as_token_ids"]
        and body["top_p"] == 1.0
        and body["logprobs"] == 1
    )
    assert body["temperature"] == CONFIG.temperature and isinstance(body["prompt"][0], int)
    for t in trajs:
        assert not t.failed and t.num_generated_tokens > 0
        batch = pack([t])
        with torch.no_grad():
            trainer_logprobs, _ = score(tiny_model, batch, temperature=CONFIG.temperature)
        assert batch.old_logprobs.shape == trainer_logprobs.shape
        assert (batch.old_logprobs < 0).all()  # real logprobs were recorded, not placeholders
        torch.testing.assert_close(trainer_logprobs, batch.old_logprobs, atol=1e-4, rtol=0)


def test_a_failing_request_fails_its_trajectory_only(tiny_model, chat):
    question = make("calculator-v0").reset(seed=2)[0].messages[1].content
    with StubServer(tiny_model, chat.tokenizer, chat.eos_token_id) as server:
        server.control["fail_text"] = question  # every request of episode seed=2 answers 500
        policy, trajs = _rollout(server, chat, [1, 2], max_retries=1)
        assert server.requests >= 3  # seed 2's first turn was tried twice (1 retry); seed 1 ran
    ok, bad = trajs
    assert not ok.failed
    assert bad.failed and "500" in bad.failure and bad.num_generated_tokens == 0
    assert list(policy.failures) == [bad.trajectory_id]


def test_timeout_and_missing_token_ids_become_failures(tiny_model, chat):
    with StubServer(tiny_model, chat.tokenizer, chat.eos_token_id) as server:
        server.control["sleep_s"] = 1.0
        policy, trajs = _rollout(server, chat, [5], timeout_s=0.3, max_retries=0)
        assert trajs[0].failed and "Timeout" in trajs[0].failure
        server.control.update(sleep_s=0, no_ids=True)  # a llama.cpp-style answer: text tokens only
        policy, trajs = _rollout(server, chat, [5])
        assert trajs[0].failed and "no sampled token ids" in trajs[0].failure


def test_chat_completions_with_structured_tool_calls(chat):
    script = [
        {"content": "", "tool_calls": [("calculator", '{"expression": "6*7"}')]},
        {"content": "<answer>42</answer>"},
        {"content": "", "tool_calls": [("calculator", "not json")]},
    ]
    with StubServer(chat_script=script) as server:
        client = make_client(server.base_url, max_retries=0)
        env = make("calculator-v0")
        (t,) = run_chat_episodes(client, "m", [env], [0], ["g"], max_turns=3, policy_version=7)
        first, second = server.chat_requests[:2]
    assert (
        first["tools"][0]["type"] == "function"
        and first["tools"][0]["function"]["name"] == "calculator"
    )
    sent = second["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert sent[-1] == {"role": "tool", "content": "42", "tool_call_id": "call_0_0"}
    assert t.stop_reason == StopReason.TERMINATED and t.turns[0].tool_results[0].content == "42"
    assert t.token_ids == () and t.info["token_ids"] == "none" and t.policy_version == 7


def test_text_and_structured_tool_calls_of_one_reply_get_distinct_ids(chat):
    """A reply with a ``<tool_call>`` in its text and a structured call: ids call_0_0, call_0_1,
    and each tool message answers its own call."""
    text_call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    script = [
        {"content": text_call, "tool_calls": [("calculator", '{"expression": "6*7"}')]},
        {"content": "<answer>42</answer>"},
    ]
    with StubServer(chat_script=script) as server:
        client = make_client(server.base_url, max_retries=0)
        (t,) = run_chat_episodes(client, "m", [make("calculator-v0")], [0], ["g"], max_turns=3)
        sent = server.chat_requests[1]["messages"]
    calls = [c["id"] for c in sent[2]["tool_calls"]]
    assert calls == ["call_0_0", "call_0_1"]
    tools = [(m["tool_call_id"], m["content"]) for m in sent if m["role"] == "tool"]
    assert tools == [("call_0_0", "5"), ("call_0_1", "42")]
    assert [r.content for r in t.turns[0].tool_results] == ["5", "42"]


def test_ids_stay_unique_when_the_text_holds_a_rejected_call(chat):
    """Issue 39 item 14: the text's blocks (a rejected one, then a good one) take positions 0 and
    1, the structured calls (a good one, then one with bad arguments) 2 and 3. Before, the
    structured call was numbered from the count of accepted text calls and took call_0_1, the
    id of the text's good call."""
    good = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    text = "<tool_call>{oops}</tool_call>" + good
    structured = [("calculator", '{"expression": "6*7"}'), ("calculator", "not json")]
    script = [{"content": text, "tool_calls": structured}, {"content": "<answer>42</answer>"}]
    with StubServer(chat_script=script) as server:
        client = make_client(server.base_url, max_retries=0)
        (t,) = run_chat_episodes(client, "m", [make("calculator-v0")], [0], ["g"], max_turns=3)
        sent = server.chat_requests[1]["messages"]
    turn = t.turns[0]
    assert [c.id for c in turn.action.tool_calls] == ["call_0_1", "call_0_2"]
    results = [(r.call_id, r.ok) for r in turn.tool_results]  # message order, one id each
    assert results == [
        ("call_0_0", False),
        ("call_0_1", True),
        ("call_0_2", True),
        ("call_0_3", False),
    ]
    assert [r.content for r in turn.tool_results if r.ok] == ["5", "42"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["call_0_1", "call_0_2"]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert answered == ["call_0_0", "call_0_1", "call_0_2", "call_0_3"]


def test_chat_completions_honour_a_context_reset(chat):
    # memory-recall-v0: the first reply ends the reveal session and the env wipes the history
    script = [{"content": "I will remember."}, {"content": "<answer>unknown</answer>"}]
    with StubServer(chat_script=script) as server:
        client = make_client(server.base_url, max_retries=0)
        (t,) = run_chat_episodes(client, "m", [make("memory-recall-v0")], [5], ["g"], max_turns=3)
        first, second = server.chat_requests[:2]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    # after the reset the server sees the system message and the new session only
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    assert second["messages"][0] == first["messages"][0]
    assert "history was wiped" in second["messages"][1]["content"]
    assert all("I will remember." not in m["content"] for m in second["messages"])
    # the trajectory keeps the whole conversation
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert t.turns[0].context_reset is True and t.stop_reason == StopReason.TERMINATED


def test_chat_reply_cut_at_max_tokens_is_not_given_to_the_env(chat):
    script = [
        {"content": "", "tool_calls": [("calculator", '{"expression": "6*7"}')]},
        {"content": "The answer is, after a long", "finish_reason": "length"},
    ]
    with StubServer(chat_script=script) as server:
        (t,) = run_chat_episodes(
            make_client(server.base_url, max_retries=0),
            "m",
            [make("calculator-v0")],
            [0],
            ["g"],
            max_turns=3,
        )
    assert t.stop_reason == StopReason.MAX_NEW_TOKENS and t.truncated
    first, cut = t.turns
    assert not first.truncated and first.tool_results[0].content == "42"
    assert (
        cut.truncated
        and cut.action.text == "The answer is, after a long"
        and cut.observation is None
    )
    assert t.messages[-1].content == cut.action.text


def test_chat_request_failure_is_a_failed_episode(chat):
    client = make_client(
        "http://127.0.0.1:9/v1", timeout_s=2.0, max_retries=0
    )  # nothing listens on port 9
    (t,) = run_chat_episodes(client, "m", [make("calculator-v0")], [0], ["g"])
    assert t.failed and t.stop_reason == StopReason.ERROR and "Connection" in t.failure


def test_bad_client_settings_are_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        make_client("http://127.0.0.1:9/v1", timeout_s=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAICompatPolicy(None, "m", 2, max_concurrency=0)
