"""The example agents (examples/, written for the OpenAI API only) run end to end through the
policy server: the plain-client tool loop and the OpenAI Agents SDK agent."""

from __future__ import annotations

import pytest

from agentic_rl.agents.recorder import Budget
from agentic_rl.agents.runner import AgentJob, AgentRunner, load_callable
from agentic_rl.agents.server import PolicyServer, RolloutSpec
from agentic_rl.agents.tasks import env_task
from agentic_rl.envs import make
from agentic_rl.policy.scripted import ScriptedPolicy


def _oracle(index: int, context: str) -> str:
    """What calculator-v0's oracle writes for seed 3 ("Multiply 69 by 64.")."""
    if "<|im_start|>tool\n4416<|im_end|>" in context:
        return "<answer>4416</answer>"
    return '<tool_call>{"name": "calculator", "arguments": {"expression": "69 * 64"}}</tool_call>'


@pytest.fixture
def task():
    env = make("calculator-v0")
    try:
        yield env_task(env, 3, "calculator-v0")
    finally:
        env.close()


def _run(chat, spec: str, task) -> tuple:
    server = PolicyServer(ScriptedPolicy(chat, _oracle), chat, Budget(64, 2048), temperature=1.0)
    server.start()
    try:
        runner = AgentRunner(server, load_callable(spec), timeout_s=60)
        [t] = runner.run([AgentJob("r1", task, RolloutSpec(env_id=f"agent:{spec}", seed=3))])
    finally:
        server.close()
    return t, runner


def test_the_plain_client_agent_renders_the_env_prompt_and_is_rewarded(chat, task):
    assert task["prompt"] == "Multiply 69 by 64." and task["info"]["expected"] == 4416
    t, runner = _run(chat, "examples.calculator_agent:run", task)
    assert not t.failed and t.reward == 1.0 and len(t.turns) == 2 and not runner.counts
    # the agent's own prompt and tool schema render exactly as the env's first observation
    env = make("calculator-v0")
    observation, _ = env.reset(seed=3)
    env.close()
    prompt = chat.encode(chat.render_prompt(observation.messages))
    assert t.token_ids[: len(prompt)] == tuple(prompt)
    assert t.turns[0].tool_results[0].content == "4416"


def test_the_openai_agents_sdk_agent_runs_end_to_end(chat, task):
    pytest.importorskip("agents", reason="needs the 'agents' extra (openai-agents)")
    t, runner = _run(chat, "examples.calculator_agents_sdk:run", task)
    assert not t.failed and t.reward == 1.0 and not runner.counts
    assert [len(turn.action.tool_calls) for turn in t.turns] == [1, 0]
    assert t.turns[0].tool_results[0].content == "4416" and t.segment_starts == (0,)


def test_the_shaped_reward_reports_the_env_rubric_terms(chat, task):
    t, _ = _run(chat, "examples.calculator_agent:run_shaped", task)
    c = t.reward_components
    assert c["correct_answer"] == c["computed_calls"] == c["grounded_answer"] == 1.0
    tokens = t.num_generated_tokens  # the agent counted them from the responses' usage
    assert c["tool_calls"] == 0.02 and c["generated_tokens"] == pytest.approx(0.0005 * tokens)
    # R = 1·1 + 0.1·(1 + 1) − (0.02 + 0.0005·tokens), the [reward] defaults
    assert t.reward == pytest.approx(1 + 0.2 - 0.02 - 0.0005 * tokens)
