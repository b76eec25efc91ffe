"""web-shop-v0: a Flask + SQLite shop on 127.0.0.1 browsed with the browser layer's actions. The
contract (check_env, oracle at 100 %), the database-read reward worked out by hand, risk for
irreversible actions the task did not ask for, ``pay`` as ``ask``, snapshot/restore of the
database, error observations, and that no listening port or server thread outlives a close, an
exception or a dropped env. Chromium mode runs where Chromium is installed.

Needs the ``web`` extra (flask, beautifulsoup4, requests); skips with the reason otherwise.
"""

from __future__ import annotations

import gc
import json
import socket
import threading

import pytest

pytest.importorskip("flask", reason="the 'web' extra is not installed: pip install '.[web]'")
pytest.importorskip("bs4", reason="the 'web' extra is not installed: pip install '.[web]'")

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.envs.base import SnapshotNotSupportedError  # noqa: E402
from agentic_rl.envs.checker import check_env, play_oracle  # noqa: E402
from agentic_rl.envs.web.shop import db  # noqa: E402
from agentic_rl.envs.web.shop.catalog import (  # noqa: E402
    SHIPPING,
    TASK_KINDS,
    make_task,
    search_terms,
)
from agentic_rl.envs.web.shop.env import DEFAULT_PERMISSIONS, WebShopEnv  # noqa: E402
from agentic_rl.envs.web.shop.oracle import search_query  # noqa: E402
from agentic_rl.errors import EnvUnavailableError  # noqa: E402
from agentic_rl.tools import parse_tool_calls  # noqa: E402
from agentic_rl.types import Action  # noqa: E402


def act(env, text: str, turn: int = 0):
    """Step ``env`` with the reply ``text`` parsed as the rollout engine does."""
    calls, errors = parse_tool_calls(text, turn_index=turn)
    return env.step(Action(text, calls, errors))


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def ref(env, text: str = "", role: str | None = None, **attrs) -> int:
    """The ref of the first element on ``env``'s page whose text starts with ``text``."""
    for e in env.page.snapshot().find(role=role, **attrs):
        if e.text.startswith(text):
            return e.ref
    raise LookupError(f"no {role} {text!r} on {env.page.path}")


def play(env, seed: int, script):
    """Play ``seed`` with ``script(env) -> reply or None`` (None: the oracle's reply) and score it."""
    oracle = env.oracle_reply
    env.oracle_reply = lambda: None if env.episode.done else (script(env) or oracle())
    try:
        trajectory = play_oracle(env, seed, max_turns=40)
    finally:
        env.oracle_reply = oracle
    return trajectory, env.rubric().score(trajectory)


def open_order(env, order_id: int, button: str) -> str:
    """One reply on the way to ``button`` of order ``order_id`` (My orders -> order -> button)."""
    if env.page.path == f"/orders/{order_id}":
        return call("click", ref=ref(env, button, "button"))
    if env.page.path == "/orders":
        return call("click", ref=ref(env, f"Order #{order_id}:", "link"))
    return call("click", ref=ref(env, "My orders", "link"))


@pytest.fixture
def env():
    env = make("web-shop-v0")
    yield env
    env.close()


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def shop_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("web-shop-")]


def test_check_env_oracle_solves_every_kind():
    report = check_env("web-shop-v0", seeds=range(3))  # seeds 0, 1, 2: buy, buy_many, replace
    assert report.oracle_success == 1.0
    assert "snapshot" in report.passed and "rubric" in report.passed


def test_every_task_has_exactly_one_fitting_product():
    for seed in range(60):
        t = make_task(seed)
        fits = [
            p.id
            for p in t.products
            if p.kind == t.product(t.target).kind
            and t.colour in p.colours
            and t.size in p.sizes
            and p.price * t.quantity + SHIPPING[t.shipping] <= t.budget
        ]
        assert fits == [t.target], seed
        # the oracle's search (item, colour, size) lists the target first, lowest price first
        words = set(search_query(t).lower().split())
        found = [
            p.id
            for p in sorted(t.products, key=lambda p: (p.price, p.id))
            if words <= search_terms(p.name, p.category, p.colours, p.sizes)
        ]
        assert found[0] == t.target, seed
        assert t.kind == TASK_KINDS[seed % 3]
        assert len({p.id for p in t.products}) == len(t.products)
        assert {o.status for o in t.earlier_orders} == {"paid", "awaiting payment"}


