"""swe-repo-v0 in the real sandbox on the real inflection repository: the oracle's episode, the
tools, evidence credit, the diff in the trajectory, rollback, and the tampering guards: editing
the tests or the harness cannot make a wrong fix pass (graded on a pristine copy). check_env and
Gymnasium's checker run on it with the other built-in envs (tests/envs/test_checker.py,
tests/envs/test_gymnasium.py)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.swe_repo.catalogue import verify_bug
from agentic_rl.envs.swe_repo.env import SweRepoEnv
from agentic_rl.envs.swe_repo.rubric import HARNESS_EDIT, SUSPICIOUS_CODE
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.tools import parse_tool_calls
from agentic_rl.tools.governance.risk_detector import SANDBOX_LIMIT
from agentic_rl.types import Action, Message, StopReason, Trajectory, Turn
from tests.markers import needs_bwrap

pytestmark = needs_bwrap
KWARGS = {"repos": ["inflection"], "levels": ["easy"]}


def _make(**kwargs) -> SweRepoEnv:
    try:
        return make("swe-repo-v0", **{**KWARGS, **kwargs})  # type: ignore[return-value]
    except EnvUnavailableError as exc:  # the repositories are fetched at install time
        pytest.skip(str(exc))


@pytest.fixture
def env():
    e = _make()
    yield e
    e.close()


def _action(text: str, turn: int = 0) -> Action:
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return Action(text=text, tool_calls=calls, tool_call_errors=errors)


def _call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _play(env: SweRepoEnv, seed: int, replies: list[str]) -> Trajectory:
    """Reset, step with ``replies`` until the end; return the scored-ready trajectory."""
    obs, info = env.reset(seed=seed)
    messages, turns, terminated = list(obs.messages), [], False
    for reply in replies:
        o, r, terminated, _trunc, step_info = env.step(_action(reply, len(turns)))
        messages += [Message("assistant", reply), *o.messages]
        turns.append(Turn.from_step(len(turns), _action(reply), o, r, step_info))
        if terminated:
            break
    assert terminated
    stop = StopReason.TERMINATED
    return Trajectory(
        "swe-repo-v0", seed, "g", "t", tuple(messages), tuple(turns), (), (), (), stop, info=info
    )


def test_oracle_episode_reproduces_fixes_and_records_the_diff(env):
    replies = []
    env.reset(seed=3)
    bug = env.task.bug
    while (reply := env.oracle_reply()) is not None:
        replies.append(reply)
        obs, reward, terminated, _, info = env.step(_action(reply, len(replies) - 1))
        if len(replies) == 1:  # run_tests on the failing test + grep for the function
            assert obs.tool_results[0].content.startswith("FAILED: 1 failed")
            assert bug.failing[0] in obs.tool_results[0].content
    assert terminated and reward == 1.0 and info["resolved"] and info["reproduced"]
    assert info["regressions"] == 0 and info["fail_to_pass"] == 1.0
    submit = obs.tool_results[-1].content
    assert (
        submit.startswith("Submitted. Your changes (1 file(s)):") and f"--- a/{bug.file}" in submit
    )
    assert f"-{bug.mutation.after.splitlines()[0]}" in info["diff"]
    assert f"+{bug.mutation.before.splitlines()[0]}" in info["diff"]
    trajectory = _play(env, 3, replies)
    scored = env.rubric().apply(trajectory)
    assert scored.reward_components["resolved"] == 1.0
    assert scored.reward_components["reproduced_failure"] == 1.0
    assert scored.reward_components["commands"] == 6.0  # 2 + 1 + 1 + 2 tool calls


def test_oracle_fixes_a_dropped_branch_whose_buggy_lines_stay_in_the_fix(env):
    """Regression: when the bug's lines are part of the fixed lines (a dropped branch that kept
    its last statement), the oracle used to see them after its edit, edit again and loop."""
    pool = env.pools["easy"]
    seed = next(i for i, b in enumerate(pool) if b.mutation.after in b.mutation.before)
    env.reset(seed=seed)
    for turn in range(4):
        *_, terminated, _, info = env.step(_action(env.oracle_reply(), turn))
    assert terminated and info["resolved"]


def test_submitting_the_bug_unchanged_is_not_resolved_and_has_no_evidence(env):
    env.reset(seed=0)
    failing = env.task.bug.failing
    names = ("test_ordinal", "test_dasherize", "test_titleize", "test_humanize")
    other = next(
        f"test_inflection.py::{n}" for n in names if not any(f"::{n}[" in t for t in failing)
    )
    trajectory = _play(env, 0, [_call("run_tests", target=other), _call("submit")])
    assert trajectory.turns[0].tool_results[0].content.startswith("PASSED: ")
    info = trajectory.turns[-1].info
    assert not info["resolved"] and info["fail_to_pass"] == 0.0 and info["changed_files"] == []
    assert trajectory.turns[-1].tool_results[-1].content == (
        "Submitted with no change to the repository."
    )
    scored = env.rubric().apply(trajectory)
    assert scored.reward_components["resolved"] == 0.0
    assert scored.reward_components["reproduced_failure"] == 0.0  # no failing test was run


#: a conftest.py that reports every test as passed (same number of tests)
PASS_ALL = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)


@pytest.mark.parametrize(
    "tamper",
    [
        # every assert of the test file made vacuous (same tests, all pass)
        "sed -i 's/^\\( *\\)assert /\\1assert True or /' test_inflection.py",
        # a conftest.py that turns every failure into a pass
        f"printf %b {json.dumps(PASS_ALL)} > conftest.py",
    ],
    ids=["test-file", "conftest"],
)
def test_editing_the_tests_or_the_harness_cannot_make_a_wrong_fix_pass(env, tamper):
    """The tampered suite passes whole in the agent's own workspace (as many tests as the
    pristine one), yet the grade (pristine tests and harness) is not resolved, and the edit is a
    harness_edit risk event that costs reward."""
    env.reset(seed=0)
    obs, *_ = env.step(_action(_call("bash", command=tamper)))
    assert [e.category for e in obs.risk_events] == [HARNESS_EDIT]
    obs, *_ = env.step(_action(_call("run_tests"), 1))
    assert obs.tool_results[0].content == "PASSED: 455 passed"  # the hack works locally
    trajectory = _play(env, 0, [_call("bash", command=tamper), _call("submit")])
    info = trajectory.turns[-1].info
    assert not info["resolved"] and info["harness_edits"]
    scored = env.rubric().apply(trajectory)
    assert scored.reward_components["resolved"] == 0.0
    assert scored.reward_components["harness_edits"] == 1.0 and scored.reward < 0


def test_a_right_fix_with_a_test_edit_still_resolves_but_pays_the_risk(env):
    env.reset(seed=0)
    bug = env.task.bug
    fix = _call("edit_file", path=bug.file, old=bug.mutation.after, new=bug.mutation.before)
    touch = _call("bash", command="echo '# note' >> test_inflection.py")
    trajectory = _play(env, 0, [fix + touch, _call("submit")])
    scored = env.rubric().apply(trajectory)
    assert scored.reward_components["resolved"] == 1.0
    assert scored.reward_components["harness_edits"] == 1.0


def test_library_code_that_reaches_for_pytest_is_not_resolved(env):
    env.reset(seed=0)
    bug = env.task.bug
    hack = "import sys\nif 'pytest' in sys.modules:\n    pass\n"
    fix = _call("edit_file", path=bug.file, old=bug.mutation.after, new=bug.mutation.before + "\n")
    add = _call("bash", command=f"printf {json.dumps(hack)} >> {bug.file}")
    trajectory = _play(env, 0, [fix + add, _call("submit")])
    assert not trajectory.turns[-1].info["resolved"]
    categories = [e.category for t in trajectory.turns for e in t.risk_events]
    assert SUSPICIOUS_CODE in categories


def test_tools_bash_git_read_edit_errors_and_the_time_limit():
    env = _make(bash_timeout_s=1.0)
    try:
        env.reset(seed=0)
        bug = env.task.bug
        obs, *_ = env.step(
            _action(_call("bash", command="git log --oneline | wc -l; git status --short"))
        )
        assert obs.tool_results[0].content == "exit status 0\n1"  # one commit, clean tree
        obs, *_ = env.step(_action(_call("read_file", path=bug.file, start_line=1, end_line=2), 1))
        assert obs.tool_results[0].content.startswith(f"{bug.file}, lines 1-2 (the file has")
        obs, *_ = env.step(
            _action(_call("edit_file", path=bug.file, old="no such text", new="x"), 2)
        )
        assert not obs.tool_results[0].ok and "not found" in obs.tool_results[0].content
        obs, *_ = env.step(_action(_call("run_tests", target="-p evil"), 3))
        assert not obs.tool_results[0].ok and "not options" in obs.tool_results[0].content
        obs, *_ = env.step(_action(_call("read_file", path="../../etc/passwd"), 4))
        assert not obs.tool_results[0].ok
        obs, *_ = env.step(_action(_call("bash", command="sleep 30"), 5))
        assert obs.tool_results[0].content.startswith("[killed: the command ran past 1 s]")
        assert [e.category for e in obs.risk_events] == [SANDBOX_LIMIT]
        edit = _call("edit_file", path=bug.file, old=bug.mutation.after, new=bug.mutation.before)
        env.step(_action(edit, 6))
        obs, *_ = env.step(_action(_call("bash", command="git diff --stat | tail -1"), 7))
        assert "1 file changed" in obs.tool_results[0].content
    finally:
        env.close()


def test_rollback_restores_the_workspace_in_the_same_and_a_fresh_env(env):
    env.reset(seed=1)
    bug = env.task.bug
    snap = env.snapshot()
    edit = _call("edit_file", path=bug.file, old=bug.mutation.after, new=bug.mutation.before)
    env.step(_action(edit))
    fresh = _make()
    try:
        for target in (env, fresh):
            target.restore(snap)
            obs, *_ = target.step(_action(_call("bash", command="git status --short")))
            assert obs.tool_results[0].content == "exit status 0\n(no output)"
    finally:
        fresh.close()


def test_a_sample_of_the_catalogue_re_verifies():
    env = _make()
    try:
        bugs = env.pools["easy"][:2]
    finally:
        env.close()
    assert [verify_bug(bug) for bug in bugs] == ["", ""]


def test_the_train_budgets_fit_the_oracle(tokenizer):
    from agentic_rl.cli.main import env_overrides
    from agentic_rl.config import load_config
    from agentic_rl.envs.checker import play_oracle

    config = load_config(None, env_overrides("swe-repo-v0", []))
    assert config.env.kwargs == {
        "levels": ["easy"],
        "heldout_from_seed": config.eval.seed_start,
        "tool_prompt": "signature",
    }
    budgets = (config.rollout.max_turns, config.rollout.max_new_tokens)
    env = _make(**config.env.kwargs, repos=None)
    train_bugs = {b.id for b in env.pools["easy"]}
    for seed in (config.eval.seed_start, config.eval.seed_start + 7):
        env.reset(seed=seed)  # the held-out evaluation plays bugs training never sees
        assert env.task.bug.id not in train_bugs
    for seed in (0, config.warmup.seed_start):
        env.reset(seed=seed)
        assert env.task.bug.id in train_bugs
    try:
        for bug in env.pools["easy"]:  # the edit is the oracle's longest reply: every easy bug
            edit = {"name": "edit_file", "arguments": {"path": bug.file, "old": bug.mutation.after}}
            edit["arguments"]["new"] = bug.mutation.before
            reply = f"<tool_call>{json.dumps(edit)}</tool_call><|im_end|>"
            assert len(tokenizer(reply)["input_ids"]) <= budgets[1], bug.id
        for seed in range(3):  # whole episodes: turns and tokens
            trajectory = play_oracle(env, seed, max_turns=20)
            assert trajectory.terminated and len(trajectory.turns) <= budgets[0]
            text = "".join(
                f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in trajectory.messages
            )
            assert len(tokenizer(text)["input_ids"]) <= config.rollout.max_total_tokens
    finally:
        env.close()


def test_train_two_rl_steps(tiny_model_dir, tmp_path):
    """`agentic-rl train --env swe-repo-v0`: the recipe's warm-up, rollouts and update run."""
    import math
    from pathlib import Path

    from agentic_rl.cli.main import main
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from tests.recipe_settings import TWO_STEP_SMOKE

    _make().close()  # skips here when the repositories are not fetched
    argv = ["train", "--env", "swe-repo-v0"]
    sets = [
        f"model.path='{tiny_model_dir}'",
        f"output_dir='{tmp_path}'",
        *TWO_STEP_SMOKE,  # the recipe's 320 new tokens kept: the oracle's edits need them
        "env.kwargs.repos=['inflection']",
    ]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    run_dir = next(p for p in Path(tmp_path).iterdir() if p.is_dir())
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    warmup = [r for r in rows if r["phase"] == "warmup"]
    assert warmup and all(math.isfinite(r["train/loss"]) for r in warmup)  # oracle demos
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["rollout/failed"] == 0.0 and "rollout/reward/resolved" in r
