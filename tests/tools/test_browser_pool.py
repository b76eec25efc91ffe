"""The browser pool (:mod:`agentic_rl.tools.browser.pool`) in real headless Chromium: pooled
MiniWoB envs share one browser, a dead or failed browser is never handed out again, ``max_idle``
holds, and no process outlives ``close_all()`` or a SIGKILLed owner.

Needs the ``web`` extra (miniwob, selenium) and Debian's chromium + chromium-driver; skips with
the reason otherwise. At most two browsers run at once.
"""

from __future__ import annotations

import os
import signal
import textwrap

import pytest

pytest.importorskip("miniwob", reason="the 'web' extra is not installed: pip install '.[web]'")
pytest.importorskip("selenium", reason="the 'web' extra is not installed: pip install '.[web]'")

import inspect  # noqa: E402

from agentic_rl.cli.main import env_overrides  # noqa: E402
from agentic_rl.config import load_config  # noqa: E402
from agentic_rl.envs import make  # noqa: E402
from agentic_rl.envs.checker import play_oracle  # noqa: E402
from agentic_rl.envs.registry import get_spec  # noqa: E402
from agentic_rl.envs.web.miniwob import BrowserError  # noqa: E402
from agentic_rl.tools import parse_tool_calls  # noqa: E402
from agentic_rl.tools.browser import (  # noqa: E402
    BrowserConfig,
    BrowserUnavailableError,
    find_browser,
    live_pids,
    pool,
)
from agentic_rl.types import Action  # noqa: E402
from tests.browser_helpers import assert_nothing_left_after_sigkill, wait_gone  # noqa: E402

try:
    find_browser()
except BrowserUnavailableError as exc:
    pytest.skip(f"{exc} (`make test` installs them when run as root)", allow_module_level=True)


@pytest.fixture(autouse=True)
def empty_default_pool():
    """Every test starts and ends with no idle browser in the process-wide pool."""
    pool.close_all()
    yield pool.default_pool()
    pool.close_all()


def test_train_with_a_miniwob_env_turns_the_pool_on_unless_the_user_turns_it_off():
    env_id = "miniwob/click-button-v0"
    assert "browser_pool" in inspect.signature(get_spec(env_id).factory).parameters
    recipe = {"browser_pool": True, "tool_prompt": "signature"}
    assert load_config(None, env_overrides(env_id, [])).env.kwargs == recipe
    off = env_overrides(env_id, ["env.kwargs.browser_pool=false"])
    assert load_config(None, off).env.kwargs == {**recipe, "browser_pool": False}
    with make(env_id) as env:
        assert env.browser_pool is False  # the env itself: off by default


def test_sequential_pooled_envs_share_one_browser_and_close_all_leaves_no_process():
    seen = []
    for seed in (0, 1):
        env = make("miniwob/click-button-v0", browser_pool=True)
        try:
            trajectory = play_oracle(env, seed, max_turns=12)
            assert trajectory.turns[-1].info["success"] == 1.0
            browser = env._mw.instance.browser
            seen.append((browser.pgid, browser.profile))
        finally:
            env.close()
        assert pool.default_pool().idle_count() == 1  # handed back, not killed
    assert seen[0] == seen[1]  # the same chromedriver (process group) and profile
    pgid, profile = seen[0]
    assert live_pids(pgid, profile)  # still running, idle on about:blank
    assert pool.close_all() == 1
    assert wait_gone(pgid, profile, timeout=2.0) == []
    assert not os.path.exists(profile)


def test_another_task_reuses_the_browser_and_replays_the_same_page():
    """A pooled browser that ran one task loads the next task's page afresh: the same seed
    gives the same utterance and page as in a browser of its own."""
    env = make("miniwob/click-link-v0", browser_pool=True)
    try:
        env.reset(seed=0)
        pgid = env._mw.instance.browser.pgid
    finally:
        env.close()
    pooled, own = (make("miniwob/enter-text-v0", browser_pool=flag) for flag in (True, False))
    try:
        obs_pooled, _ = pooled.reset(seed=3)
        assert pooled._mw.instance.browser.pgid == pgid
        obs_own, _ = own.reset(seed=3)
        assert obs_pooled.messages[-1].content == obs_own.messages[-1].content
    finally:
        pooled.close()
        own.close()