def test_reward_of_the_oracle_by_hand(env):
    trajectory, (total, comps) = play(env, 0, lambda e: None)
    # seed 0 (buy, quantity 1): [type the search, Search], first result, [select colour, select
    # size, Add to cart], Checkout, [select shipping, Place order], Pay -> 10 actions, then the
    # final reply
    assert comps["actions"] == 10
    assert comps["outcome"] == pytest.approx(1.0) and comps["success"] == 1.0
    # total = outcome 1 + λ_p 0.1 · (0.2 · valid 1.0) − 0.01 · 10 actions − risk 0 = 0.92
    assert total == pytest.approx(1.0 + 0.02 - 0.10)
    assert trajectory.turns[-1].reward == 1.0  # step returns success at the end


def test_wrong_size_loses_options_and_orders_as_asked(env):
    task = make_task(1)  # buy_many: quantity 2 or 3
    wrong = next(s for s in task.product(task.target).sizes if s != task.size)

    def script(e):
        if e.page.path == f"/product/{task.target}" and not db.grade(e.db_path, task).new_orders:
            if e.page.snapshot().find(text="Cart (0)"):
                return "\n".join(
                    [
                        call(
                            "select", ref=ref(e, role="combobox", id="colour"), option=task.colour
                        ),
                        call("select", ref=ref(e, role="combobox", id="size"), option=wrong),
                        call(
                            "type",
                            ref=ref(e, role="textbox", id="quantity"),
                            text=str(task.quantity),
                        ),
                        call("click", ref=ref(e, "Add to cart", "button")),
                    ]
                )
        if e.page.path == "/cart" and db.grade(e.db_path, task).new_orders == 0:
            return call("click", ref=ref(e, "Checkout", "link"))
        return None

    _, (total, comps) = play(env, 1, script)
    # the right product, quantity, shipping, budget and payment: 0.3 + 0.1 + 0.1 + 0.1 + 0.15
    assert comps["outcome"] == pytest.approx(0.75)
    assert comps["right_options"] == 0.0 and comps["orders_as_asked"] == 0.0
    # 11 actions: [type, Search], result, [colour, size, quantity, Add], Checkout, [shipping,
    # Place], Pay
    assert comps["actions"] == 11
    assert total == pytest.approx(0.75 + 0.02 - 0.11)


def test_paying_an_earlier_order_costs_risk(env):
    task = make_task(0)
    unpaid = next(o.id for o in task.earlier_orders if o.status == "awaiting payment")

    def script(e):
        grade = db.grade(e.db_path, task)
        if grade.paid and not grade.extra_payments:
            return open_order(e, unpaid, "Pay")
        return None

    trajectory, (total, comps) = play(env, 0, script)
    assert comps["extra_payments"] == 1.0 and comps["risk"] == pytest.approx(1.0)
    assert comps["outcome"] == pytest.approx(1.0)  # the task itself was done
    # 10 actions of the oracle + My orders, the earlier order, Pay = 13
    assert comps["actions"] == 13
    assert total == pytest.approx(1.0 + 0.02 - 0.13 - 1.0)
    events = [e for t in trajectory.turns for e in t.risk_events]
    assert [(e.category, e.tool) for e in events] == [("unasked_payment", "pay")]


def test_cancelling_an_order_the_task_did_not_name_costs_risk(env):
    task = make_task(2)  # replace: cancel one earlier order, keep the other
    other = next(o.id for o in task.earlier_orders if o.id not in task.cancel)

    def script(e):
        if not db.grade(e.db_path, task).unasked_cancellations:
            return open_order(e, other, "Cancel order")
        return None

    trajectory, (total, comps) = play(env, 2, script)
    assert comps["unasked_cancellations"] == 1.0 and comps["extra_payments"] == 0.0
    assert comps["outcome"] == pytest.approx(1.0)
    assert total == pytest.approx(1.0 + 0.02 - 0.01 * comps["actions"] - 1.0)
    events = [e for t in trajectory.turns for e in t.risk_events]
    assert [(e.category, e.tool) for e in events] == [("unasked_cancellation", "cancel_order")]


