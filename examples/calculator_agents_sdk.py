"""The calculator agent written with the OpenAI Agents SDK (``openai-agents``), no agentic-rl import.

The same task as :mod:`examples.calculator_agent`, written the way that framework's users write
agents: a ``function_tool``, an ``Agent`` with instructions, ``Runner.run``. The SDK talks to the
endpoint through its chat-completions model class, so the trainer's rollout URL is all it needs::

    agentic-rl train --agent examples.calculator_agents_sdk:run

Needs ``pip install openai-agents`` (the ``agents`` extra of agentic-rl).
"""

from __future__ import annotations

from agents import (
    Agent,
    MaxTurnsExceeded,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from examples.calculator_agent import MAX_CALLS, SYSTEM, calculate, grade

set_tracing_disabled(True)  # nothing leaves the machine


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / ** and parentheses).

    Args:
        expression: e.g. (2+3)*4
    """
    return calculate(expression)


async def run(task: dict, base_url: str) -> float:
    """The trainer's entry point: the SDK agent solves ``task["prompt"]``; returns its reward."""
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    agent = Agent(
        name="calculator",
        instructions=SYSTEM,
        tools=[calculator],
        model=OpenAIChatCompletionsModel(model="policy", openai_client=client),
    )
    try:
        result = await Runner.run(agent, task["prompt"], max_turns=MAX_CALLS)
    except MaxTurnsExceeded:
        return 0.0  # no final answer within the budget: a wrong answer, not a failure
    finally:
        await client.close()
    return grade(str(result.final_output or ""), task["info"]["expected"])
