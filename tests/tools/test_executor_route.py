"""ToolExecutor's public ``route`` hook: a call is rewritten before the permission check, so the
decision, the run and the audit record all see the routed call (web-shop-v0 names a click on the
pay form ``pay`` with it). Real tools, a real policy and a real audit file."""

from __future__ import annotations

import pytest

from agentic_rl.tools import tool
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import ToolCall

RAN: list[str] = []


@tool
def click(ref: int) -> str:
    """Click an element.

    Args:
        ref: the element.
    """
    RAN.append(f"click {ref}")
    return f"clicked [{ref}]"


@tool
def pay(ref: int) -> str:
    """Pay (reached only by routing a click on the pay button).

    Args:
        ref: the pay button.
    """
    RAN.append(f"pay {ref}")
    return "paid"


POLICY = PermissionPolicy.from_dict(
    {
        "default": "deny",
        "tools": {
            "click": {"side_effect": "read_only"},
            "pay": {"side_effect": "irreversible", "mode": "deny"},
        },
    }
)
TOOLS = {t.name: t for t in (click, pay)}
PAY_BUTTON = 7


def to_pay(call: ToolCall) -> ToolCall:
    """A click on the pay button is a ``pay`` call; every other call stays as it is."""
    if call.name == "click" and call.arguments.get("ref") == PAY_BUTTON:
        return ToolCall("pay", dict(call.arguments), call.raw, call.id)
    return call


@pytest.fixture(autouse=True)
def _clear():
    RAN.clear()


def _run(executor: ToolExecutor, *refs: int):
    calls = [ToolCall("click", {"ref": r}, id=f"c{i}") for i, r in enumerate(refs)]
    return executor.execute(calls, [], trajectory_id="t", turn=0)


def test_without_a_route_calls_run_as_written(tmp_path):
    ex = ToolExecutor(TOOLS, POLICY, AuditLog(tmp_path / "audit.jsonl"))
    assert ex.route is None
    report = _run(ex, 1, PAY_BUTTON)
    assert RAN == ["click 1", f"click {PAY_BUTTON}"]
    assert [r.ok for r in report.results] == [True, True]


def test_routed_call_is_decided_and_audited_under_its_new_name(tmp_path):
    ex = ToolExecutor(TOOLS, POLICY, AuditLog(tmp_path / "audit.jsonl"), route=to_pay)
    report = _run(ex, 1, PAY_BUTTON)
    # the plain click ran; the click on the pay button became `pay`, which the policy denies
    assert RAN == ["click 1"]
    assert report.results[0].content == "clicked [1]"
    assert report.results[1].name == "pay" and not report.results[1].ok
    assert report.results[1].content.startswith("Denied: the call to 'pay'")
    assert [(e.tool, e.denied) for e in report.risk_events] == [("pay", True)]
    records = ex.audit.read()
    assert [(r["tool"], r["decision"], r["call_id"]) for r in records] == [
        ("click", "allow", "c0"),
        ("pay", "deny", "c1"),
    ]


def test_route_can_be_set_after_construction(tmp_path):
    allow_pay = PermissionPolicy.from_dict(
        {"default": "deny", "tools": {"click": {"side_effect": "read_only"}, "pay": {}}}
    )
    ex = ToolExecutor(TOOLS, allow_pay)
    ex.route = to_pay
    report = _run(ex, PAY_BUTTON)
    assert RAN == [f"pay {PAY_BUTTON}"]
    assert (report.results[0].name, report.results[0].content) == ("pay", "paid")


def test_a_route_that_raises_is_an_error_observation_and_audited(tmp_path):
    def broken(call: ToolCall) -> ToolCall:
        raise LookupError("no such form")

    ex = ToolExecutor(TOOLS, POLICY, AuditLog(tmp_path / "audit.jsonl"), route=broken)
    report = _run(ex, 1)
    assert RAN == []
    (result,) = report.results
    assert not result.ok and result.content == "Error: LookupError: no such form"
    assert report.risk_events == ()
    (record,) = ex.audit.read()
    assert (record["decision"], record["status"], record["tool"]) == (
        "error",
        "route_error",
        "click",
    )


def test_bad_routes_are_rejected_clearly(tmp_path):
    with pytest.raises(TypeError, match="route must be callable"):
        ToolExecutor(TOOLS, POLICY, route="pay")  # type: ignore[arg-type]
    ex = ToolExecutor(TOOLS, POLICY, route=lambda call: {"name": "pay"})  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="must return a ToolCall, got dict"):
        _run(ex, 1)
