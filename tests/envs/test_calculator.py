"""calculator-v0: seeding, levels, the episode contract, the oracle, grading and the rubric."""

from __future__ import annotations

import dataclasses
import math

import pytest

from agentic_rl.envs import CalculatorEnv, EpisodeEndedError, EpisodeNotStartedError, make
from agentic_rl.envs.calculator.env import INSTRUCTIONS
from agentic_rl.envs.calculator.tasks import LEVELS, make_task
from agentic_rl.rewards import RewardWeights
from agentic_rl.tools import evaluate_arithmetic, parse_tool_calls
from agentic_rl.types import Action, Message, StopReason, ToolCall, Trajectory, Turn


def _action(text: str, turn: int = 0) -> Action:
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return Action(text=text, tool_calls=calls, tool_call_errors=errors)


def _play_oracle(env: CalculatorEnv, seed: int):
    """Reset, then step with the oracle's replies until the episode ends; returns the step tuples."""
    env.reset(seed=seed)
    steps = []
    while (reply := env.oracle_reply()) is not None:
        steps.append((reply, env.step(_action(reply, len(steps)))))
    return steps


# -- seeding and levels ----------------------------------------------------------------------


def test_same_seed_same_task_and_first_observation():
    a, b = make("calculator-v0"), make("calculator-v0")
    obs_a, info_a = a.reset(seed=1234)
    obs_b, info_b = b.reset(seed=1234)
    assert obs_a == obs_b and info_a == info_b
    assert a.task == b.task
    a.reset(seed=99)
    assert a.reset(seed=1234) == (obs_b, info_b)  # reset again: same start


def test_first_observation_shape():
    env = make("calculator-v0")
    obs, info = env.reset(seed=5)
    assert [m.role for m in obs.messages] == ["system", "user"]
    assert obs.messages[0].content.startswith(INSTRUCTIONS)
    assert '"name": "calculator"' in obs.messages[0].content
    assert obs.messages[1].content == env.task.question
    assert [t["name"] for t in obs.tools] == ["calculator"]
    assert set(info) == {"level", "expected", "expression"}
    assert evaluate_arithmetic(info["expression"]) == info["expected"]


def test_different_seeds_give_different_tasks():
    questions = {make_task(s).question for s in range(60)}
    assert len(questions) == 60


@pytest.mark.parametrize("seed", range(9))
def test_level_is_seed_mod_3(seed):
    _, info = make("calculator-v0").reset(seed=seed)
    assert info["level"] == LEVELS[seed % 3] == ("direct", "multi_op", "word")[seed % 3]


def test_only_direct_level():
    env = make("calculator-v0", levels=("direct",))
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert info["level"] == "direct"
        a, b = (int(x) for x in info["expression"].split(" * "))
        assert info["expected"] == a * b


def test_reset_level_and_trajectory_level_name_the_task_level():
    from agentic_rl.envs.registry import reset_level

    for seed in range(3):
        assert reset_level("calculator-v0", seed) == LEVELS[seed % 3]
        # a trajectory keeps its env's reset info; Trajectory.level reads the level from it as text
        assert _oracle_trajectory(seed, 4).level == LEVELS[seed % 3]
    numbered = dataclasses.replace(_oracle_trajectory(0, 4), info={"level": 2})
    assert numbered.level == "2" and dataclasses.replace(numbered, info={}).level is None


def test_unknown_level_rejected():
    with pytest.raises(ValueError, match="unknown calculator levels"):
        CalculatorEnv(levels=("direct", "calculus"))
    with pytest.raises(ValueError):
        CalculatorEnv(levels=())


def test_reset_without_seed_draws_a_task():
    obs, info = make("calculator-v0").reset()
    assert info["level"] in LEVELS and len(obs.messages) == 2


# -- episode contract ------------------------------------------------------------------------


def test_step_before_reset_raises():
    with pytest.raises(EpisodeNotStartedError):
        make("calculator-v0").step(Action("<answer>1</answer>"))