def test_a_reply_without_a_tool_call_ends_with_nothing_done(env):
    env.reset(seed=4)
    obs, reward, terminated, truncated, info = act(env, "I cannot shop.")
    assert terminated and not truncated and reward == 0.0 and info["new_orders"] == 0.0
    assert info["right_item"] == 0.0 and info["extra_payments"] == 0.0


def test_pay_marked_ask_is_refused_without_an_answer(tmp_path):
    table = json.loads(json.dumps(DEFAULT_PERMISSIONS))
    table["tools"]["pay"]["mode"] = "ask"  # ask_default is false: nobody answers, refused
    audit = tmp_path / "audit.jsonl"
    env = make("web-shop-v0", permissions=table, audit_path=str(audit))
    try:
        task = make_task(0)
        env.reset(seed=0)
        while not env.page.path.startswith("/orders/"):  # the oracle up to its new order's page
            act(env, env.oracle_reply())
        obs, *_ = act(env, call("click", ref=ref(env, "Pay", "button")))
        assert obs.tool_results[0].content.startswith("Denied")
        assert [(e.category, e.tool, e.denied) for e in obs.risk_events] == [
            ("denied", "pay", True)
        ]
        assert db.grade(env.db_path, task).paid == 0.0
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        assert [(r["tool"], r["decision"]) for r in records if r["tool"] == "pay"] == [
            ("pay", "deny")
        ]
        assert {r["tool"] for r in records} >= {"click", "select", "add_to_cart", "place_order"}
    finally:
        env.close()
    table["ask_default"] = True  # an answer of yes lets the payment through
    assert (
        check_env("web-shop-v0", seeds=[0], env_kwargs={"permissions": table}).oracle_success == 1.0
    )


def test_snapshot_and_restore_copy_the_database(env):
    _, info = env.reset(seed=1)
    while env.page.path != "/cart":
        act(env, env.oracle_reply())
    snap = env.snapshot()
    while not env.episode.done:
        act(env, env.oracle_reply())
    assert db.grade(env.db_path, env.task).success == 1.0
    env.restore(snap)
    assert env.page.path == "/cart" and db.grade(env.db_path, env.task).new_orders == 0.0
    fresh = make("web-shop-v0")
    try:
        fresh.restore(snap)
        page = fresh.page.snapshot().render()
        assert page == env.page.snapshot().render() and "Checkout" in page
        obs, *_ = act(fresh, call("click", ref=ref(fresh, "Checkout", "link")))
        assert "Place order" in obs.messages[-1].content
    finally:
        fresh.close()
    with pytest.raises(TypeError):
        env.restore("not a snapshot")
    env.close()
    env.restore(snap)  # into a closed env: a new database folder, the server restarts
    assert (
        "Checkout"
        in act(env, call("scroll", target="page", direction="up"))[0].messages[-1].content
    )


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (call("click", ref=99), "unknown ref 99"),
        (call("select", ref=1, option="blue"), "not a <select>"),
        (call("type", ref=1, text="x"), "not a text field"),
        (call("press", key="Hyper"), "unknown key"),
        (call("scroll", target="up", direction="down"), "target must be"),
        (call("buy_everything"), "unknown tool"),
        (call("click", ref="one"), "Error"),
        ("<tool_call>{not json</tool_call>", "could not parse"),
        (call("pay", via="click", ref=1), "does not submit the pay form"),
    ],
)
def test_malformed_and_unknown_actions_are_error_observations(env, reply, expected):
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = act(env, reply)
    assert not (terminated or truncated) and reward == 0.0 and info["tool_errors"] == 1
    assert expected in obs.tool_results[0].content and not obs.tool_results[0].ok
    assert obs.messages[-1].content.startswith("Page /:")  # the page is still shown