def test_a_browser_whose_driver_was_killed_is_not_handed_out_again():
    config = BrowserConfig()
    first = pool.acquire(config)
    pgid, profile = first.pgid, first.profile
    assert pool.release(first) and pool.default_pool().idle_count() == 1
    os.killpg(pgid, signal.SIGKILL)  # chromedriver and Chromium die while idle
    second = pool.acquire(config)
    try:
        assert second is not first and second.pgid != pgid
        assert second.driver.execute_script("return 1 + 1;") == 2
        assert pool.default_pool().idle_count() == 0
        assert wait_gone(pgid, profile, timeout=2.0) == [] and not os.path.exists(profile)
    finally:
        second.close()


def test_a_pooled_browser_that_crashed_in_an_episode_is_closed_not_handed_back():
    env = make("miniwob/click-button-v0", browser_pool=True)
    try:
        env.reset(seed=0)
        browser = env._mw.instance.browser
        pgid, profile = browser.pgid, browser.profile
        os.killpg(pgid, signal.SIGKILL)
        calls, errors = parse_tool_calls(
            '<tool_call>{"name": "click", "arguments": {"ref": 1}}</tool_call>'
        )
        with pytest.raises(BrowserError, match="next reset"):
            env.step(Action("click", calls, errors))
        assert pool.default_pool().idle_count() == 0
        assert wait_gone(pgid, profile, timeout=2.0) == []
    finally:
        env.close()
    assert pool.default_pool().idle_count() == 0


def test_max_idle_is_honoured_and_configs_are_not_mixed():
    small = pool.BrowserPool(max_idle=1)
    wide = BrowserConfig(window=(1024, 700))
    first, second = small.acquire(), small.acquire(wide)
    pgid, profile = second.pgid, second.profile
    try:
        assert small.release(first) is True
        assert small.release(second) is False  # the pool holds max_idle = 1 already
        assert wait_gone(pgid, profile, timeout=2.0) == []
        assert second.driver is None and small.idle_count() == 1
        third = small.acquire(wide)  # the idle one has another config: a new browser
        try:
            assert third is not first and small.idle_count() == 1
            assert small.acquire() is first and small.idle_count() == 0
        finally:
            third.close()
    finally:
        first.close()
        second.close()
        small.close_all()
    with pytest.raises(ValueError, match="max_idle"):
        pool.BrowserPool(max_idle=-1)


OWNER = textwrap.dedent(
    """
    import json, time
    from agentic_rl.envs import make
    from agentic_rl.tools.browser import pool
    env = make("miniwob/click-button-v0", browser_pool=True)
    env.reset(seed=0)
    env.close()  # the browser goes back to the pool, idle
    (browser,) = pool.default_pool().idle_browsers()
    print(json.dumps({"pgid": browser.pgid, "profile": browser.profile,
                      "pids": browser.pids()}), flush=True)
    time.sleep(600)
    """
)


def test_no_process_left_after_the_owner_of_an_idle_pooled_browser_is_killed():
    assert_nothing_left_after_sigkill(OWNER)


def test_the_pool_size_comes_from_the_environment_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_BROWSER_POOL_MAX_IDLE", "4")
    assert pool._max_idle_from_env() == 4
    for bad in ("many", "-2"):
        monkeypatch.setenv("AGENTIC_RL_BROWSER_POOL_MAX_IDLE", bad)
        with pytest.warns(UserWarning, match="AGENTIC_RL_BROWSER_POOL_MAX_IDLE"):
            assert pool._max_idle_from_env() == pool.DEFAULT_MAX_IDLE
    monkeypatch.delenv("AGENTIC_RL_BROWSER_POOL_MAX_IDLE")
    assert pool._max_idle_from_env() == pool.DEFAULT_MAX_IDLE
    with pytest.raises(ValueError, match="max_idle"):
        pool.BrowserPool(max_idle=-1)
