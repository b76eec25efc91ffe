"""MiniWoB++ envs (``miniwob/<task>-v0``) in real headless Chromium: the contract (check_env with
the oracle on every task of the set), replay, error observations, audit, and that no chromium or
chromedriver process outlives a close, an exception, a browser crash or a killed owner.

Needs the ``web`` extra (miniwob, selenium) and Debian's chromium + chromium-driver (``.ci/run``
installs both); skips with the reason otherwise. About 2 minutes on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("miniwob", reason="the 'web' extra is not installed: pip install '.[web]'")
pytest.importorskip("selenium", reason="the 'web' extra is not installed: pip install '.[web]'")

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.envs.checker import check_env, play_oracle  # noqa: E402
from agentic_rl.envs.web.miniwob import BrowserError, miniwob_task_names  # noqa: E402
from agentic_rl.envs.web.miniwob_tasks import MINIWOB_TASKS, random_action  # noqa: E402
from agentic_rl.tools import parse_tool_calls  # noqa: E402
from agentic_rl.tools.browser import BrowserUnavailableError, find_browser  # noqa: E402
from agentic_rl.trajectories.replay import replay  # noqa: E402
from agentic_rl.types import Action  # noqa: E402
from tests.browser_helpers import assert_nothing_left_after_sigkill, wait_gone  # noqa: E402

try:
    find_browser()
except BrowserUnavailableError as exc:
    pytest.skip(f"{exc} (`make test` installs them when run as root)", allow_module_level=True)

TASKS = miniwob_task_names()


def act(env, text: str, turn: int = 0):
    """Step ``env`` with the reply ``text`` parsed as the rollout engine does."""
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return env.step(Action(text, calls, errors))


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_the_task_set_spans_click_type_forms_and_multi_step():
    assert len(TASKS) >= 12
    assert {t.kind for t in MINIWOB_TASKS.values()} == {"click", "type", "form", "multi-step"}


@pytest.mark.parametrize("task", TASKS)
def test_check_env_with_the_oracle(task):
    report = check_env(f"miniwob/{task}-v0", seeds=(0,))
    assert report.oracle_success == 1.0
    assert {"reset_determinism", "oracle", "rubric", "step_after_end"} <= set(report.passed)


def test_oracle_succeeds_on_every_task_over_more_seeds():
    """One browser per task, 4 more seeds each: 48 episodes, the oracle must win >= 95 %."""
    wins, missed = 0, []
    for task in TASKS:
        env = make(f"miniwob/{task}-v0")
        try:
            for seed in range(1, 5):
                success = play_oracle(env, seed, max_turns=12).turns[-1].info["success"]
                wins += success >= 1.0
                if success < 1.0:
                    missed.append((task, seed))
        finally:
            env.close()
    assert wins >= 0.95 * 4 * len(TASKS), missed


def test_browser_starts_lazily_and_close_leaves_no_process():
    env = make("miniwob/click-button-v0")
    assert env.browser_pids() == []  # nothing runs before the first reset
    env.reset(seed=0)
    browser = env._mw.instance.browser
    pgid, profile = browser.pgid, browser.profile
    assert env.browser_pids() and os.path.isdir(profile)
    env.close()
    assert wait_gone(pgid, profile, timeout=2.0) == []
    assert not os.path.exists(profile)
    env.close()  # twice is fine


def test_replay_of_a_recorded_run_reproduces_it():
    """An oracle episode and a random one (wrong clicks, typing into the wrong field) replay
    exactly in a fresh env: same observations, rewards and ends, on the turn clock."""
    for task, seed, policy in (
        ("search-engine", 7, "oracle"),
        ("click-checkboxes", 3, "oracle"),
        ("login-user", 5, "random"),
        ("use-autocomplete", 2, "random"),
    ):
        first, second = make(f"miniwob/{task}-v0"), make(f"miniwob/{task}-v0")
        try:
            if policy == "random":
                rng = random.Random(seed)
                first.oracle_reply = lambda env=first, rng=rng: call(
                    **random_action(env.utterance, env.page, rng)
                )
            recorded = play_oracle(first, seed, max_turns=5)
            result = replay(recorded, second)
            assert result.divergences == (), (task, result.divergences)
            assert result.turns_replayed == len(recorded.turns)
        finally:
            first.close()
            second.close()


def test_unknown_stale_and_malformed_actions_are_error_observations():
    env = make("miniwob/enter-text-v0")
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = act(env, call("click", ref=999))
        assert not (terminated or truncated) and info["tool_errors"] == 1
        assert "unknown ref 999" in obs.messages[0].content and "Refs on the page: 1, 2" in (
            obs.messages[0].content
        )
        # a ref whose element left the page is stale, not unknown
        env._driver().execute_script("document.querySelector('[data-arl-ref=\"2\"]').remove()")
        obs, *_ = act(env, call("click", ref=2), 1)
        assert "ref 2 is stale" in obs.messages[0].content
        malformed = [
            (call("click", ref="two"), "ref"),  # wrong type: the schema names the argument
            (call("hover", ref=1), "unknown tool 'hover'"),
            ('<tool_call>{"name": "click", "arguments": {</tool_call>', "could not parse"),
            (call("press", key="Hyper"), "unknown key 'Hyper'"),
            (call("select", ref=1, option="x"), "not a <select>"),
            (call("scroll", target="page", direction="sideways"), "must be one of"),
        ]
        for turn, (text, expected) in enumerate(malformed, start=2):
            obs, reward, terminated, truncated, info = act(env, text, turn)
            assert info["tool_errors"] == 1 and expected in obs.messages[0].content, (
                text,
                obs.messages[0].content,
            )
            assert obs.messages[-1].role == "user" and "Page:" in obs.messages[-1].content
        assert not env.episode.done  # errors never end the episode; the clock still ran
        assert info["elapsed_s"] == 8.0
    finally:
        env.close()


def test_a_reply_without_a_tool_call_and_the_turn_clock_timeout():
    env = make("miniwob/click-button-v0", seconds_per_action=4.0)
    try:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = act(env, "I am thinking.")
        assert "No action" in obs.messages[-1].content and info["actions"] == 0
        for turn in range(1, 4):  # three wrong-kind actions: 12 s > the task's 10 s
            obs, reward, terminated, truncated, info = act(env, call("press", key="Tab"), turn)
            if truncated:
                break
        assert truncated and not terminated and reward == -1.0 and info["reason"] == "timed out"
    finally:
        env.close()


def test_reward_is_miniwobs_with_the_time_penalty_on_the_turn_clock():
    env = make("miniwob/login-user-v0")
    try:
        trajectory = play_oracle(env, 2, max_turns=8)
        last = trajectory.turns[-1]
        assert len(trajectory.turns) == 3 and last.reward == pytest.approx(1.0 - 3 / 10)
        _, comps = env.rubric().score(trajectory)
        assert comps["miniwob_success"] == 1.0 and comps["time_penalty"] == pytest.approx(0.3)
        assert comps["valid_actions"] == 1.0 and comps["actions"] == 3.0
    finally:
        env.close()


def test_actions_are_audited_and_the_permission_policy_applies(tmp_path):
    audit = tmp_path / "audit.jsonl"
    permissions = {
        "default": "deny",
        "tools": {"click": {"side_effect": "workspace_write"}, "type": {"side_effect": "network"}},
    }
    env = make("miniwob/enter-text-v0", audit_path=str(audit), permissions=permissions, run_id="r1")
    try:
        env.reset(seed=0, options={"trajectory_id": "t-audit"})
        obs, *_ = act(env, call("type", ref=1, text="x"))
        assert obs.messages[0].content.startswith("Denied")
        obs, *_ = act(env, call("click", ref=2), 1)
    finally:
        env.close()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["tool"], r["decision"]) for r in records] == [("type", "deny"), ("click", "allow")]
    assert all(r["trajectory_id"] == "t-audit" and r["run_id"] == "r1" for r in records)
    assert records[1]["arguments"] == {"ref": 2}


def test_no_process_left_after_an_exception_in_an_episode():
    with pytest.raises(RuntimeError, match="boom"):
        with make("miniwob/click-link-v0") as env:
            env.reset(seed=0)
            browser = env._mw.instance.browser
            pgid, profile = browser.pgid, browser.profile
            raise RuntimeError("boom")
    assert wait_gone(pgid, profile, timeout=2.0) == []


def test_a_crashed_browser_is_closed_and_the_next_reset_starts_a_fresh_one():
    env = make("miniwob/click-button-v0")
    try:
        env.reset(seed=0)
        browser = env._mw.instance.browser
        pgid, profile = browser.pgid, browser.profile
        os.killpg(pgid, signal.SIGKILL)  # chromedriver and Chromium die mid-episode
        with pytest.raises(BrowserError, match="next reset"):
            act(env, call("click", ref=1))
        assert wait_gone(pgid, profile, timeout=2.0) == [] and env._mw is None
        obs, _ = env.reset(seed=0)  # a fresh browser
        assert "Task:" in obs.messages[-1].content and env.browser_pids()
    finally:
        env.close()


OWNER = textwrap.dedent(
    """
    import json, sys, time
    from agentic_rl.envs import make
    env = make("miniwob/click-button-v0")
    env.reset(seed=0)
    browser = env._mw.instance.browser
    print(json.dumps({"pgid": browser.pgid, "profile": browser.profile,
                      "pids": browser.pids()}), flush=True)
    time.sleep(600)
    """
)


def test_no_process_left_after_the_owning_process_is_killed():
    assert_nothing_left_after_sigkill(OWNER)


def test_screenshots_are_stored_with_the_trajectory_and_shown_in_the_viewer():
    import base64
    import tempfile

    from selenium.webdriver.common.by import By

    from agentic_rl.trajectories.serialize import trajectory_to_record
    from agentic_rl.trajectories.viewer import write_view

    # a folder any user may read: a root owner's browser runs as a uid of its own
    shown = tempfile.mkdtemp(prefix="agentic-rl-view-")
    os.chmod(shown, 0o755)
    env = make("miniwob/click-option-v0", screenshots=True)
    try:
        trajectory = env.rubric().apply(play_oracle(env, 0, max_turns=6))
        assert len(trajectory.turns) == 2  # click the radio button, then Submit
        png = base64.b64decode(trajectory.info["screenshot_png"])  # the reset page
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert "screenshot_png" in trajectory.turns[0].info
        assert "screenshot_png" not in trajectory.turns[1].info  # the episode ended there
        page = write_view(Path(shown, "view.html"), [trajectory_to_record(trajectory)])
        driver = env._driver()  # the env's own browser shows the viewer page
        driver.get(page.as_uri())
        driver.find_element(By.CSS_SELECTOR, "#rows tr").click()
        shots = driver.find_elements(By.CSS_SELECTOR, "#d-chat img.shot")
        widths = [driver.execute_script("return arguments[0].naturalWidth;", s) for s in shots]
        assert len(shots) == 2 and all(w > 0 for w in widths)
        assert "Page:" in driver.find_element(By.ID, "d-chat").text  # the page after a tool turn
    finally:
        env.close()
        shutil.rmtree(shown, ignore_errors=True)


UNDER_MIMALLOC = textwrap.dedent(
    """
    from agentic_rl.allocator import active_allocator, reexec_with_allocator
    reexec_with_allocator()  # what the agentic-rl command does first
    from agentic_rl.envs import make
    from agentic_rl.envs.checker import play_oracle
    env = make("miniwob/click-button-v0")
    try:
        won = play_oracle(env, 0, max_turns=12).turns[-1].info["success"]
        print(active_allocator(), bool(won), flush=True)
    finally:
        env.close()
    """
)


def test_the_browser_starts_in_a_process_running_under_the_trainers_mimalloc():
    """Regression: the trainer re-executes itself with mimalloc preloaded, and Chromium inherited
    ``LD_PRELOAD`` and exited at start (``SessionNotCreatedException``) in every ``train`` run."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "AGENTIC_RL_ALLOCATOR")}
    out = subprocess.run(
        [sys.executable, "-c", UNDER_MIMALLOC], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    allocator_name, won = out.stdout.split()
    if allocator_name != "mimalloc":
        pytest.skip("mimalloc (cmeel-mimalloc) is not available here")
    assert won == "True"
