"""Fixtures shared by the policy tests (the vLLM server modules use ``prompt_ids``)."""

from __future__ import annotations

import pytest

from agentic_rl.types import Message


@pytest.fixture(scope="module")
def prompt_ids(chat):
    messages = [
        Message(role="system", content="You are a helpful assistant. Answer briefly."),
        Message(role="user", content="Name three colours of the rainbow and say why it forms."),
    ]
    return chat.encode(chat.render_prompt(messages))