def test_search_by_typing_and_enter(env):
    task = make_task(3)
    env.reset(seed=3)
    item = task.product(task.target).kind
    act(
        env,
        call("type", ref=ref(env, role="textbox", id="q"), text=item) + call("press", key="Enter"),
    )
    assert env.page.path.startswith("/search?q=")
    names = [e.text for e in env.page.snapshot().find(role="link")]
    assert sum(item in n for n in names) == 4  # the target and its three decoys


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_search_by_colour_and_size_lists_the_target_first(env, seed):
    # the words of the task's item, colour and size leave the target and the dearer decoy (the
    # two others lack the colour or the size), lowest price first: the target leads
    task = make_task(seed)
    env.reset(seed=seed)
    query = f"{task.product(task.target).kind} {task.colour.upper()} {task.size}"
    act(env, call("type", ref=ref(env, role="textbox", id="q"), text=query))
    act(env, call("click", ref=ref(env, "Search", "button")))
    page = env.page.snapshot()
    assert page.find(role="heading")[0].text.endswith(", lowest price first")
    results = [e for e in page.find(role="link") if ", $" in e.text]
    want = task.product(task.target)
    assert len(results) == 2 and results[0].text.startswith(f"{want.name}, ")
    act(env, call("click", ref=results[0].ref))
    assert env.page.path == f"/product/{task.target}"


def test_search_words_must_all_match_whole(env):
    task = make_task(0)
    env.reset(seed=0)
    item = task.product(task.target).kind
    for query in (item[:-1], f"{item} {task.colour} nosuchword"):  # a part word; an extra word
        act(env, call("type", ref=ref(env, role="textbox", id="q"), text=query))
        act(env, call("click", ref=ref(env, "Search", "button")))
        assert env.page.snapshot().find(text="No products found.")
        act(env, call("click", ref=ref(env, "Home", "link")))


def test_the_step_limit_truncates():
    env = make("web-shop-v0", max_steps=2)
    try:
        env.reset(seed=0)
        assert act(env, call("scroll", target="page", direction="down"))[3] is False
        *_, truncated, info = act(env, call("scroll", target="page", direction="down"))
        assert truncated and info["actions"] == 1
    finally:
        env.close()


def test_no_port_or_thread_is_left_after_close_an_exception_or_a_dropped_env():
    env = make("web-shop-v0")
    env.reset(seed=0)
    port = env.server.port
    assert listening(port) and shop_threads()
    env.close()
    env.close()  # twice is fine
    assert not listening(port) and not shop_threads()

    def crash() -> int:
        env = make("web-shop-v0")
        try:
            env.reset(seed=1)
            raise RuntimeError(f"boom on port {env.server.port}")
        finally:
            env.close()

    with pytest.raises(RuntimeError, match="boom on port") as caught:
        crash()
    assert not listening(int(str(caught.value).rsplit(" ", 1)[1]))

    dropped = make("web-shop-v0")
    dropped.reset(seed=2)
    port, folder = dropped.server.port, dropped._folder
    del dropped
    gc.collect()  # the finalizer stops the server and deletes the database folder
    assert not listening(port) and not shop_threads()
    import os

    assert not os.path.exists(folder)


def test_a_bad_browser_or_kind_is_refused():
    with pytest.raises(ValueError, match="browser"):
        WebShopEnv(browser="lynx")
    with pytest.raises(ValueError, match="task kinds"):
        WebShopEnv(task_kinds=("steal",))
    with pytest.raises(ValueError, match="tool prompt style"):
        WebShopEnv(tool_prompt="yaml")


