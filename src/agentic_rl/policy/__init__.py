"""Policies: inference backends that sample token ids and record their logprobs."""

from agentic_rl.policy.base import Generation, GenerationRequest, Policy, SamplingParams
from agentic_rl.policy.chat import ChatFormat
from agentic_rl.policy.scripted import ScriptedPolicy

__all__ = [
    "ChatFormat",
    "Generation",
    "GenerationRequest",
    "Policy",
    "SamplingParams",
    "ScriptedPolicy",
]
