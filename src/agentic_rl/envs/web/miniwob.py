"""MiniWoB++ web tasks in a real headless Chromium: ``miniwob/<task>-v0`` (extra ``web``).

The benchmark is Farama's ``miniwob`` package (1.1.0: the task pages ship in its wheel), driven
through its own Gymnasium env (``miniwob.environment.MiniWoBEnvironment``: seeding, episode
start, reward, done) in Debian's ``chromium`` with ``chromium-driver``. The task set and its
oracles are in :mod:`agentic_rl.envs.web.miniwob_tasks`; ``docs/web_envs.md`` has the details
and the baselines.

Observation
    On reset: the system prompt (instructions and the five tool schemas) and a user message
    ``Task: <utterance>`` followed by the page rendered by
    :func:`~agentic_rl.tools.browser.snapshot.take_snapshot` (one line per element with its
    ``[ref]``, role, text, value, state; refs start at 1 every episode). After a turn: one
    ``tool`` message per action, then a user message with the page as it is now (or how the
    task ended). With ``screenshots=True`` also a PNG of the task area in
    ``info["screenshot_png"]`` (base64), stored with the trajectory and shown by the viewer.
Actions
    Tool calls ``click(ref)``, ``type(ref, text)``, ``press(key)``, ``select(ref, option)``,
    ``scroll(target, direction)`` (:mod:`agentic_rl.tools.browser.actions`), run through the
    :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission policy with their
    side-effect classes, audit log). An unknown or stale ref, a wrong element or a malformed
    call is an error observation; the episode goes on. A reply without a tool call is a turn
    without an action (the clock still runs).
Reward
    MiniWoB's own: the task's raw reward r in [-1, 1] (1 success, -1 failure, partial credit
    in between for some tasks) and its time penalty: a positive r is scaled by
    ``max(0, 1 - t / T)``, T the task's episode limit (10 s for most tasks). ``step`` returns
    that reward on the last turn, 0 before. The clock t is, by default (``clock="turn"``),
    ``seconds_per_action`` (1 s) per action taken, so that a replay reproduces the rewards
    exactly; ``clock="wall"`` keeps MiniWoB's wall clock (a slow policy then times out). Reaching
    T without an end ends the episode as MiniWoB's timeout does (r = -1, ``truncated``).
    Rubric: outcome ``miniwob_success`` = (r + 1) / 2 of a finished episode (1 success, 0
    failure or no end); cost ``time_penalty`` (weight 1) = the part of the success the clock
    took, so outcome − time penalty = MiniWoB's reward mapped to [0, 1] for a success;
    ``actions`` (weight 0, logged), ``generated_tokens`` (0.0005 per token); process
    ``valid_actions`` (fraction of actions that ran without error, weight 0.2);
    ``miniwob_reward`` (MiniWoB's reward, weight 0, logged); risk: the built-in components.
Horizon
    The task ends it (terminated) or the clock reaches T (truncated); rollout budgets apply on top.
Seeds
    ``reset(seed)`` seeds MiniWoB's page generator (``Math.seedrandom``): same seed, same task,
    same page, same refs. Replaying the same actions gives the same observations and rewards on
    the turn clock (``tests/envs/test_miniwob.py`` checks it).
Browser lifecycle
    One Chromium per env, started on the first ``reset``, reused across episodes, closed by
    ``close()``, on a failure while starting, and when a browser call fails in ``reset``/``step``
    (the error is raised; the next ``reset`` starts a fresh one); never left running after the
    process dies (:mod:`agentic_rl.tools.browser.launch`). With ``browser_pool=True`` (what
    ``agentic-rl train --env miniwob/<task>-v0`` sets) the browser comes from the process-wide
    pool (:mod:`agentic_rl.tools.browser.pool`) and ``close()`` hands it back instead of killing
    it; a browser that failed is closed, never handed back.
Snapshots
    Not supported (a live page): rollback replays from ``reset(seed)``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.registry import EnvSpec
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.envs.web.miniwob_tasks import MINIWOB_TASKS
from agentic_rl.errors import EnvUnavailableError, UnknownEnvError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import tool_call_format
from agentic_rl.rewards.costs import token_cost
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.tools.browser.actions import SIDE_EFFECTS, BrowserActions
from agentic_rl.tools.browser.launch import BrowserConfig, BrowserUnavailableError, find_browser
from agentic_rl.tools.browser.snapshot import PageSnapshot, take_snapshot
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Message, Observation, Trajectory

__all__ = [
    "MINIWOB_PATTERN",
    "BrowserError",
    "MiniWoBEnv",
    "miniwob_task_names",
    "resolve_miniwob_id",
]

MINIWOB_PATTERN = "miniwob/<task>-v0"
MINIWOB_PREFIX = "miniwob/"
_ID = re.compile(r"^miniwob/([a-z0-9-]+?)-v(\d+)$")
INSTALL = "pip install 'agentic-rl[web]' and Debian's chromium + chromium-driver"
#: MiniWoB's own widgets, not part of the task (the utterance is shown as the task)
SKIP = ("#reward-display", "#sync-task-cover", "#click-canvas", "#query")
INSTRUCTIONS = (
    "You control a web browser to do the task. The page is shown as lines; [N] is the ref of an "
    "element. Act with one tool call per reply: click, type, press, select or scroll, using refs "
    "from the latest page. Be quick: each action costs time."
)

#: budgets of ``agentic-rl train --env miniwob/<task>-v0``: one short tool call per turn, the
#: longest oracle episodes take 5 actions; a page is ~100-400 tokens per turn; the trainer
#: builds an env per episode, so its envs share pooled browsers
MINIWOB_RECIPE: dict[str, Any] = {
    "rollout.max_turns": 8,
    "rollout.max_new_tokens": 64,
    "rollout.max_total_tokens": 3072,
    "env.kwargs.browser_pool": True,
    "env.kwargs.tool_prompt": "signature",
}


class BrowserError(RuntimeError):
    """The browser failed during ``reset`` or ``step`` (crashed, killed, unresponsive); the env
    closed it, and the next ``reset`` starts a new one. The cause is chained."""


class MiniWoBEnv(ToolEnv):
    """One MiniWoB++ task in headless Chromium (see the module docstring).

    Args:
        task: a task of :data:`~agentic_rl.envs.web.miniwob_tasks.MINIWOB_TASKS`.
        clock: ``"turn"`` (``seconds_per_action`` per action; replays reproduce) or ``"wall"``.
        seconds_per_action: the turn clock's seconds per action, > 0.
        settle_s: the most seconds to let the page settle after an action.
        max_lines: the page rendering's line limit.
        screenshots: put a PNG of the task area (base64) in ``info["screenshot_png"]`` on reset
            and after every turn that does not end the episode (for multimodal policies; the
            trajectory stores it and ``agentic-rl view`` shows it). Off by default: about 10 KB
            a turn, and a blinking caret can make two replays' pixels differ.
        chromium, chromedriver: binary paths (None: found on ``PATH``).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None allows the five tools by
            their side-effect classes (:data:`~agentic_rl.tools.browser.actions.SIDE_EFFECTS`).
        browser_pool: take the browser from the process-wide pool of started browsers
            (:mod:`agentic_rl.tools.browser.pool`) and hand it back on ``close()``, so that
            envs built one per episode do not start a Chromium each; a browser that failed
            during an episode is closed instead. Off: the env's own browser, killed by
            ``close()``. ``agentic-rl train --env miniwob/<task>-v0`` turns it on
            (``--set env.kwargs.browser_pool=false`` turns it off).
        tool_prompt: how the system prompt lists the five tools: ``"json"`` (their schemas,
            ~600 tokens) or ``"signature"`` (typed signatures, ~150 tokens; what
            ``agentic-rl train --env miniwob/<task>-v0`` sets, see
            :func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt`).

    Raises:
        ValueError: an unknown task, clock or ``tool_prompt``, or ``seconds_per_action`` <= 0.
        EnvUnavailableError: ``miniwob``/``selenium`` or Chromium/chromedriver are missing.
    """

    description = "A MiniWoB++ web task in headless Chromium (extra 'web')"

    def __init__(
        self,
        task: str = "click-button",
        clock: str = "turn",
        seconds_per_action: float = 1.0,
        settle_s: float = 1.5,
        max_lines: int = 120,
        screenshots: bool = False,
        chromium: str | None = None,
        chromedriver: str | None = None,
        context: EnvContext = EnvContext(),
        browser_pool: bool = False,
        tool_prompt: str = "json",
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        if task not in MINIWOB_TASKS:
            raise ValueError(f"unknown MiniWoB task {task!r}; the set: {miniwob_task_names()}")
        if clock not in ("turn", "wall"):
            raise ValueError(f'clock must be "turn" or "wall", got {clock!r}')
        if seconds_per_action <= 0:
            raise ValueError(f"seconds_per_action must be > 0, got {seconds_per_action}")
        self.task = MINIWOB_TASKS[task]
        self.clock, self.seconds_per_action = clock, float(seconds_per_action)
        self.max_lines, self.screenshots = int(max_lines), bool(screenshots)
        self.browser_config = BrowserConfig(chromium=chromium, chromedriver=chromedriver)
        self.browser_pool = bool(browser_pool)
        _require_web(self.browser_config)
        self._mw: Any = None
        self.actions = BrowserActions(self._driver, settle_s)
        policy = PermissionPolicy.from_dict(
            {"default": "deny", "tools": {n: {"side_effect": s} for n, s in SIDE_EFFECTS.items()}}
        )
        self.setup_tools(
            self.actions.tools(),
            INSTRUCTIONS,
            policy,
            permissions,
            audit_path,
            run_id,
            tool_prompt=tool_prompt,
        )
        self.utterance: str | None = None
        self.page: PageSnapshot | None = None
        self._actions_taken = 0

    # -- browser ---------------------------------------------------------------------------
    def _start(self) -> Any:
        """The miniwob env, its browser started on first use (closed again if starting fails)."""
        if self._mw is None:
            from agentic_rl.envs.web._miniwob_driver import GuardedMiniWoB

            self._mw = GuardedMiniWoB(
                self.task.name, self.browser_config, self.clock == "turn", self.browser_pool
            )
        return self._mw

    def _driver(self) -> Any:
        if self._mw is None:
            raise RuntimeError("the browser is not running; call reset() first")
        return self._mw.driver

    def _screenshot(self) -> dict[str, str]:
        """``{"screenshot_png": base64 PNG of MiniWoB's task area}`` when screenshots are on."""
        if not self.screenshots:
            return {}
        from selenium.webdriver.common.by import By

        shot = self._guarded(
            lambda: self._driver().find_element(By.ID, "wrap").screenshot_as_base64
        )
        return {"screenshot_png": shot}

    def _snapshot(self, reset_refs: bool = False) -> PageSnapshot:
        self.page = take_snapshot(self._driver(), skip=SKIP, reset_refs=reset_refs)
        return self.page

    @property
    def max_time_s(self) -> float:
        """The task's episode limit T in seconds (MiniWoB's ``core.EPISODE_MAX_TIME``)."""
        return self._mw.instance.max_time_ms / 1000.0 if self._mw is not None else 10.0

    def browser_pids(self) -> list[int]:
        """Pids of this env's live browser processes (empty when none runs). Never raises."""
        if self._mw is None:
            return []
        return self._mw.instance.browser.pids()

    def close(self) -> None:
        """Close the browser (no chromium or chromedriver left; a pooled one goes back to the
        pool) and the base's resources. Idempotent; never raises."""
        self._close_browser(discard=False)
        super().close()

    def _close_browser(self, discard: bool) -> None:
        """Close the browser or hand a pooled one back (``discard``: close it in any case)."""
        mw, self._mw = self._mw, None
        if mw is not None:
            mw.instance.close(discard=discard)

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        """Run a browser call; on failure close the browser (a pooled one is not handed back)
        and raise :class:`BrowserError` (from the cause; KeyboardInterrupt and the like close
        it and propagate as they are)."""
        try:
            return fn()
        except Exception as exc:
            self._close_browser(discard=True)
            self.close()
            raise BrowserError(
                f"the browser of {self.task.name} failed ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); it was closed, and the next "
                "reset() starts a new one"
            ) from exc
        except BaseException:
            self._close_browser(discard=True)
            self.close()
            raise

    # -- episode ---------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the task of ``seed`` (a random seed if None) on a fresh page state.

        Raises:
            BrowserError: the browser failed (it is closed first).
        """
        seed = self.start_episode(seed, options)

        def start() -> dict[str, Any]:
            obs, _ = self._start().reset(seed=seed, options={"record_screenshots": False})
            self._snapshot(reset_refs=True)
            return obs

        obs = self._guarded(start)
        self.utterance, self._actions_taken = str(obs["utterance"]), 0
        text = f"Task: {self.utterance}\n\nPage:\n{self.page.render(self.max_lines)}"
        info = {"task": self.task.name, "kind": self.task.kind, "utterance": self.utterance}
        info.update(max_time_s=self.max_time_s, **self._screenshot())
        return self.first_observation(text), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls in the page, then read MiniWoB's reward (module docstring).

        Raises:
            EpisodeNotStartedError / EpisodeEndedError: the usual guards.
            BrowserError: the browser failed (it is closed first).
        """
        self.begin_step(self.utterance is not None)
        report = self.run_tools(action) if action.tool_calls or action.tool_call_errors else None
        results = report.results if report is not None else ()
        self._actions_taken += len(results)
        _, _, done, _, meta = self._guarded(lambda: self._start().step(None))
        elapsed = (
            self._actions_taken * self.seconds_per_action
            if self.clock == "turn"
            else float(meta.get("elapsed", 0.0))
        )
        raw, reason = float(meta["raw_reward"]), meta.get("reason")
        timed_out = (not done and elapsed >= self.max_time_s) or reason == "timed out"
        if timed_out:
            raw, reason, done = -1.0, "timed out", True
        factor = max(0.0, 1.0 - elapsed / self.max_time_s)
        reward = (raw * factor if raw > 0 else raw) if done else 0.0
        if done:
            self.end_episode()
            verdict = "succeeded" if raw >= 1.0 else "failed" if raw <= -1.0 else "partly done"
            page = f"The task ended: {verdict} (MiniWoB reward {reward:.2f})."
        else:
            page = "Page:\n" + self._guarded(self._snapshot).render(self.max_lines)
            if report is None:
                page = (
                    "No action: reply with one tool call (click, type, press, select, scroll).\n\n"
                    + page
                )
        obs, info = self.tool_turn(
            results,
            report.risk_events if report is not None else (),
            actions=len(results),
            elapsed_s=elapsed,
            miniwob_done=bool(done),
            miniwob_raw=raw if done else 0.0,
            miniwob_reward=reward,
            success=(raw + 1.0) / 2.0 if done else 0.0,
            time_penalty=max(0.0, raw) * (1.0 - factor) if done else 0.0,
            reason=None if reason is None else str(reason),
            **({} if done else self._screenshot()),
        )
        obs = Observation(
            messages=(*obs.messages, Message("user", page)),
            tool_results=obs.tool_results,
            risk_events=obs.risk_events,
        )
        return obs, float(reward), bool(done and not timed_out), bool(timed_out), info

    def oracle_reply(self) -> str | None:
        """The task oracle's next action as a tool call (None before reset, after the end, or
        when the oracle sees no way on)."""
        if self.utterance is None or self.episode.done or self.page is None:
            return None
        call = self.task.oracle(self.utterance, self.page)
        return None if call is None else f"<tool_call>{json.dumps(call)}</tool_call>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return Rubric(
            [
                RewardFunction("miniwob_success", RewardGroup.OUTCOME, miniwob_success),
                RewardFunction("miniwob_reward", RewardGroup.OUTCOME, miniwob_reward, weight=0.0),
                RewardFunction("valid_actions", RewardGroup.PROCESS, tool_call_format, weight=0.2),
                RewardFunction("time_penalty", RewardGroup.COST, time_penalty, weight=1.0),
                RewardFunction("actions", RewardGroup.COST, actions, weight=0.0),
                token_cost(),
                *risk_functions(),
            ],
            weights,
        )


def _last(trajectory: Trajectory, key: str) -> float:
    return float(trajectory.turns[-1].info.get(key, 0.0)) if trajectory.turns else 0.0


def miniwob_success(trajectory: Trajectory) -> float:
    """(r + 1) / 2 for MiniWoB's raw reward r of the finished episode; 0 without an end."""
    return _last(trajectory, "success")


def miniwob_reward(trajectory: Trajectory) -> float:
    """MiniWoB's reward with its time penalty (the last turn's), a logged metric."""
    return _last(trajectory, "miniwob_reward")


def time_penalty(trajectory: Trajectory) -> float:
    """The part of a success the clock took: max(0, r) · min(1, t / T) (a cost)."""
    return _last(trajectory, "time_penalty")


def actions(trajectory: Trajectory) -> float:
    """Number of actions (tool calls, valid or not) in the episode."""
    return float(sum(t.info.get("actions", 0) for t in trajectory.turns))


def _require_web(config: BrowserConfig = BrowserConfig()) -> None:
    """Raise EnvUnavailableError (naming the extra and the packages) unless all is there."""
    try:
        import miniwob  # noqa: F401
        import selenium  # noqa: F401

        find_browser(config)
    except (ImportError, BrowserUnavailableError) as exc:
        raise EnvUnavailableError(f"miniwob/* envs need {INSTALL} ({exc})") from None


def miniwob_task_names() -> list[str]:
    """The task set's names, sorted (imports nothing)."""
    return sorted(MINIWOB_TASKS)


def resolve_miniwob_id(env_id: str) -> EnvSpec:
    """The registry entry (factory, description, recipe) of ``miniwob/<task>-v0``; the factory takes
    :class:`MiniWoBEnv`'s keywords but ``task``.

    Raises:
        UnknownEnvError: not a task of the set, or a version other than 0.
        EnvUnavailableError: the extra or the browser is missing.
    """
    match = _ID.match(env_id)
    if match is None or match.group(2) != "0" or match.group(1) not in MINIWOB_TASKS:
        raise UnknownEnvError(
            f"unknown env id {env_id!r}: ids of this family look like {MINIWOB_PATTERN} with a "
            f"task of the set: {', '.join(miniwob_task_names())}"
        )
    task = match.group(1)
    _require_web()
    # a partial keeps MiniWoBEnv's keywords visible to make's checks (context, browser, ...)
    factory = functools.partial(MiniWoBEnv, task)
    description = f"MiniWoB++ {task}: {MINIWOB_TASKS[task].description} (headless Chromium)"
    return EnvSpec(env_id, factory, description, recipe_overrides=MINIWOB_RECIPE)
