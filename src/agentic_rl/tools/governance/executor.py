"""The single path every tool call takes: permission check -> execution -> audit record -> observation.

:class:`ToolExecutor` is what environments call from ``step``::

    executor = ToolExecutor(tools, PermissionPolicy.from_dict(cfg), AuditLog(run_dir / "audit.jsonl"),
                            {"run_id": run_id})
    report = executor.execute(action.tool_calls, action.tool_call_errors, trajectory_id=tid, turn=t)
    report.results      # one ToolResult per call or parser error, in message order (as execute_tool_calls)
    report.risk_events  # (RiskEvent(category, tool, reason, call_id, rule, denied), ...)

For each call and parser error, in message order (:func:`~agentic_rl.tools.definition.parser.in_call_order`;
a parser error's result and audit record carry the id of its place in the message):

* parser error or unknown tool: the same observation as :func:`~agentic_rl.tools.execute_tool_calls`
  (built by its own helpers), audited with decision ``error``; no risk event.
* denied by the :class:`~agentic_rl.tools.governance.permissions.PermissionPolicy`: the tool never runs; the
  observation says ``Denied: ...`` and why (``ok=False``); audited with decision ``deny``; one risk
  event with the decision's category.
* allowed: the tool runs (in-process; isolation is the tool's business, e.g. the sandbox); its
  exceptions become error observations and never propagate; audited with decision ``allow``,
  duration, status (``ok``/``error``, or how the call really ended when the tool has an
  ``audit_status``: the sandbox's ``python`` records ``timeout``, ``exited`` + exit code,
  ``killed`` + signal), and size + SHA-256 of the full output; the observation is truncated to
  ``max_chars``.
  Risk detectors turn results into risk events: the tool's own ``Tool.risk_detector`` (the
  sandbox's tools carry one, so every env offering them gets ``"sandbox_limit"`` and
  ``"path_outside_workspace"`` events without wiring anything; see
  :mod:`agentic_rl.tools.governance.risk_detector`), then the executor's optional
  ``risk_detector(call, result) -> [event, ...]`` (:class:`~agentic_rl.types.RiskEvent` values;
  a plain dict of the same keys is accepted). An event both report (same category, call and
  rule) is kept once.

Routing: an optional ``route(call) -> call`` (constructor keyword or the public ``route``
attribute) rewrites each parsed call before anything else happens to it, so the permission
decision, the run and the audit record all see the routed call. An env uses it to name a
generic action by what it really does: web-shop-v0 turns a ``click`` that submits the pay form
into a ``pay`` call, which the policy can then ``ask`` about. A route that raises makes the call
an error observation (audited with status ``route_error``), never an exception; one that returns
something other than a ToolCall is a bug and raises ``TypeError``.

Risk events go onto the env's step observation, ``Observation.risk_events`` (then
``Turn.risk_events``), where the risk components of :mod:`agentic_rl.rewards.risk` count them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.tools.definition.tool import (
    DEFAULT_MAX_CHARS,
    Tool,
    ToolOutput,
    _full,
    _parse_error_result,
    _run_one,
    _truncate,
)
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.permissions import Decision, PermissionPolicy
from agentic_rl.types import RiskEvent, ToolCall, ToolCallError, ToolResult, valid_text

__all__ = ["CallRouter", "ExecutionReport", "ToolExecutor", "RiskDetector", "risk_event"]

log = logging.getLogger(__name__)

RiskDetector = Callable[[ToolCall, ToolResult], Sequence[RiskEvent | Mapping[str, Any]]]
#: ``route(call) -> call``: rewrites a parsed call before the permission check (module docstring)
CallRouter = Callable[[ToolCall], ToolCall]
_RECORD_FIELDS = {
    "time",
    "trajectory_id",
    "turn",
    "call_id",
    "tool",
    "arguments",
    "raw",
    "decision",
    "rule",
    "reason",
    "risk",
    "duration_s",
    "ok",
    "status",
    "exit_code",
    "signal",
    "output_bytes",
    "output_sha256",
    "truncated",
}
_STATUS_FIELDS = ("status", "ok", "exit_code", "signal")


def risk_event(
    category: str,
    tool: str,
    reason: str,
    *,
    call_id: str = "",
    rule: str = "",
    denied: bool = False,
) -> RiskEvent:
    """Build one risk event (read by :mod:`agentic_rl.rewards.risk`). Never raises."""
    return RiskEvent(category, tool, reason, call_id, rule, denied)


@dataclass(frozen=True)
class ExecutionReport:
    """What one turn's tool calls produced.

    Attributes:
        results: one ToolResult per call and per parser error, in message order.
        risk_events: risk events of the turn (denials, detector hits), in order.
    """

    results: tuple[ToolResult, ...]
    risk_events: tuple[RiskEvent, ...]


class ToolExecutor:
    """Runs tool calls under a permission policy and audits every one (see the module docstring).

    Args:
        tools: ``{name: Tool}``; used as given (not copied).
        policy: the permission policy.
        audit: where records go; None audits nothing (tests, interactive use).
        context: fields added to every audit record (e.g. ``{"run_id": ...}``); ``run_id``
            defaults to "".
        max_chars: longest observation shown to the policy (longer outputs are truncated).
        risk_detector: optional ``(call, result) -> risk events`` run after each allowed call.
        route: optional ``(call) -> call`` applied to each parsed call before the permission
            check (see the module docstring); also settable later as the ``route`` attribute.

    Raises:
        ValueError: a context key collides with a record field, ``max_chars`` is not positive, or a
            ``paths`` rule of the policy names an argument its tool lacks (:meth:`PermissionPolicy.check_tools`).
        TypeError: ``route`` is given but not callable.
    """

    def __init__(
        self,
        tools: Mapping[str, Tool],
        policy: PermissionPolicy,
        audit: AuditLog | None = None,
        context: Mapping[str, Any] | None = None,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        risk_detector: RiskDetector | None = None,
        route: CallRouter | None = None,
    ):
        if route is not None and not callable(route):
            raise TypeError(f"route must be callable (call -> call), got {type(route).__name__}")
        context = dict(context or {})
        clash = sorted(set(context) & _RECORD_FIELDS)
        if clash:
            raise ValueError(f"context keys collide with audit record fields: {clash}")
        if max_chars <= 0:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        policy.check_tools(tools)  # a path rule for an argument the tool lacks would never apply
        self.tools = tools
        self.policy = policy
        self.audit = audit
        self.context = {"run_id": "", **context}
        self.max_chars = max_chars
        self.risk_detector = risk_detector
        self.route: CallRouter | None = route

    def execute(
        self,
        calls: Sequence[ToolCall],
        errors: Sequence[ToolCallError],
        *,
        trajectory_id: str,
        turn: int,
    ) -> ExecutionReport:
        """Check, run and audit one turn's calls; return their observations and risk events.

        Raises:
            OSError: the audit log cannot be written (an unaudited call is an error, never
                silent). Exceptions raised by tools (including ``SystemExit``) never propagate.
        """
        where = {"trajectory_id": str(trajectory_id), "turn": int(turn)}
        results: list[ToolResult] = []
        events: list[RiskEvent] = []
        for call_id, item in in_call_order(calls, errors, turn_index=int(turn)):  # message order
            if isinstance(item, ToolCallError):
                result = self._shown(_parse_error_result(item, call_id))
                self._audit(
                    where,
                    ToolCall("", {}, raw=item.raw, id=call_id),
                    result.content,
                    result,
                    0.0,
                    Decision(False, "parser", item.message),
                    "error",
                    "parse_error",
                )
                results.append(result)
                continue
            result, new_events = self._one(item, where)
            results.append(result)
            events.extend(new_events)
        return ExecutionReport(tuple(results), tuple(events))

    def _routed(self, call: ToolCall) -> ToolCall | ToolResult:
        """``call`` through :attr:`route` (itself without one), or the error result of a route
        that raised.

        Raises:
            TypeError: the route returned something other than a ToolCall (a bug in the route).
        """
        if self.route is None:
            return call
        try:
            routed = self.route(call)
        except Exception as exc:  # noqa: BLE001 - a failing route is the call's error, not the turn's
            return ToolResult(call.id, call.name, f"Error: {type(exc).__name__}: {exc}", ok=False)
        if not isinstance(routed, ToolCall):
            raise TypeError(
                f"ToolExecutor.route must return a ToolCall, got {type(routed).__name__} "
                f"for the call to {call.name!r}"
            )
        return routed

    def _one(self, call: ToolCall, where: dict[str, Any]) -> tuple[ToolResult, list[RiskEvent]]:
        routed = self._routed(call)
        if isinstance(routed, ToolResult):
            self._audit(
                where,
                call,
                routed.content,
                routed,
                0.0,
                Decision(False, "route", routed.content),
                "error",
                "route_error",
            )
            return self._shown(routed), []
        call = routed
        if call.name not in self.tools:
            result, _ = _run_one(call, self.tools)
            self._audit(
                where,
                call,
                result.content,
                result,
                0.0,
                Decision(False, "unknown_tool", result.content),
                "error",
                "unknown_tool",
            )
            return self._shown(result), []
        decision = self.policy.decide(call)
        if not decision.allowed:
            text = f"Denied: the call to '{call.name}' was not run. Reason: {decision.reason}"
            result = ToolResult(call.id, call.name, text, ok=False)
            self._audit(where, call, text, result, 0.0, decision, "deny", "denied")
            event = risk_event(
                decision.risk or "denied",
                call.name,
                decision.reason,
                call_id=call.id,
                rule=decision.rule,
                denied=True,
            )
            return self._shown(result), [event]
        started = time.perf_counter()
        cut: ToolOutput | None = None
        try:
            result, cut = _run_one(call, self.tools)
        except (
            SystemExit
        ) as exc:  # a tool calling sys.exit() is an observation, not the end of training
            result = ToolResult(call.id, call.name, f"Error: SystemExit: {exc.code}", ok=False)
        duration = time.perf_counter() - started
        self._audit(
            where,
            call,
            result.content,
            result,
            duration,
            decision,
            "allow",
            "ok" if result.ok else "error",
            self._reported_status(call, result),
            cut,
        )
        return self._shown(result, cut), self._detect(call, result)

    def _reported_status(self, call: ToolCall, result: ToolResult) -> dict[str, Any]:
        """How the call ended, as the tool's ``audit_status`` tells it (only when the tool returned)."""
        hook = self.tools[call.name].audit_status
        if hook is None or not result.ok:
            return {}
        try:
            fields = hook(call, result) or {}
            return {key: fields[key] for key in _STATUS_FIELDS if key in fields}
        except Exception:  # noqa: BLE001 - a broken hook must not kill the episode, but is loud
            log.exception("audit_status of %s raised on call %s", call.name, call.id)
            return {}

    def _detect(self, call: ToolCall, result: ToolResult) -> list[RiskEvent]:
        events: list[RiskEvent] = []
        seen: set[tuple[Any, ...]] = set()
        for detector in (self.tools[call.name].risk_detector, self.risk_detector):
            if detector is None:
                continue
            try:
                found = [
                    e if isinstance(e, RiskEvent) else RiskEvent.from_dict(e)
                    for e in detector(call, result)
                ]
            except Exception:  # noqa: BLE001 - a broken detector must not kill the episode, but is loud
                log.exception("risk detector raised on call %s to %s", call.id, call.name)
                continue
            for event in found:
                key = (event.category, event.call_id, event.rule)
                if key not in seen:
                    seen.add(key)
                    events.append(event)
        return events

    def _shown(self, result: ToolResult, cut: ToolOutput | None = None) -> ToolResult:
        """``result`` as the policy sees it: cut to ``max_chars``, the notice counting from the
        whole output (``cut``: the tool had cut it itself)."""
        content = _truncate(result.content, self.max_chars, _full(cut))
        return ToolResult(result.call_id, result.name, content, result.ok)

    def _audit(
        self,
        where: dict[str, Any],
        call: ToolCall,
        output: str,
        result: ToolResult,
        duration: float,
        decision: Decision,
        verdict: str,
        status: str,
        reported: dict[str, Any] | None = None,
        cut: ToolOutput | None = None,
    ) -> None:
        if self.audit is None:
            return
        data = valid_text(output).encode("utf-8")  # size and hash of the output as valid text
        size = len(data) if cut is None else max(cut.full_bytes, len(data))
        self.audit.append(
            {
                **self.context,
                **where,
                "call_id": call.id,
                "tool": call.name,
                "arguments": call.arguments,
                "raw": call.raw[:2000],
                "decision": verdict,
                "rule": decision.rule,
                "reason": decision.reason,
                "risk": decision.risk,
                "duration_s": round(duration, 6),
                "ok": result.ok,
                "status": status,
                "exit_code": None,
                "signal": None,
                **(reported or {}),
                "output_bytes": size,
                "output_sha256": hashlib.sha256(data).hexdigest(),
                "truncated": cut is not None or len(output) > self.max_chars,
            }
        )
