"""The reference policy of ``web-shop-v0``: the shortest way through the shop, as tool calls.

It reads the task, the database (what is done already) and the page the agent sees, and acts
only through the same browser actions on refs of that page, one page load per reply:

1. each order the task asks to cancel: My orders -> the order -> Cancel order;
2. an order placed and not paid: My orders -> the order -> Pay; once paid: a final reply;
3. a cart holding the item: Cart -> Checkout -> select the shipping and Place order (one reply);
4. else: Home -> search for the item with its colour and size (type the words and click Search,
   one reply) -> the first result whose price, times the quantity and plus the shipping, is
   within the budget (the results come lowest price first) -> select colour and size, type the
   quantity when it is not 1, and Add to cart (one reply of up to four calls).

It never uses what the page does not show to pick the product: the search words come from the
task's text and the choice from the prices on the results page, so a policy that imitates it
has every input it needs (the category pages list names and prices only; browsing them is the
other way through the shop, left to the agent).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentic_rl.envs.web.shop.catalog import SHIPPING, ShopTask
from agentic_rl.envs.web.shop.db import connect
from agentic_rl.tools.browser.snapshot import PageSnapshot
from agentic_rl.tools.definition.parser import format_tool_call

__all__ = ["oracle_reply", "search_query", "DONE_REPLY"]

DONE_REPLY = "Done: the order is placed and paid."
_RESULT = re.compile(r"^(?P<name>.+), \$(?P<dollars>\d+)\.(?P<cents>\d\d)$")


def search_query(task: ShopTask) -> str:
    """The words the oracle searches for: the wanted item, colour and size, as the task names
    them (e.g. ``"duffel bag white medium"``). Never raises."""
    return f"{task.product(task.target).kind} {task.colour} {task.size}"


def _call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


def _ref(
    page: PageSnapshot, text: str, role: str = "link", prefix: bool = False, **attrs: Any
) -> int:
    """The ref of the first element of ``role`` whose text is ``text`` (or starts with it).

    Raises:
        LookupError: none on the page (the oracle is lost: a bug).
    """
    for e in page.find(role=role, **attrs):
        if e.text == text or (prefix and e.text.startswith(text)):
            return int(e.ref)  # type: ignore[arg-type]
    raise LookupError(f"the oracle found no {role} {text!r} on the page")


def _click(page: PageSnapshot, text: str, role: str = "link", prefix: bool = False) -> str:
    return _call("click", ref=_ref(page, text, role, prefix))


def _state(db_path: Path) -> tuple[set[int], list[Any], int]:
    """(cancelled order ids, new orders not cancelled, cart lines)."""
    conn = connect(db_path)
    try:
        orders = conn.execute("SELECT * FROM orders ORDER BY id").fetchall()
        cart = conn.execute("SELECT COUNT(*) FROM cart_items").fetchone()[0]
    finally:
        conn.close()
    cancelled = {o["id"] for o in orders if o["status"] == "cancelled"}
    live = [o for o in orders if not o["earlier"] and o["status"] != "cancelled"]
    return cancelled, live, int(cart)


def _open_order(page: PageSnapshot, path: str, order_id: int, button: str) -> str:
    if path == f"/orders/{order_id}":
        return _click(page, button, "button", prefix=True)
    if path == "/orders":
        return _click(page, f"Order #{order_id}:", prefix=True)
    return _click(page, "My orders")


def _product_form(task: ShopTask, page: PageSnapshot) -> str:
    calls = [
        _call("select", ref=_ref(page, "", "combobox", True, id="colour"), option=task.colour),
        _call("select", ref=_ref(page, "", "combobox", True, id="size"), option=task.size),
    ]
    if task.quantity != 1:
        qty = _ref(page, "", "textbox", True, id="quantity")
        calls.append(_call("type", ref=qty, text=str(task.quantity)))
    calls.append(_click(page, "Add to cart", "button"))
    return "\n".join(calls)


def oracle_reply(task: ShopTask, db_path: Path, path: str, page: PageSnapshot) -> str:
    """The oracle's next reply for ``task`` with the shop at ``db_path`` showing ``page`` at
    ``path`` (module docstring).

    Raises:
        LookupError: an element the oracle needs is not on the page.
    """
    cancelled, live, cart = _state(db_path)
    for order_id in task.cancel:
        if order_id not in cancelled:
            return _open_order(page, path, order_id, "Cancel order")
    if live:
        if live[0]["status"] == "paid":
            return DONE_REPLY
        return _open_order(page, path, live[0]["id"], "Pay")
    if cart:
        if path == "/checkout":
            shipping = _ref(page, "", "combobox", True, id="shipping")
            place = _click(page, "Place order", "button")
            return f"{_call('select', ref=shipping, option=task.shipping)}\n{place}"
        if path == "/cart":
            return _click(page, "Checkout")
        return _click(page, "Cart (", prefix=True)
    product = task.product(task.target)
    if path == f"/product/{product.id}":
        return _product_form(task, page)
    query = search_query(task)
    if urlsplit(path).path == "/search" and _searched(path) == query.lower().split():
        return _first_within_budget(task, page)
    if path == "/":
        box = _ref(page, "", "textbox", True, id="q")
        return f"{_call('type', ref=box, text=query)}\n{_click(page, 'Search', 'button')}"
    return _click(page, "Home")


def _searched(path: str) -> list[str]:
    """The words of the search at ``path`` (``/search?q=...``), lower case."""
    return " ".join(parse_qs(urlsplit(path).query).get("q", [])).lower().split()


def _first_within_budget(task: ShopTask, page: PageSnapshot) -> str:
    """A click on the first result whose shown price fits the budget with the quantity and the
    shipping.

    Raises:
        LookupError: no result fits (the catalogue always has one: a bug).
    """
    for e in page.find(role="link"):
        m = _RESULT.match(e.text)
        if m is None:
            continue
        price = int(m["dollars"]) * 100 + int(m["cents"])
        if price * task.quantity + SHIPPING[task.shipping] <= task.budget:
            return _call("click", ref=int(e.ref))  # type: ignore[arg-type]
    raise LookupError("the oracle found no search result within the budget")
