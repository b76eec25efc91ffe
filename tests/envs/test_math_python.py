"""math-python-v0: the checker, the verifier on gold / wrong / multiple / hacked answers, the python tool."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.checker import check_env, play_oracle
from agentic_rl.envs.reasoning.math_python import LEVELS, MathPythonEnv, gsm_program
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action
from tests.markers import needs_bwrap


def act(text: str, turn: int = 0) -> Action:
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return Action(text, calls, errors)


def python_call(code: str) -> str:
    return (
        "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"
    )


@pytest.fixture
def env():
    env = make("math-python-v0")
    yield env
    env.close()


def test_passes_check_env():
    report = check_env("math-python-v0", seeds=range(6))  # two of each level
    assert report.oracle_success == 1.0


def test_levels_cycle_with_the_seed(env):
    assert [env.reset(seed=s)[1]["level"] for s in range(3)] == list(LEVELS)


def final(env, seed: int, text: str) -> tuple[float, dict]:
    env.reset(seed=seed)
    _, reward, terminated, _, info = env.step(act(text))
    assert terminated
    return reward, info


@pytest.mark.parametrize("seed", range(9))
def test_gold_answer_in_every_accepted_form_scores_1(env, seed):
    gold = env.reset(seed=seed)[1]["expected"]
    for text in (
        f"<answer>{gold}</answer>",
        f"The answer is \\boxed{{{gold}}}.",
        f"<answer>{gold}.0</answer>",
        f"<answer>${gold}$</answer>",
    ):
        reward, info = final(env, seed, text)
        assert reward == 1.0 and info["correct"] and info["answer_format_ok"], text


@pytest.mark.parametrize("seed", range(6))
def test_wrong_multiple_and_hacked_answers_score_0(env, seed):
    gold = env.reset(seed=seed)[1]["expected"]
    wrong = str(int(gold) + 1)
    for text in (
        f"<answer>{wrong}</answer>",  # wrong
        f"<answer>{gold}</answer><answer>{wrong}</answer>",  # two answer tags
        f"<answer>{wrong}</answer><answer>{gold}</answer>",
        f"<answer>{gold} or {wrong}</answer>",  # hedged inside one tag
        f"<answer>{wrong} or {gold}</answer>",  # (math-verify alone takes the last)
        f"<answer>[{wrong}, {gold}]</answer>",
        f"\\boxed{{{wrong}}} \\boxed{{{gold}}}",  # two boxes
        f"{gold}",  # no tag
        f"<answer>print({gold})</answer>",  # code instead of a number
        "<answer></answer>",
    ):
        reward, info = final(env, seed, text)
        assert reward == 0.0 and not info["correct"], text


def test_answer_in_a_tool_call_reply_is_a_tool_turn(env):
    gold = env.reset(seed=1)[1]["expected"]
    _, reward, terminated, _, info = env.step(act(python_call("1") + f"<answer>{gold}</answer>"))
    assert not terminated and reward == 0.0 and info["tool_calls"] == 1


@needs_bwrap
def test_python_tool_is_stateful_within_and_fresh_across_episodes(env):
    env.reset(seed=2)
    env.step(act(python_call("x = 6 * 7")))
    obs, *_ = env.step(act(python_call("print(x)"), 1))
    assert obs.messages[0].role == "tool" and obs.messages[0].content.strip() == "42"
    env.reset(seed=2)
    obs, _, _, _, info = env.step(act(python_call("print(x)")))
    assert "NameError" in obs.messages[0].content  # an exception in the code is an observation


def test_tool_calls_are_audited(tmp_path):
    log = tmp_path / "audit.jsonl"
    env = make("math-python-v0", audit_path=str(log), run_id="r1")
    env.reset(seed=0, options={"trajectory_id": "t-1"})
    env.step(act(python_call("print(2 + 2)")))
    env.close()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["tool"], r["decision"], r["trajectory_id"], r["run_id"]) for r in records] == [
        ("python", "allow", "t-1", "r1")
    ]


@needs_bwrap
def test_rubric_scores_the_oracle_episode(env):
    trajectory = play_oracle(env, 0)
    total, comps = env.rubric().score(trajectory)
    assert (
        comps["correct_answer"] == 1.0
        and comps["tool_call_format"] == 1.0
        and comps["answer_format"] == 1.0
    )
    assert comps["tool_calls"] == 1.0 and comps["task_score"] == 1.0
    # R = 1·1 + 0.1·(1 + 1) − 1·(0.02·1 + 0.0005·0 tokens) − 0 = 1.18
    assert total == pytest.approx(1.18)


def test_difficulty_settings_pass_through():
    hard = MathPythonEnv(
        levels=("chain_sum",), settings={"chain_sum": {"min_digits": 7, "max_digits": 7}}
    )
    question = hard.reset(seed=0)[0].messages[1].content
    hard.close()
    assert any(
        len(tok.strip("-+=.,")) == 7 and tok.strip("-+=.,").isdigit() for tok in question.split()
    )


def test_bad_levels_and_settings_are_named():
    with pytest.raises(ValueError, match="unknown level"):
        MathPythonEnv(levels=("calculus",))
    with pytest.raises(ValueError, match="max_digitz"):
        MathPythonEnv(settings={"chain_sum": {"max_digitz": 3}})


def test_gsm_program_keeps_only_steps_that_check_out():
    cot = (
        "He sold 22 + 13 = 35 boxes on Friday.\n"
        "David earned 57 x €11 = €627 for cupcakes.\n"
        "A wrong step 2 + 2 = 5 is dropped.\n"
        "#### 627"
    )
    assert gsm_program(cot) == ["s1 = 22 + 13", "s2 = 57 * 11"]


def test_answers_only_math_verify_accepts_score_on_a_worker_thread(env):
    # the rollout engine steps envs on worker threads, where math-verify's signal alarm cannot be
    # set: \frac{2g}{2} is not read by the task's score_answer, only by math-verify
    from concurrent.futures import ThreadPoolExecutor

    gold = env.reset(seed=1)[1]["expected"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        _, reward, _, _, info = pool.submit(
            env.step, act(f"<answer>\\frac{{{2 * int(gold)}}}{{2}}</answer>")
        ).result()
    assert info["task_score"] < 1.0  # score_answer alone says wrong
    assert reward == 1.0 and info["correct"] and info["verifier_error"] is None


def test_verifier_errors_are_counted_in_the_rubric(env):
    import dataclasses

    from agentic_rl.types import StopReason, Trajectory, Turn

    env.reset(seed=1)
    env.task = dataclasses.replace(
        env.task, answer="\\frac{"
    )  # a gold answer math-verify cannot read
    action = act("<answer>12</answer>")
    _, reward, _, _, info = env.step(action)
    assert reward == 0.0 and "could not read the gold answer" in info["verifier_error"]
    trajectory = Trajectory(
        "math-python-v0",
        1,
        "t",
        "g",
        (),
        (Turn(0, action, None, reward, (), (), (), (), info),),
        (),
        (),
        (),
        StopReason.TERMINATED,
    )
    _, comps = env.rubric().score(trajectory)
    assert comps["verifier_errors"] == 1.0 and comps["correct_answer"] == 0.0
