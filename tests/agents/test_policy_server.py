"""The policy server with the real ``openai`` client: trajectories from calls, token-in/token-out.

Replies come from a scripted policy (exact, known text) or the tiny random Llama's FastPolicy
(real sampling, continuous batching). Every check reads the trajectory the server built.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from agentic_rl.agents.reward import parse_reward
from agentic_rl.agents.server import PolicyServer, RolloutSpec
from agentic_rl.types import Message, StopReason
from tests.agents.conftest import ANSWER, CALL, SYSTEM, TOOLS


def _agent_loop(client, messages, tools=TOOLS, **extra):
    """The usual agent loop: call, run the calculator calls, call again until no tool call."""
    responses = []
    while True:
        response = client.chat.completions.create(
            model="m",
            messages=messages,
            tools=tools,
            extra_body={"return_token_ids": True},
            **extra,
        )
        responses.append(response)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return responses
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "4416"})


def _open(server, rid="r1", **spec):
    future = server.open_rollout(rid, RolloutSpec(**spec))
    return future, openai.OpenAI(base_url=server.rollout_url(rid), api_key="x", max_retries=0)


def test_multi_turn_tool_calls_make_one_trajectory(scripted_server, chat):
    future, client = _open(scripted_server)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "69 * 64?"}]
    responses = _agent_loop(client, messages)
    first = responses[0].choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content is None
    call = first.message.tool_calls[0]
    assert call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "69 * 64"}
    assert responses[1].choices[0].message.content == ANSWER
    posted = httpx.post(f"{scripted_server.origin}/rollouts/r1/reward", json={"reward": 1.0})
    assert posted.status_code == 200
    t = scripted_server.close_rollout("r1", future.result(timeout=5))
    # one trajectory, one segment, two turns; the policy's tokens are exactly the sampled ones
    assert t.segment_starts == (0,) and len(t.turns) == 2 and t.reward == 1.0
    sampled = [tok for r in responses for tok in r.choices[0].model_extra["token_ids"]]
    assert [tok for tok, m in zip(t.token_ids, t.loss_mask) if m] == sampled
    assert sampled[-1] == chat.eos_token_id
    # the env tokens (prompt, tool result, headers) are masked, and the stream is the chat
    # format's own rendering of the whole conversation (the tools listed in the system prompt)
    conversation = [
        Message("system", t.messages[0].content),
        Message("user", "69 * 64?"),
        Message("assistant", CALL),
        Message("tool", "4416"),
        Message("assistant", ANSWER),
    ]
    assert '"name": "calculator"' in conversation[0].content
    rendered = chat.render_prompt(conversation[:4]) + ANSWER + "<|im_end|>"
    assert t.token_ids == tuple(chat.encode(rendered))
    env_text = chat.decode([tok for tok, m in zip(t.token_ids, t.loss_mask) if not m])
    assert "4416<|im_end|>" in env_text and '"69 * 64"}}' not in env_text
    assert t.turns[0].tool_results[0].call_id == call.id
    assert t.turns[0].tool_results[0].content == "4416" and t.turns[0].action.tool_calls
    assert t.stop_reason == StopReason.TERMINATED and not t.failed


def test_rewritten_history_starts_a_new_segment(scripted_server, chat):
    future, client = _open(scripted_server)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "69 * 64?"}]
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    # the agent summarises: drops the call and its result, asks again in its own words
    summary = messages + [{"role": "user", "content": "The calculator said 4416. Answer now."}]
    second = client.chat.completions.create(model="m", messages=summary, tools=TOOLS)
    assert first.choices[0].message.tool_calls and second.choices[0].message.tool_calls
    t = scripted_server.close_rollout("r1", parse_reward(0.0))
    assert len(t.segment_starts) == 2 and len(t.turns) == 2
    start = t.segment_starts[1]
    # the first segment ends with the first reply as sampled; the second is the new prompt
    assert chat.decode(t.token_ids[:start]).endswith(CALL + "<|im_end|>")
    new_prompt = chat.encode(chat.render_prompt([*t.messages[3:6]]))
    assert t.token_ids[start : start + len(new_prompt)] == tuple(new_prompt)
    assert not any(t.loss_mask[start : start + len(new_prompt)])
    assert t.turns[0].context_reset and not future.done()


def test_a_missing_reward_times_out_cleanly(scripted_server):
    from agentic_rl.agents.runner import AgentJob, AgentRunner

    def agent(task, base_url):  # calls once, never reports a reward
        client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    runner = AgentRunner(scripted_server, agent, timeout_s=1.0)
    [t] = runner.run([AgentJob("late", {}, RolloutSpec())])
    assert t.failed and t.reward is None and "no reward within agent.timeout_s" in t.failure
    assert runner.counts == {"timeout": 1} and t.info["failure_kind"] == "timeout"
    assert len(t.turns) == 1  # what it sampled is kept (and stored), not trained
    # the rollout is closed: a late reward or call gets the API's 404, nothing else changes
    late = httpx.post(f"{scripted_server.origin}/rollouts/late/reward", json={"reward": 1.0})
    assert late.status_code == 404 and late.json()["error"]["code"] == "rollout_not_found"


def test_a_malformed_request_gets_the_api_error_shape_and_loses_nothing(scripted_server, chat):
    def rollout(rid, bad: bool):
        future, client = _open(scripted_server, rid)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "69 * 64?"}]
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        if bad:
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(model="m", messages=messages, stream=True)
            assert err.value.body["param"] == "stream" and err.value.body["type"] == (
                "invalid_request_error"
            )
            for body in (
                {"messages": [{"role": "wizard", "content": "x"}]},
                {"messages": messages, "top_p": 0.5},
                {"messages": messages, "n": 0},
                {"messages": []},
            ):
                r = httpx.post(f"{client.base_url}chat/completions", json=body)
                assert r.status_code == 400 and set(r.json()["error"]) == {
                    "message",
                    "type",
                    "param",
                    "code",
                }
            r = httpx.post(f"{client.base_url}chat/completions", content=b"{not json")
            assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        _agent_loop(client, messages)
        return scripted_server.close_rollout(rid, parse_reward(1.0))

    clean, noisy = rollout("clean", False), rollout("noisy", True)
    assert noisy.token_ids == clean.token_ids and noisy.loss_mask == clean.loss_mask
    assert len(noisy.turns) == len(clean.turns) and noisy.segment_starts == clean.segment_starts


def test_unscoped_calls_are_refused_while_training(scripted_server):
    r = httpx.post(
        f"{scripted_server.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "rollout_required"
    assert httpx.get(f"{scripted_server.origin}/nowhere").json()["error"]["type"] == (
        "not_found_error"
    )


def test_forced_tool_choice_prefills_env_tokens(chat):
    from agentic_rl.agents.recorder import Budget
    from agentic_rl.policy.scripted import ScriptedPolicy

    rest = 'calculator", "arguments": {"expression": "2 + 2"}}</tool_call>'
    server = PolicyServer(ScriptedPolicy(chat, lambda i, c: rest), chat, Budget(64, 2048)).start()
    try:
        future, client = _open(server)
        response = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "2 + 2?"}],
            tools=TOOLS,
            tool_choice="required",
        )
        call = response.choices[0].message.tool_calls[0]
        assert json.loads(call.function.arguments) == {"expression": "2 + 2"}
        t = server.close_rollout("r1", parse_reward(1.0))
    finally:
        server.close()
    text = chat.decode(t.token_ids)
    prefill = '<tool_call>{"name": "'
    at = text.index(prefill)
    masked = chat.decode([tok for tok, m in zip(t.token_ids, t.loss_mask) if not m])
    assert masked.endswith("<|im_start|>assistant\n" + prefill)  # the opening is env text
    assert text[at:] == prefill + rest + "<|im_end|>"


def test_n_choices_the_continued_one_joins_the_stream(chat):
    from agentic_rl.agents.recorder import Budget
    from agentic_rl.policy.scripted import ScriptedPolicy

    def script(index, context):
        return "done" if "ok<|im_end|>" in context else f"option {index}"

    server = PolicyServer(ScriptedPolicy(chat, script), chat, Budget(64, 2048)).start()
    try:
        future, client = _open(server)
        messages = [{"role": "user", "content": "pick"}]
        response = client.chat.completions.create(model="m", messages=messages, n=3)
        assert [c.message.content for c in response.choices] == ["option 0", "option 1", "option 2"]
        messages += [
            {"role": "assistant", "content": "option 2"},
            {"role": "user", "content": "ok"},
        ]
        client.chat.completions.create(model="m", messages=messages)
        t = server.close_rollout("r1", parse_reward({"reward": 1.0, "choice": 0}))
    finally:
        server.close()
    assert t.segment_starts == (0,) and "option 2<|im_end|>" in chat.decode(t.token_ids)
    assert "option 0" not in chat.decode(t.token_ids) and t.info["unused_choices"] == 2


@pytest.mark.parametrize("sampler", ["fast", "hf"])
def test_concurrent_rollouts_do_not_mix(tiny_model_dir, chat, sampler):
    """Eight agents at once against the tiny model (the fast sampler's decode stream, or HF's
    batched generate): each trajectory holds exactly its own prompt and the ids and logprobs
    its own responses returned."""
    import torch

    from agentic_rl.agents.recorder import Budget
    from agentic_rl.policy.fast import FastPolicy
    from agentic_rl.policy.hf import HFPolicy
    from agentic_rl.policy.model_loading import load_model

    torch.set_num_threads(1)
    model = load_model(tiny_model_dir)
    if sampler == "fast":
        policy = FastPolicy(model, chat.eos_token_id, max_batch=8)
    else:
        policy = HFPolicy(model, chat.eos_token_id, chat.eos_token_id)
    server = PolicyServer(policy, chat, Budget(12, 1024), temperature=1.0).start()

    async def agent(i: int):
        client = openai.AsyncOpenAI(base_url=server.rollout_url(f"r{i}"), api_key="x")
        messages = [{"role": "user", "content": f"question number {i}"}]
        got = []
        for turn in range(2):
            r = await client.chat.completions.create(
                model="m", messages=messages, logprobs=True, extra_body={"return_token_ids": True}
            )
            choice = r.choices[0]
            got.append(
                (choice.model_extra["token_ids"], [x.logprob for x in choice.logprobs.content])
            )
            messages += [
                {"role": "assistant", "content": choice.message.content},
                {"role": "user", "content": f"and again {i}.{turn}"},
            ]
        await client.close()
        return got

    async def all_agents():
        return await asyncio.gather(*(agent(i) for i in range(8)))

    futures = [server.open_rollout(f"r{i}", RolloutSpec(seed=i)) for i in range(8)]
    try:
        results = asyncio.run(all_agents())
        trajectories = [server.close_rollout(f"r{i}", parse_reward(0.0)) for i in range(8)]
    finally:
        server.close()
    assert not any(f.done() for f in futures)
    for i, (t, got) in enumerate(zip(trajectories, results)):
        ids = [tok for tok, m in zip(t.token_ids, t.loss_mask) if m]
        lps = [lp for lp, m in zip(t.logprobs, t.loss_mask) if m]
        assert ids == [tok for g in got for tok in g[0]]
        assert lps == pytest.approx([lp for g in got for lp in g[1]])
        text = chat.decode(t.token_ids)
        assert f"question number {i}<" in text and f"and again {i}.0<" in text
        assert all(f"number {j}<" not in text for j in range(8) if j != i)


def test_parse_reward_components_by_group():
    from agentic_rl.agents.reward import RewardFormatError
    from agentic_rl.rewards.rubric import RewardWeights

    # R = 1.0·(1 + 0) + 0.1·(1) − 1.0·(0.5) − 1.0·(0) = 0.6
    r = parse_reward(
        {
            "components": {"correct": 1, "bonus": 0, "format": 1, "calls": 0.5},
            "groups": {"format": "process", "calls": "cost"},
            "info": {"level": "hard"},
        },
        RewardWeights(process=0.1),
    )
    assert r.total == pytest.approx(0.6) and r.components["outcome"] == 1.0
    assert r.components["cost"] == 0.5 and r.info == {"level": "hard"}
    assert parse_reward(0.25).total == 0.25 and parse_reward(0.25).components["outcome"] == 0.25
    for bad in ("x", float("nan"), {"reward": 1, "components": {}}, {"components": {"outcome": 1}}):
        with pytest.raises(RewardFormatError):
            parse_reward(bad)


def test_reward_callback_posted_reward_and_a_raising_agent(scripted_server):
    from agentic_rl.agents.runner import AgentJob, AgentRunner

    async def agent(task, base_url):
        if task.get("crash"):
            raise RuntimeError("the agent broke")
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "q"}]
        r = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        await client.close()
        if task.get("post"):  # the agent posts its reward itself (it wins over the callback)
            httpx.post(base_url.removesuffix("/v1") + "/reward", json={"reward": 0.5})
        return r.choices[0].message.tool_calls[0].function.name

    def reward(task, result):  # the callback grades what the agent returned
        return {"components": {"named_the_tool": float(result == "calculator")}}

    runner = AgentRunner(scripted_server, agent, reward, timeout_s=30)
    jobs = [
        AgentJob(f"j{i}", task, RolloutSpec())
        for i, task in enumerate([{}, {"post": 1}, {"crash": 1}])
    ]
    graded, posted, crashed = runner.run(jobs)
    assert graded.reward == 1.0 and graded.reward_components["named_the_tool"] == 1.0
    assert posted.reward == 0.5 and not posted.failed
    assert crashed.failed and "the agent broke" in crashed.failure
    assert crashed.info["failure_kind"] == "agent_error" and runner.counts == {"agent_error": 1}
