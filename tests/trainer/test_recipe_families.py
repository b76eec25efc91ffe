"""A 2-step RL smoke run of the calculator recipe per model family (issue 35): a tiny random model
of each family's architecture with that family's real tokenizer and chat template
(tests/chat_families.py), so the trainer runs each template's chat format and tool format end to
end: warm-up demonstrations written in the family's tool format (the oracle's Hermes calls
rewritten), parsed back into correct tool calls, RL rollouts, the update and the held-out eval."""

from __future__ import annotations

import math

import pytest

from agentic_rl.config import load_config
from agentic_rl.policy.model_loading import cache_dir
from agentic_rl.trainer.recipe import train
from agentic_rl.trainer.records.run_dir import MetricsLog
from agentic_rl.trajectories import TrajectoryStore
from tests.chat_families import FAMILIES, family_tokenizer, template_kwargs
from tests.recipe_settings import TWO_STEP_SMOKE
from tests.tiny_models import save_random_family_model

#: a call as each family's tool format writes it (the warm-up demonstrations must show it)
CALL_SYNTAX = {
    "qwen2.5": "<tool_call>",
    "qwen3": "<tool_call>",
    "llama3": '{"name": "calculator", "parameters":',
    "gemma": "```tool_code\ncalculator(expression=",
    "deepseek-r1": "<tool_call>",
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_step_rl_smoke_run_per_family(family, tmp_path):
    try:
        tok = family_tokenizer(family, cache_dir() / "test-tokenizers")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model = save_random_family_model(tok, tmp_path / "model", family)
    kwargs = ", ".join(f"{k}='{v}'" for k, v in template_kwargs(family).items())
    config = load_config(
        None,
        [
            f"model.path='{model}'",
            f"model.chat_template_kwargs={{{kwargs}}}",
            *TWO_STEP_SMOKE,
            "rollout.max_new_tokens=24",
            "optim.skip_zero_advantage=false",  # random weights: no informative group
            f"output_dir='{tmp_path / 'runs'}'",
        ],
    )
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in rows if r["phase"] == "rl")
    demos = list(TrajectoryStore(run_dir / "trajectories").read_trajectories(phase="warmup"))
    assert demos and all(t.reward_components["correct_answer"] == 1.0 for t in demos)
    for demo in demos:  # the demonstration spoke the family's format and was parsed back
        assert CALL_SYNTAX[family] in demo.messages[2].content
        assert [c.name for c in demo.turns[0].action.tool_calls] == ["calculator"]
