"""Example agents, written for the OpenAI API, not for agentic-rl (see docs/agents.md)."""