def test_step_after_end_raises_until_reset():
    env = make("calculator-v0")
    env.reset(seed=0)
    env.step(Action("<answer>1</answer>"))
    with pytest.raises(EpisodeEndedError):
        env.step(Action("<answer>1</answer>"))
    assert env.oracle_reply() is None
    env.reset(seed=0)
    env.step(Action("<answer>1</answer>"))  # a new episode accepts steps again


@pytest.mark.parametrize("seed", range(30))
def test_oracle_solves_every_level(seed):
    env = make("calculator-v0")
    steps = _play_oracle(env, seed)
    assert len(steps) == 2
    (_, (obs1, r1, term1, trunc1, info1)), (reply2, (obs2, r2, term2, trunc2, info2)) = steps
    assert (r1, term1, trunc1) == (0.0, False, False)
    assert [m.role for m in obs1.messages] == ["tool"] and obs1.messages[0].content == str(
        env.task.answer
    )
    assert info1["tool_calls"] == 1 and info1["tool_errors"] == 0
    assert (r2, term2, trunc2) == (1.0, True, False)
    assert obs2.messages == ()
    assert info2["correct"] is True and info2["answer_format_ok"] is True
    assert (
        info2["answer"] == str(env.task.answer) and reply2 == f"<answer>{env.task.answer}</answer>"
    )


@pytest.mark.parametrize(
    "text, reward, answer",
    [
        ("<answer>{a}</answer>", 1.0, "{a}"),
        ("The answer is <answer> {a} </answer>.", 1.0, "{a}"),
        (
            "<answer>{a}</answer> or maybe <answer>{a}</answer>",
            0.0,
            None,
        ),  # several tags: no answer
        ("<answer>{a}</answer><answer>{b}</answer>", 0.0, None),
        ("{a}", 0.0, None),  # no tag
        ("<answer>{b}</answer>", 0.0, "{b}"),  # wrong number
        ("<answer>eleven</answer>", 0.0, "eleven"),  # words score 0
    ],
)
def test_final_answer_grading(text, reward, answer):
    env = make("calculator-v0")
    _, info = env.reset(seed=0)
    a, b = info["expected"], info["expected"] + 1
    _, r, terminated, truncated, step_info = env.step(Action(text.format(a=a, b=b)))
    assert (r, terminated, truncated) == (reward, True, False)
    assert step_info["answer"] == (answer.format(a=a, b=b) if answer else None)
    assert step_info["correct"] is (reward == 1.0)


def test_off_by_one_answer_to_a_large_product_is_wrong():
    env = make("calculator-v0")
    _, info = env.reset(seed=42)
    assert info["expected"] == 4042825  # 4.0e6: rel_tol 1e-6 would accept +-4
    _, reward, *_ = env.step(Action(f"<answer>{info['expected'] - 1}</answer>"))
    assert reward == 0.0


def test_tool_errors_become_observations():
    env = make("calculator-v0")
    env.reset(seed=0)
    calls = (
        ToolCall("calculator", {"expression": "1/0"}, id="call_0_0"),
        ToolCall("calculator", {"expr": "1"}, id="call_0_1"),
        ToolCall("calculator", {"expression": "__import__('os')"}, id="call_0_2"),
        ToolCall("calculator", {"expression": "6 * 7"}, id="call_0_3"),
    )
    obs, reward, terminated, truncated, info = env.step(Action("calls", tool_calls=calls))
    assert (reward, terminated, truncated) == (0.0, False, False)
    contents = [m.content for m in obs.messages]
    assert [m.role for m in obs.messages] == ["tool"] * 4
    assert contents[0] == "Error: CalculatorError: division by zero"
    assert contents[1].startswith("Error: ") and "expr" in contents[1]
    assert contents[2].startswith("Error: CalculatorError: ")
    assert contents[3] == "42"
    assert info["tool_calls"] == 4 and info["tool_errors"] == 3
    assert [r.ok for r in obs.tool_results] == [False, False, False, True]
    assert [r.call_id for r in obs.tool_results] == [
        "call_0_0",
        "call_0_1",
        "call_0_2",
        "call_0_3",
    ]