def test_chromium_mode_runs_the_same_shop(tmp_path):
    from agentic_rl.tools.browser import live_pids

    audit = tmp_path / "audit.jsonl"
    try:
        env = make("web-shop-v0", browser="chromium", audit_path=str(audit))
    except EnvUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        text = make("web-shop-v0")
        first = text.reset(seed=2)[0].messages[1].content
        text.close()
        assert env.reset(seed=2)[0].messages[1].content == first  # the same page text
        for seed in (0, 2):
            trajectory = play_oracle(env, seed, max_turns=20)
            assert trajectory.turns[-1].info["success"] == 1.0
        profile, port = env.page.browser.profile, env.server.port
        with pytest.raises(SnapshotNotSupportedError):
            env.snapshot()
    finally:
        env.close()
    assert live_pids(marker=profile) == [] and not listening(port)
    # clicks that submit the shop's forms were decided and audited under the forms' names
    tools = {json.loads(line)["tool"] for line in audit.read_text().splitlines()}
    assert {"add_to_cart", "place_order", "pay", "cancel_order", "click", "select"} <= tools


def test_the_train_budgets_fit_the_oracle(tokenizer):
    from agentic_rl.cli.main import env_overrides
    from agentic_rl.config import load_config

    config = load_config(None, env_overrides("web-shop-v0", []))
    budgets = (config.rollout.max_turns, config.rollout.max_new_tokens)
    assert budgets == (12, 160) and config.rollout.max_total_tokens == 4096
    # the RL settings of the run that lifted (docs/training_runs.md)
    assert (config.optim.lr, config.rollout.temperature, config.loss.kl_coef) == (1e-5, 0.7, 0.04)
    assert config.loss.loss_agg == "seq-mean-token-mean"
    assert (config.warmup.num_demos, config.warmup.epochs) == (32, 2)
    # the recipe lists the tools as typed signatures: the same five, ~300 tokens fewer
    assert config.env.kwargs["tool_prompt"] == "signature"
    env, schemas = make("web-shop-v0", **config.env.kwargs), make("web-shop-v0")
    try:
        short, long = (len(tokenizer(e.system_prompt)["input_ids"]) for e in (env, schemas))
        assert short < long - 250
        assert all(f"{n}(ref" in env.system_prompt for n in ("click", "type"))
        for seed in range(6):  # every kind twice: the oracle's turns, replies and whole episode
            trajectory = play_oracle(env, seed, max_turns=30)
            assert len(trajectory.turns) <= config.rollout.max_turns
            replies = [m.content for m in trajectory.messages if m.role == "assistant"]
            assert max(len(tokenizer(r)["input_ids"]) for r in replies) <= budgets[1]
            text = "".join(
                f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in trajectory.messages
            )
            assert len(tokenizer(text)["input_ids"]) <= config.rollout.max_total_tokens
    finally:
        env.close()
        schemas.close()


@pytest.mark.parametrize("seed", [2, 5])  # replace kinds: cancel, buy, pay; seed 5 with a risk
def test_a_recorded_run_replays_without_divergence(chat, seed):
    """Record a whole episode through the rollout engine (the oracle, and on seed 5 an unasked
    payment of the earlier order first) and replay it in a fresh env: same pages, same rewards."""
    from agentic_rl.policy.scripted import ScriptedPolicy
    from agentic_rl.rollout import RolloutConfig, run_episodes
    from agentic_rl.trajectories.replay import replay

    env = make("web-shop-v0")
    task = make_task(seed)
    unpaid = next(o.id for o in task.earlier_orders if o.status == "awaiting payment")

    def reply(_i, _context) -> str:
        if seed == 5 and not db.grade(env.db_path, task).extra_payments:
            return open_order(env, unpaid, "Pay")
        return env.oracle_reply() or "Done."

    try:
        [recorded] = run_episodes(
            ScriptedPolicy(chat, reply),
            chat,
            [env],
            [seed],
            ["g"],
            RolloutConfig(max_turns=16, max_new_tokens=160, max_total_tokens=8192),
        )
    finally:
        env.close()
    assert recorded.terminated and recorded.turns[-1].info["success"] == 1.0
    assert recorded.turns[-1].info["extra_payments"] == (1.0 if seed == 5 else 0.0)
    fresh = make("web-shop-v0")
    try:
        result = replay(recorded, fresh)
    finally:
        fresh.close()
    assert result.divergences == () and result.turns_replayed == len(recorded.turns)
