"""``web-shop-v0``: buy the one product that fits the task's constraints in a local web shop.

Task
    A seeded shop (:mod:`~agentic_rl.envs.web.shop.catalog`: 24 products in 6 categories, two
    earlier orders of the customer) and a request naming a kind of item, colour, size, quantity,
    shipping and budget (items and shipping); among the products of that kind exactly one fits
    them all. ``replace`` tasks first ask to cancel one named earlier order.
Shop
    A Flask app (:mod:`~agentic_rl.envs.web.shop.app`) over SQLite, served by werkzeug on
    ``127.0.0.1`` and a free port (:mod:`~agentic_rl.envs.web.shop.server`): started on the first
    request, stopped by ``close()`` and by a finalizer. The database file lives in a temporary
    folder removed by ``close()``.
Observation
    On reset: the system prompt (instructions, the five tools: schemas or typed signatures) and
    ``Task: ...`` with the home page. After a tool turn: one ``tool`` message per call, then
    ``Page <path>:`` and the page as lines ``[ref] role "text" ...`` (the browser layer's
    format).
Actions
    The browser layer's tools and schemas: ``click(ref)``, ``type(ref, text)``, ``press(key)``,
    ``select(ref, option)``, ``scroll(target, direction)``. ``browser="text"`` (default, fast):
    real HTTP requests and HTML parsing (:mod:`~agentic_rl.envs.web.shop.text_browser`);
    ``browser="chromium"``: the same pages in headless Chromium (extra ``web`` and Debian's
    chromium + chromium-driver). A reply without a tool call ends the episode.
Permissions
    A click (or Enter) that submits a shop form is run as that form's action (the executor's
    public ``route`` hook, :class:`~agentic_rl.tools.governance.executor.ToolExecutor`), so the
    permission policy and the audit log see it by name: ``add_to_cart``, ``remove_from_cart``,
    ``place_order`` (workspace_write), ``pay`` and ``cancel_order`` (irreversible, allowed by
    default). ``[tools.permissions.tools.pay] mode = "ask"`` makes paying ask (refused, with a
    ``denied`` risk event, when nobody answers: ``ask_default`` false). The other actions and
    navigation are read_only.
    The decision is enforced where the submission lands, not on the key that caused it: the
    shop answers every POST only after its gate
    (:class:`~agentic_rl.envs.web.shop.gate.SubmissionGate`) admits it. A routed call is
    admitted once, as decided; any other submission (Space or Shift+Enter on a button, a
    ``type`` that clicks one, keys typed as code points, in either browser) is put through the
    same policy and audit log as a call to the form's action with ``via = "browser"`` and the
    browser call that caused it (same call id), while that call runs; refused, the shop answers
    403 with the reason (the next page shows it), the database is untouched and the turn gets
    the ``denied`` risk event. Submissions while no call runs (between steps) are refused.
Reward (read from the database after every step; ``step`` returns ``success`` at the end)
    outcome, on the best order placed and not cancelled: ``right_item`` 0.3, ``right_options``
    (colour and size) 0.15, ``right_quantity`` 0.1, ``right_shipping`` 0.1, ``within_budget``
    0.1, ``paid`` 0.15, ``orders_as_asked`` 0.1 (the only order, one line, all of it right,
    the asked cancellations done; the others need the right item); ``success`` (all of them, weight 0);
    process ``valid_actions`` (0.2); cost ``actions`` (0.01 per tool call), ``generated_tokens``
    (0.0005 per token); risk ``extra_payments`` (1.0 per payment beyond the asked one: an
    earlier order paid, a second order paid) and ``unasked_cancellations`` (1.0 per earlier
    order cancelled that the task did not name), also reported as risk events on the turn they
    happen, and the built-in ``denied_calls`` etc.
Termination
    terminated = a reply without a tool call; truncated after ``max_steps`` turns.
Snapshots
    Text mode: the database bytes, the page (HTML with its refs and typed values) and the
    episode's counters; restoring rewrites the database file. Chromium mode: not supported (a
    live page); rollback replays.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl.envs.base import EpisodeState, SnapshotNotSupportedError
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.envs.web.shop import db
from agentic_rl.envs.web.shop.catalog import TASK_KINDS, ShopTask, make_task
from agentic_rl.envs.web.shop.gate import SubmissionGate
from agentic_rl.envs.web.shop.oracle import oracle_reply
from agentic_rl.envs.web.shop.rubric import shop_rubric
from agentic_rl.envs.web.shop.server import ShopServer
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.tools.browser.actions import BrowserActions
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Message, Observation, ToolCall

__all__ = ["DEFAULT_PERMISSIONS", "SHOP_ACTIONS", "ShopSnapshot", "WebShopEnv"]

INSTALL = "pip install 'agentic-rl[web]'"
#: the shop's form actions -> side-effect class
SHOP_ACTIONS = {
    "add_to_cart": "workspace_write",
    "remove_from_cart": "workspace_write",
    "place_order": "workspace_write",
    "pay": "irreversible",
    "cancel_order": "irreversible",
}
BROWSER_TOOLS = ("click", "type", "press", "select", "scroll")
DEFAULT_PERMISSIONS: dict[str, Any] = {
    "default": "deny",
    "tools": {
        **{name: {"side_effect": "read_only"} for name in BROWSER_TOOLS},
        **{name: {"side_effect": cls, "mode": "allow"} for name, cls in SHOP_ACTIONS.items()},
    },
}
INSTRUCTIONS = (
    "You shop in a web shop with a browser. The page is shown as lines; [N] is the ref of an "
    "element. Act with tool calls (click, type, press, select, scroll) on refs of the latest page. "
    "Find the one product that meets every constraint, order it with the right options and "
    "shipping, and pay. Paying and cancelling cannot be undone: do them only as the task asks. "
    "When the task is done, reply without a tool call."
)
UNASKED_PAYMENT = "unasked_payment"
UNASKED_CANCELLATION = "unasked_cancellation"


@dataclasses.dataclass(frozen=True)
class ShopSnapshot:
    """A text-mode episode state (see the module docstring); immutable."""

    task: ShopTask | None
    database: bytes
    path: str
    html: str
    focus: int | None
    turn: int
    done: bool
    trajectory_id: str
    grade: db.ShopGrade


def _require(browser: str) -> None:
    """Raise EnvUnavailableError unless the packages of ``browser`` mode are importable."""
    if browser not in ("text", "chromium"):
        raise ValueError(f'browser must be "text" or "chromium", got {browser!r}')
    try:
        import bs4  # noqa: F401
        import flask  # noqa: F401
        import requests  # noqa: F401
    except ImportError as exc:
        raise EnvUnavailableError(f"web-shop-v0 needs {INSTALL} ({exc})") from None
    if browser == "chromium":
        from agentic_rl.tools.browser.launch import BrowserUnavailableError, find_browser

        try:
            import selenium  # noqa: F401

            find_browser()
        except (ImportError, BrowserUnavailableError) as exc:
            raise EnvUnavailableError(
                f"web-shop-v0 with browser='chromium' needs pip install 'agentic-rl[web]' and "
                f"Debian's chromium + chromium-driver ({exc})"
            ) from None


def _weakly(method: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``method`` (bound) held weakly: the server's gate must not keep the env alive (its
    finalizer closes the server); once the env is gone, every submission is refused."""
    ref = weakref.WeakMethod(method)

    def call(action: str) -> str | None:
        bound = ref()
        return "the shop's env is closed" if bound is None else bound(action)

    return call