def test_parser_errors_become_observations():
    env = make("calculator-v0")
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(_action("<tool_call>{not json}</tool_call>"))
    assert not terminated
    assert obs.messages[0].content.startswith("Error: could not parse tool call: invalid JSON")
    assert info["tool_errors"] == 1


def test_oracle_in_state_after_a_failed_call_still_answers():
    env = make("calculator-v0")
    env.reset(seed=0)
    env.step(_action("<tool_call>{}</tool_call>"))
    assert env.oracle_reply() == f"<answer>{env.task.answer}</answer>"


# -- rubric ----------------------------------------------------------------------------------


def _oracle_trajectory(seed: int, generated: int) -> Trajectory:
    """A trajectory of the oracle with real env infos and `generated` sampled tokens."""
    env = make("calculator-v0")
    obs, info = env.reset(seed=seed)
    turns = []
    messages = list(obs.messages)
    for reply, (o, r, _term, _trunc, step_info) in _play_oracle(env, seed):
        messages.append(Message("assistant", reply))
        messages.extend(o.messages)
        results = o.tool_results  # as the engine copies them
        turns.append(
            Turn(
                len(turns),
                _action(reply),
                o if o.messages else None,
                r,
                results,
                (),
                (),
                (),
                step_info,
            )
        )
    ids = tuple(range(generated + 10))
    mask = (0,) * 10 + (1,) * generated
    return Trajectory(
        "calculator-v0",
        seed,
        "g",
        "t",
        tuple(messages),
        tuple(turns),
        ids,
        mask,
        (0.0,) * len(ids),
        StopReason.TERMINATED,
        info=info,
    )


def test_rubric_components_and_total_by_hand():
    traj = _oracle_trajectory(seed=1, generated=40)
    total, comps = make("calculator-v0").rubric().score(traj)
    # raw components: correct 1, 1 computing call of 1 -> 1, one correct numeric tag -> 1, 1 call, 40 tokens
    assert comps["correct_answer"] == 1.0
    assert comps["computed_calls"] == 1.0
    assert comps["grounded_answer"] == 1.0
    assert comps["tool_calls"] == 1.0
    assert comps["generated_tokens"] == 40.0
    # groups (w_f * f, before lambda): outcome 1; process 1 + 1 = 2; cost 0.02*1 + 0.0005*40 = 0.04; risk 0
    assert comps["outcome"] == 1.0
    assert comps["process"] == 2.0
    assert math.isclose(comps["cost"], 0.04)
    assert comps["risk"] == 0.0
    # default lambdas (1, 0.1, 1, 1): R = 1*1 + 0.1*2 - 1*0.04 - 1*0 = 1.16
    assert math.isclose(total, 1.16)


def test_rubric_with_other_weights():
    traj = _oracle_trajectory(seed=1, generated=40)
    total, _ = (
        make("calculator-v0")
        .rubric(RewardWeights(outcome=2.0, process=0.5, cost=10.0, risk=0.0))
        .score(traj)
    )
    # 2*1 + 0.5*2 - 10*0.04 = 2.6
    assert math.isclose(total, 2.6)


def test_rubric_of_a_real_oracle_rollout(chat):
    """Same, through the rollout engine: generated tokens = tokens of the two replies + <|im_end|> each."""
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes

    env = make("calculator-v0")
    (traj,) = run_episodes(
        ScriptedPolicy(chat, lambda i, c: env.oracle_reply() or ""),
        chat,
        [env],
        [4],
        ["g"],
        RolloutConfig(),
    )
    scored = env.rubric().apply(traj)
    replies = [t.action.text for t in traj.turns]
    n = sum(len(chat.encode(r + "<|im_end|>")) for r in replies)
    assert scored.reward_components["generated_tokens"] == n
    assert math.isclose(scored.reward, 1.0 + 0.1 * 2.0 - (0.02 + 0.0005 * n))


