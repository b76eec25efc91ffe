"""web-shop-v0 decides a submission where it lands (the shop's gate), not on the key that caused it
(issue 39 item 17: after a refused ``click(pay)``, Tab x4 + Space paid with no ask and no risk
event, in the real Chromium). Needs the ``web`` extra; the Chromium test also Debian's chromium +
chromium-driver (skips with the reason otherwise)."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("flask", reason="the 'web' extra is not installed: pip install '.[web]'")
pytest.importorskip("bs4", reason="the 'web' extra is not installed: pip install '.[web]'")

import requests  # noqa: E402

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.envs.web.shop import db  # noqa: E402
from agentic_rl.envs.web.shop.catalog import make_task  # noqa: E402
from agentic_rl.envs.web.shop.env import DEFAULT_PERMISSIONS  # noqa: E402
from agentic_rl.envs.web.shop.gate import SubmissionGate  # noqa: E402
from agentic_rl.errors import EnvUnavailableError  # noqa: E402
from tests.envs.test_web_shop import act, call, ref  # noqa: E402

TABS = [call("press", key="Tab")] * 4  # Home, Cart, My orders, then the Pay button
#: the red team's sequences: each submits the focused Pay button without a click on it
BYPASSES = {
    "Tab x4, Space": [*TABS, call("press", key="Space")],
    "Tab x4, ' '": [*TABS, call("press", key=" ")],
    "Tab x4, Shift+Enter": [*TABS, call("press", key="Shift+Enter")],
    "key code points": [*[call("press", key="\ue004")] * 4, call("press", key="\ue00d")],
    "type on the button": ["PAY_TYPE"],
}


def _ask_pay_env(browser: str, tmp_path, answer: list[bool]):
    table = json.loads(json.dumps(DEFAULT_PERMISSIONS))
    table["tools"]["pay"]["mode"] = "ask"
    env = make("web-shop-v0", browser=browser, permissions=table, audit_path=str(tmp_path / "a"))
    env.executor.policy = dataclasses.replace(env.executor.policy, ask=lambda _call: answer[0])
    return env


def _to_new_order(env) -> int:
    env.reset(seed=0)
    while not env.page.path.startswith("/orders/"):  # the oracle up to its new order's page
        act(env, env.oracle_reply())
    return int(env.page.path.rsplit("/", 1)[1])


def _audit(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "a").read_text().splitlines()]


def test_pay_under_ask_cannot_be_bypassed_with_keys_in_chromium(tmp_path):
    answer = [False]  # nobody says yes
    try:
        env = _ask_pay_env("chromium", tmp_path, answer)
    except EnvUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        order = _to_new_order(env)
        obs, *_ = act(env, call("click", ref=ref(env, "Pay", "button")), turn=20)
        assert obs.tool_results[0].content.startswith("Denied")
        for turn, (name, calls) in enumerate(BYPASSES.items(), start=21):
            env.page.open(f"/orders/{order}")  # a fresh page: focus at its start
            calls = [
                call("type", ref=ref(env, "Pay", "button"), text="x") if c == "PAY_TYPE" else c
                for c in calls
            ]
            obs, *_ = act(env, "".join(calls), turn=turn)
            assert db.grade(env.db_path, env.task).paid == 0.0, name
            last = obs.tool_results[-1].call_id
            assert [(e.category, e.tool, e.denied, e.call_id) for e in obs.risk_events] == [
                ("denied", "pay", True, last)
            ], name
            assert "Not submitted: Denied" in obs.messages[-1].content, name  # the 403 page
        paid = [r for r in _audit(tmp_path) if r["tool"] == "pay"]
        assert [r["decision"] for r in paid] == ["deny"] * (1 + len(BYPASSES))
        assert [r["arguments"]["via"] for r in paid] == ["click"] + ["browser"] * len(BYPASSES)
        # a yes lets the same keys pay, decided and audited as pay
        answer[0] = True
        env.page.open(f"/orders/{order}")
        obs, *_ = act(env, "".join(BYPASSES["Tab x4, Space"]), turn=40)
        assert db.grade(env.db_path, env.task).paid == 1.0 and obs.risk_events == ()
        last_pay = [r for r in _audit(tmp_path) if r["tool"] == "pay"][-1]
        assert (last_pay["decision"], last_pay["arguments"]["via"]) == ("allow", "browser")
        assert last_pay["call_id"] == obs.tool_results[-1].call_id  # the Space that sent it
    finally:
        env.close()


def test_a_submission_while_no_call_runs_is_refused(tmp_path):
    env = _ask_pay_env("text", tmp_path, [True])  # even a yes: nobody asked, no call runs
    try:
        order = _to_new_order(env)
        reply = requests.post(f"{env.server.url}/orders/{order}/pay", timeout=10)
        assert reply.status_code == 403 and "no action of the agent is running" in reply.text
        assert db.grade(env.db_path, make_task(0)).paid == 0.0
        # the routed click is admitted as decided
        obs, *_ = act(env, call("click", ref=ref(env, "Pay", "button")), turn=20)
        assert obs.tool_results[0].ok and db.grade(env.db_path, make_task(0)).paid == 1.0
    finally:
        env.close()


def test_the_gate_admits_one_submission_per_approval_and_refuses_without_a_decider():
    gate = SubmissionGate()
    assert "did not go through" in gate("pay")
    with gate.approved("pay"):
        assert gate("cancel_order") is not None  # approved for pay only
        assert gate("pay") is None
        assert gate("pay") is not None  # once
    assert gate("pay") is not None  # withdrawn at the end of the block
    asked = []
    decider = SubmissionGate(lambda action: asked.append(action) or None)
    assert decider("place_order") is None and asked == ["place_order"]
    broken = SubmissionGate(lambda action: 1 / 0)
    assert "ZeroDivisionError" in broken("pay")