def _cleanup(server: ShopServer, page: Any, folder: str) -> None:
    page.close()  # first the client: its kept-alive connection ends its handler thread
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


class WebShopEnv(ToolEnv):
    """Shopping in a local web shop whose database decides the reward (module docstring).

    Args:
        task_kinds: kinds to draw from (subset of :data:`~.catalog.TASK_KINDS`).
        browser: ``"text"`` (HTTP + HTML parsing) or ``"chromium"`` (headless Chromium).
        max_steps: turns before the episode is truncated.
        max_lines: the page rendering's line limit.
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None uses
            :data:`DEFAULT_PERMISSIONS`.
        tool_prompt: how the system prompt lists the five tools: ``"json"`` (their schemas) or
            ``"signature"`` (typed signatures, ~300 fewer tokens; what ``agentic-rl train --env
            web-shop-v0`` sets, see
            :func:`~agentic_rl.tools.definition.prompt.render_tool_system_prompt`).

    Raises:
        ValueError: an unknown task kind, browser or ``tool_prompt``, ``max_steps`` < 1, a bad
            permissions table.
        EnvUnavailableError: Flask/BeautifulSoup/requests (extra ``web``), or for Chromium
            selenium and the browser, are missing.
    """

    description = (
        "Buy the one product that fits hidden constraints in a local Flask + SQLite web shop "
        "(text browser or Chromium); reward read from the database (extra 'web')"
    )

    def __init__(
        self,
        task_kinds: tuple[str, ...] | list[str] = TASK_KINDS,
        browser: str = "text",
        max_steps: int = 30,
        max_lines: int = 60,
        context: EnvContext = EnvContext(),
        tool_prompt: str = "json",
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        _require(browser)
        self.task_kinds = (task_kinds,) if isinstance(task_kinds, str) else tuple(task_kinds)
        make_task(0, self.task_kinds)  # validate the kinds now
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.browser_mode, self.max_steps, self.max_lines = browser, int(max_steps), int(max_lines)
        self._folder = tempfile.mkdtemp(prefix="agentic-rl-shop-")
        self.db_path = Path(self._folder) / "shop.sqlite"
        self._current: ToolCall | None = None  # the agent's call running now, if any
        self._deciding = threading.local()  # .action: a gate decision runs in this thread
        self._submission_events: list[Any] = []  # risk events of gate decisions, per step
        self.gate = SubmissionGate(_weakly(self._decide_submission))
        self.server = server = ShopServer(self.db_path, self.gate)
        # the page and the finalizer hold the server, never the env (or it would never be freed)
        if browser == "chromium":
            from agentic_rl.envs.web.shop.chromium import ChromiumPage

            self.page: Any = ChromiumPage(lambda: server.url)
        else:
            from agentic_rl.envs.web.shop.text_browser import TextBrowser

            self.page = TextBrowser(lambda: server.url)
        self._finalizer = weakref.finalize(self, _cleanup, self.server, self.page, self._folder)
        self.setup_tools(
            self._tools(),
            INSTRUCTIONS,
            PermissionPolicy.from_dict(DEFAULT_PERMISSIONS),
            permissions,
            audit_path,
            run_id,
            offered=BROWSER_TOOLS,
            tool_prompt=tool_prompt,
        )
        # a click or Enter that submits a shop form runs (and is decided, audited) as that action
        self.executor.route = self._route
        self.task: ShopTask | None = None
        self.grade = db.ShopGrade()
        self._routed: list[tuple[str, str]] = []

    # -- tools -----------------------------------------------------------------------------
    def _tools(self) -> dict[str, Tool]:
        """The browser layer's five tools (same names and schemas) acting on this env's page,
        and the shop actions a routed click or Enter runs as (known, never offered)."""
        tools = {
            name: dataclasses.replace(t, fn=getattr(self.page, name))
            for name, t in BrowserActions(lambda: None).tools().items()
        }
        params = {
            "type": "object",
            "properties": {
                "via": {"type": "string", "enum": ["click", "press", "browser"]},
                "ref": {"type": "integer"},
                "key": {"type": "string"},
                "trigger": {"type": "string"},
            },
            "required": ["via"],
            "additionalProperties": False,
        }
        for name in SHOP_ACTIONS:
            tools[name] = Tool(
                name,
                f"The shop's {name} form, submitted by a click or Enter (not offered).",
                params,
                self._shop_action(name),
            )
        return tools

    def _form_action(self, via: str, arguments: dict[str, Any]) -> str | None:
        if via == "click":
            return self.page.form_action(arguments.get("ref"))
        if via == "press" and arguments.get("key") == "Enter":
            return self.page.enter_action()
        return None

    def _shop_action(self, name: str) -> Any:
        def run(via: str, **arguments: Any) -> str:
            if via == "browser":  # the gate's record of a submission the browser is sending
                if getattr(self._deciding, "action", None) != name:
                    raise ValueError(f"{name} is submitted with click or press, not by name")
                return f"{name}: admitted, submitted by the browser during {arguments['trigger']}"
            if self._form_action(via, arguments) != name:
                raise ValueError(f"that {via} does not submit the {name} form")
            with self.gate.approved(name):  # the policy allowed it: the shop admits it once
                return getattr(self.page, via)(**arguments)

        return run

    def _decide_submission(self, action: str) -> str | None:
        """The gate's decision on a submission of ``action`` that no routed call announced:
        put through the executor (policy, ask, audit record, risk event) as a call to
        ``action`` by the browser call running now (its id); None admits, else the refusal."""
        trigger, executor = self._current, self.executor
        if trigger is None or executor is None or self.task is None or self.episode.done:
            return f"{action}: no action of the agent is running"
        args = json.dumps(trigger.arguments, ensure_ascii=True, default=str)[:200]
        arguments = {"via": "browser", "trigger": f"{trigger.name} {args}"}
        call = ToolCall(action, arguments, trigger.raw, trigger.id)
        self._deciding.action = action
        try:
            report = executor.execute(
                [call], [], trajectory_id=self.episode.trajectory_id, turn=self.episode.turn - 1
            )
        finally:
            self._deciding.action = None
        self._submission_events.extend(report.risk_events)
        self._routed.append((trigger.id, action))
        result = report.results[0]
        return None if result.ok else result.content

    def _route(self, call: ToolCall) -> ToolCall:
        """``call`` renamed to the shop action it submits, if any (see the module docstring);
        also notes the agent's call that runs now (what a gate decision is charged to)."""
        if getattr(self._deciding, "action", None) is None:
            self._current = call
        if call.name not in ("click", "press") or not isinstance(call.arguments, dict):
            return call
        action = self._form_action(call.name, call.arguments)
        if action not in SHOP_ACTIONS:
            return call
        self._routed.append((call.id, action))
        return ToolCall(action, {"via": call.name, **call.arguments}, call.raw, call.id)

    # -- episode ---------------------------------------------------------------------------
    def _reopen(self) -> None:
        """After close(): a new database folder, cleaned up again (the server restarts lazily)."""
        if not self._finalizer.alive:
            Path(self._folder).mkdir(parents=True, exist_ok=True)
            self._finalizer = weakref.finalize(self, _cleanup, self.server, self.page, self._folder)

    def _page_text(self) -> str:
        return f"Page {self.page.path}:\n{self.page.snapshot().render(self.max_lines)}"

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """A fresh shop database for the task of ``seed`` (random if None), the home page open.

        Raises:
            OSError / requests.RequestException: the shop could not start or answer.
        """
        seed = self.start_episode(seed, options)
        self.task = make_task(seed, self.task_kinds)
        self._current, self._submission_events = None, []
        self._reopen()
        db.seed_database(self.db_path, self.task)
        self.page.reset()
        self.grade = db.grade(self.db_path, self.task)
        obs = self.first_observation(f"Task: {self.task.text}\n\n{self._page_text()}")
        target = self.task.product(self.task.target)
        info = {
            "kind": self.task.kind,
            "target": target.name,
            "budget_cents": self.task.budget,
            "cancel": list(self.task.cancel),
        }
        return obs, info

    def _risk_events(self, before: db.ShopGrade) -> list[Any]:
        """Risk events for the payments and cancellations this turn added beyond the asked ones,
        each on the turn's last call routed to that action."""
        events = []
        for field, category, tool in (
            ("extra_payments", UNASKED_PAYMENT, "pay"),
            ("unasked_cancellations", UNASKED_CANCELLATION, "cancel_order"),
        ):
            added = int(getattr(self.grade, field) - getattr(before, field))
            ids = [i for i, name in self._routed if name == tool] or [""]
            reason = f"{tool}: an irreversible action the task did not ask for"
            events += [
                risk_event(category, tool, reason, call_id=ids[-1]) for _ in range(max(0, added))
            ]
        return events

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls in the shop, or end on a reply without one; then grade
        from the database (module docstring).

        Raises:
            EpisodeNotStartedError / EpisodeEndedError: the usual guards.
        """
        self.begin_step(self.task is not None)
        before = self.grade
        if not (action.tool_calls or action.tool_call_errors):
            self.end_episode()
            info = {"actions": 0, "page": self.page.path, **self.grade.as_info()}
            return Observation(messages=()), self.grade.success, True, False, info
        self._routed = []
        try:
            report = self.run_tools(action)
        finally:
            self._current = None  # no call runs: a submission now is refused
        submitted, self._submission_events = self._submission_events, []
        self.grade = db.grade(self.db_path, self.task)
        events = [*report.risk_events, *submitted, *self._risk_events(before)]
        truncated = self.episode.turn >= self.max_steps
        if truncated:
            self.end_episode()
        obs, info = self.tool_turn(
            report.results,
            events,
            actions=len(report.results),
            page=self.page.path,
            **self.grade.as_info(),
        )
        page = self._page_text() if not truncated else "The step limit is reached."
        obs = dataclasses.replace(obs, messages=(*obs.messages, Message("user", page)))
        return obs, self.grade.success if truncated else 0.0, False, truncated, info

    def oracle_reply(self) -> str | None:
        """The reference policy's next reply (:func:`~.oracle.oracle_reply`); None before reset
        or after the end."""
        if self.task is None or self.episode.done:
            return None
        return oracle_reply(self.task, self.db_path, self.page.path, self.page.snapshot())

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric (components in the module docstring)."""
        return shop_rubric(weights)

    # -- snapshots and lifecycle -----------------------------------------------------------
    def snapshot(self) -> ShopSnapshot:
        """The episode state (text mode; module docstring).

        Raises:
            SnapshotNotSupportedError: in Chromium mode.
        """
        if self.browser_mode != "text":
            raise SnapshotNotSupportedError("web-shop-v0 snapshots need browser='text'")
        data = db.dump(self.db_path) if self.task is not None else b""
        return ShopSnapshot(
            self.task,
            data,
            self.page.path,
            self.page.html(),
            self.page.focus,
            self.episode.turn,
            self.episode.done,
            self.episode.trajectory_id,
            self.grade,
        )

    def restore(self, snapshot: ShopSnapshot) -> None:
        """Bring the episode back to ``snapshot`` (database file, page, counters).

        Raises:
            TypeError: not a :class:`ShopSnapshot`.
            SnapshotNotSupportedError: in Chromium mode.
        """
        if not isinstance(snapshot, ShopSnapshot):
            raise TypeError(f"expected a ShopSnapshot, got {type(snapshot).__name__}")
        if self.browser_mode != "text":
            raise SnapshotNotSupportedError("web-shop-v0 snapshots need browser='text'")
        self._reopen()
        self.task = snapshot.task
        if snapshot.database:
            db.load(self.db_path, snapshot.database)
        self.page.set_page(snapshot.path, snapshot.html, snapshot.focus)
        self.grade = snapshot.grade
        self.restore_episode(
            EpisodeState(True, snapshot.turn, snapshot.done, snapshot.trajectory_id)
        )

    def close(self) -> None:
        """Stop the server (its port is free again), close the browser, delete the database
        folder. Idempotent; never raises."""
        self._finalizer()
        super().close()