def _played(env, replies):
    """Step ``env`` through ``replies`` and type the turns as the engine does (tool results from the observation)."""
    turns = []
    for i, reply in enumerate(replies):
        action = _action(reply, i)
        obs, r, _term, _trunc, info = env.step(action)
        turns.append(Turn(i, action, None, r, obs.tool_results, (), (), (), info))
    return Trajectory(
        "calculator-v0",
        0,
        "g",
        "t",
        (),
        tuple(turns),
        (1, 2, 3),
        (0, 1, 1),
        (0.0,) * 3,
        StopReason.TERMINATED,
    )


def _call(expression: str) -> str:
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def test_rubric_of_wrong_answers_and_bad_calls():
    env = make("calculator-v0")
    env.reset(seed=0)
    traj = _played(
        env, ["<tool_call>{bad}</tool_call>", _call("2*3"), "<answer>1</answer><answer>2</answer>"]
    )
    total, comps = env.rubric().score(traj)
    # 2 calls, 1 error -> computed 0.5; two tags -> no answer -> correct 0, grounded 0; 2 tokens
    assert comps["correct_answer"] == 0.0 and comps["grounded_answer"] == 0.0
    assert (
        comps["computed_calls"] == 0.5
        and comps["tool_calls"] == 2.0
        and comps["generated_tokens"] == 2.0
    )
    # R = 0 + 0.1*0.5 - (0.02*2 + 0.0005*2) = 0.05 - 0.041 = 0.009
    assert math.isclose(total, 0.009)


def test_format_credit_cannot_be_farmed():
    """The farming policy of the credit comparison (a well-formed call on a bare number, then a
    well-formed wrong answer) scores below an honest wrong attempt, which scores below a success."""
    task = make_task(1)  # multi_op: "Compute 2 + 85 * 8." style; any wrong answer works here
    wrong = task.answer + 1
    env = make("calculator-v0")
    rubric = env.rubric()
    env.reset(seed=1)
    farm = rubric.score(_played(env, [_call("5"), "<answer>5</answer>"]))
    env.reset(seed=1)
    farm_any = rubric.score(_played(env, [_call("7"), f"<answer>{wrong}</answer>"]))
    env.reset(seed=1)
    honest = rubric.score(_played(env, [_call("2 + 3"), "<answer>5</answer>"]))
    env.reset(seed=1)
    success = rubric.score(
        _played(env, [_call(task.expression), f"<answer>{task.answer}</answer>"])
    )
    # same cost for all four (1 call, 2 tokens: 0.021); process: farm 0, honest 0.1*(1 + 1) = 0.2
    for total, comps in (farm, farm_any):
        assert (
            comps["computed_calls"] == 0.0
            and comps["grounded_answer"] == 0.0
            and comps["process"] == 0.0
        )
        assert math.isclose(total, -0.021)
    assert honest[1]["process"] == 2.0 and math.isclose(honest[0], 0.2 - 0.021)
    assert math.isclose(success[0], 1.0 + 0.2 - 0.021)
    assert farm[0] < honest[0] < success[0]
    # the whole process credit (at most 0.2) is below the outcome difference (1.0)
    assert success[0] - honest[0] == pytest.approx(1.0)


def test_an_answer_from_a_tool_error_or_a_guess_is_not_grounded():
    env = make("calculator-v0")
    env.reset(seed=1)
    _, comps = env.rubric().score(_played(env, [_call("2 +"), "<answer>2</answer>"]))
    assert comps["computed_calls"] == 0.0 and comps["grounded_answer"] == 0.0
    env.reset(seed=1)
    _, comps = env.rubric().score(_played(env, ["<answer>12</answer>"]))
    assert comps["grounded_answer"] == 0.0  # a guess (no call) that is wrong earns nothing


def test_truncated_episode_gets_no_outcome():
    traj = _oracle_trajectory(seed=1, generated=40)
    cut = Trajectory(
        traj.env_id,
        traj.seed,
        traj.group_id,
        traj.trajectory_id,
        traj.messages,
        traj.turns,
        traj.token_ids,
        traj.loss_mask,
        traj.logprobs,
        StopReason.MAX_TURNS,
    )
    _, comps = make("calculator-v0").rubric().score(cut)
    assert comps["correct_answer"] == 0.0 and comps["grounded_answer"] == 0.0
