"""rg/<task>-v0: ids resolved on demand, settings passed through, verifier on gold / wrong / multiple answers."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import families, get_spec, make
from agentic_rl.envs.checker import EnvCheckError, check_env
from agentic_rl.errors import UnknownEnvError
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action
from tests.markers import needs_bwrap

SAMPLE = ["countdown", "chain_sum", "gsm_symbolic", "word_sorting", "maze", "basic_arithmetic"]


def act(text: str) -> Action:
    calls, errors = parse_tool_calls(text)
    return Action(text, calls, errors)


@pytest.mark.parametrize("task", SAMPLE)
def test_sample_tasks_pass_check_env(task):
    assert check_env(f"rg/{task}-v0", seeds=range(3)).oracle_success == 1.0


def test_a_task_without_gold_answers_fails_the_oracle_check():
    with pytest.raises(EnvCheckError) as info:
        check_env("rg/boxnet-v0", seeds=[0])
    assert {f.check for f in info.value.failures} == {"oracle"}
    assert "oracle_reply() returned None" in str(info.value)


@pytest.mark.parametrize(
    "task,check", [("list_functions", "reset_determinism"), ("composite", "make")]
)
def test_known_broken_tasks_fail_the_right_check(task, check):
    with pytest.raises(EnvCheckError) as info:
        check_env(f"rg/{task}-v0", seeds=[0])
    assert {f.check for f in info.value.failures} == {check}


def final(env, seed: int, text: str) -> tuple[float, dict]:
    env.reset(seed=seed)
    _, reward, terminated, _, info = env.step(act(text))
    assert terminated
    return reward, info


@pytest.mark.parametrize("task", ["countdown", "word_sorting", "chain_sum"])
def test_gold_scores_1_wrong_and_multiple_score_0(task):
    env = make(f"rg/{task}-v0")
    for seed in range(3):
        gold = env.reset(seed=seed)[1]["expected"]
        assert final(env, seed, f"<answer>{gold}</answer>")[0] == 1.0
        reward, info = final(env, seed, "<answer>definitely not it</answer>")
        assert reward == 0.0 and info["task_score"] < 1.0
        reward, info = final(env, seed, f"<answer>{gold}</answer> <answer>{gold}</answer>")
        assert reward == 0.0 and info["answer"] is None and not info["answer_format_ok"]
        assert final(env, seed, f"{gold}")[0] == 0.0  # no answer tag
    env.close()


def test_partial_credit_is_logged_but_not_success():
    env = make("rg/countdown-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(act("<answer>1 + 1</answer>"))  # a valid but wrong expression
    assert reward == 0.0 and 0.0 < info["task_score"] < 1.0  # countdown gives format credit
    env.close()


def test_settings_pass_through_and_are_validated():
    env = make("rg/countdown-v0", min_numbers=3, max_numbers=3)
    question = env.reset(seed=5)[0].messages[1].content
    env.close()
    numbers = question.split("numbers:")[1].split(".")[0]
    assert len(numbers.split(",")) == 3
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['bogus'\].*known: .*max_numbers"):
        make("rg/countdown-v0", bogus=1)


def test_unknown_task_or_version_is_a_clear_unknown_env_error():
    with pytest.raises(UnknownEnvError, match=r"'rg/no_such_task-v0'; did you mean 'rg/.*-v0'"):
        make("rg/no_such_task-v0")
    with pytest.raises(UnknownEnvError, match="version is not v0"):
        make("rg/countdown-v1")
    with pytest.raises(UnknownEnvError):
        get_spec("rg/nope-v0")
    assert get_spec("rg/countdown-v0").takes_context  # the run's audit log reaches it


@needs_bwrap
def test_optional_python_tool():
    env = make("rg/chain_sum-v0", python_tool=True)
    obs, _ = env.reset(seed=1)
    assert [t["name"] for t in obs.tools] == ["python"] and "python" in obs.messages[0].content
    call = (
        "<tool_call>"
        + json.dumps({"name": "python", "arguments": {"code": "print(40 + 2)"}})
        + "</tool_call>"
    )
    obs, _, terminated, _, info = env.step(act(call))
    assert not terminated and obs.messages[0].content.strip() == "42" and info["tool_errors"] == 0
    env.close()
    assert (
        check_env(lambda: make("rg/chain_sum-v0", python_tool=True), seeds=[0]).oracle_success
        == 1.0
    )


def test_without_the_tool_a_call_is_an_error_observation():
    env = make("rg/chain_sum-v0")
    assert env.reset(seed=0)[0].tools == ()
    call = (
        "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "1"}}) + "</tool_call>"
    )
    obs, _, terminated, _, info = env.step(act(call))
    assert not terminated and info["tool_errors"] == 1 and "python" in obs.messages[0].content
    env.close()


def test_envs_cli_lists_the_family_compactly(capsys):
    from agentic_rl.cli import main

    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "math-python-v0" in out and "calculator-v0" in out
    family_line = next(line for line in out.splitlines() if line.startswith("rg/<task>-v0"))
    assert (
        "reasoning-gym" in family_line
        and f"({len(families()[0].member_names())} tasks)" in family_line
    )
    assert "countdown" in out and len(out.splitlines()) < 60
