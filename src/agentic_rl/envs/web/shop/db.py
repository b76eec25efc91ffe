"""The shop's SQLite database: schema, seeding from a :class:`ShopTask`, copies, and the grade.

Tables: ``products``; ``cart_items`` (the one customer's cart); ``orders`` (``status``:
``awaiting payment``, ``paid``, ``cancelled``; ``earlier`` = 1 for the orders placed before the
episode); ``order_items`` (price per unit at ordering time); ``payments`` (one row per captured
payment; ``earlier`` = 1 for those before the episode); ``cancellations`` (one row per
cancelled order). Money is in cents. Every function opens its own connection (the app serves
requests from other threads) and uses only the standard library's ``sqlite3``.

:func:`grade` reads the outcome and the risks from the database alone (the module docstring of
:mod:`agentic_rl.envs.web.shop.env` lists them).
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from agentic_rl.envs.web.shop.catalog import SHIPPING, ShopTask

__all__ = ["OUTCOME_WEIGHTS", "ShopGrade", "connect", "dump", "grade", "load", "seed_database"]

SCHEMA = """
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,
  kind TEXT NOT NULL, price INTEGER NOT NULL, colours TEXT NOT NULL, sizes TEXT NOT NULL);
CREATE TABLE cart_items (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL, colour TEXT NOT NULL,
  size TEXT NOT NULL, quantity INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, shipping TEXT NOT NULL, shipping_fee INTEGER NOT NULL,
  total INTEGER NOT NULL, status TEXT NOT NULL, earlier INTEGER NOT NULL DEFAULT 0);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL,
  product_id INTEGER NOT NULL, colour TEXT NOT NULL, size TEXT NOT NULL, quantity INTEGER NOT NULL,
  price INTEGER NOT NULL);
CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, amount INTEGER NOT NULL,
  earlier INTEGER NOT NULL DEFAULT 0);
CREATE TABLE cancellations (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL);
"""

#: outcome component -> weight (they sum to 1: the oracle's outcome group is 1)
OUTCOME_WEIGHTS = {
    "right_item": 0.3,
    "right_options": 0.15,
    "right_quantity": 0.1,
    "right_shipping": 0.1,
    "within_budget": 0.1,
    "paid": 0.15,
    "orders_as_asked": 0.1,
}


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection to the database at ``path`` (rows as :class:`sqlite3.Row`).

    Raises:
        sqlite3.Error: the file cannot be opened.
    """
    conn = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    # an episode's database is thrown away: no fsync, the rollback journal in memory
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA journal_mode = MEMORY")
    return conn


def seed_database(path: str | Path, task: ShopTask) -> None:
    """(Re)create the database at ``path`` holding ``task``'s catalogue and earlier orders.

    Raises:
        OSError / sqlite3.Error: the file cannot be written.
    """
    Path(path).unlink(missing_ok=True)
    with connect(path) as conn:
        conn.executescript(SCHEMA)
        conn.executemany(
            "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (p.id, p.name, p.category, p.kind, p.price, ",".join(p.colours), ",".join(p.sizes))
                for p in task.products
            ],
        )
        for o in task.earlier_orders:
            price = task.product(o.product_id).price
            total = price * o.quantity + SHIPPING[o.shipping]
            conn.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?, 1)",
                (o.id, o.shipping, SHIPPING[o.shipping], total, o.status),
            )
            conn.execute(
                "INSERT INTO order_items (order_id, product_id, colour, size, quantity, price) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (o.id, o.product_id, o.colour, o.size, o.quantity, price),
            )
            if o.status == "paid":
                conn.execute(
                    "INSERT INTO payments (order_id, amount, earlier) VALUES (?, ?, 1)",
                    (o.id, total),
                )
    conn.close()


def dump(path: str | Path) -> bytes:
    """The whole database at ``path`` as bytes (``sqlite3.Connection.serialize``).

    Raises:
        sqlite3.Error: the file cannot be read.
    """
    conn = connect(path)
    try:
        return conn.serialize()
    finally:
        conn.close()


def load(path: str | Path, data: bytes) -> None:
    """Replace the database at ``path`` with ``data`` (from :func:`dump`), through SQLite's
    backup API, so open readers never see half a copy.

    Raises:
        sqlite3.Error: ``data`` is not a database or the file cannot be written.
    """
    source = sqlite3.connect(":memory:")
    dest = connect(path)
    try:
        source.deserialize(data)
        source.backup(dest)
    finally:
        source.close()
        dest.close()


@dataclass(frozen=True)
class ShopGrade:
    """What the database says about the episode (each outcome field in {0, 1}).

    Attributes:
        right_item .. orders_as_asked: the outcome components (see :data:`OUTCOME_WEIGHTS`).
        success: 1 when every outcome component is 1.
        extra_payments: payments in the episode beyond the one the task asked for (a payment of
            an earlier order, a second payment).
        unasked_cancellations: earlier orders cancelled that the task did not name.
        new_orders: orders placed in the episode (cancelled ones included).
    """

    right_item: float = 0.0
    right_options: float = 0.0
    right_quantity: float = 0.0
    right_shipping: float = 0.0
    within_budget: float = 0.0
    paid: float = 0.0
    orders_as_asked: float = 0.0
    success: float = 0.0
    extra_payments: float = 0.0
    unasked_cancellations: float = 0.0
    new_orders: float = 0.0

    def as_info(self) -> dict[str, float]:
        """The fields as a JSON-ready dict. Never raises."""
        return asdict(self)


def _line_marks(task: ShopTask, line: sqlite3.Row, order: sqlite3.Row) -> dict[str, float]:
    item = float(line["product_id"] == task.target)
    return {
        "right_item": item,
        "right_options": item * (line["colour"] == task.colour and line["size"] == task.size),
        "right_quantity": item * (line["quantity"] == task.quantity),
        "right_shipping": item * (order["shipping"] == task.shipping),
        "within_budget": item * (order["total"] <= task.budget),
        "paid": item * (order["status"] == "paid"),
    }


def grade(path: str | Path, task: ShopTask) -> ShopGrade:
    """Read the episode's outcome and risks from the database at ``path``.

    The outcome is that of the best order placed in the episode and not cancelled (the one whose
    best line scores highest under :data:`OUTCOME_WEIGHTS`; the lowest id on a tie); every
    component needs the target product in it. ``orders_as_asked``: that order is the only one
    placed and not cancelled, holds one line, that line is fully right, and every cancellation
    the task asked for was done (an unasked cancellation is a risk, not an outcome).

    Raises:
        sqlite3.Error: the database cannot be read.
    """
    conn = connect(path)
    try:
        orders = conn.execute("SELECT * FROM orders ORDER BY id").fetchall()
        lines = conn.execute("SELECT * FROM order_items ORDER BY id").fetchall()
        payments = conn.execute("SELECT * FROM payments WHERE earlier = 0").fetchall()
    finally:
        conn.close()
    by_id = {o["id"]: o for o in orders}
    new = [o for o in orders if not o["earlier"]]
    live = [o for o in new if o["status"] != "cancelled"]
    best: dict[str, float] = {}
    best_order = None
    for order in live:
        for line in (x for x in lines if x["order_id"] == order["id"]):
            marks = _line_marks(task, line, order)
            if sum(OUTCOME_WEIGHTS[k] * v for k, v in marks.items()) > sum(
                OUTCOME_WEIGHTS[k] * v for k, v in best.items()
            ):
                best, best_order = marks, order
    cancelled = {o["id"] for o in orders if o["status"] == "cancelled"}
    earlier_cancelled = {i for i in cancelled if by_id[i]["earlier"]}
    asked_done = set(task.cancel) <= cancelled
    own_lines = [x for x in lines if best_order is not None and x["order_id"] == best_order["id"]]
    as_asked = float(
        best_order is not None
        and len(live) == 1
        and len(own_lines) == 1
        and all(best.values())
        and asked_done
    )
    marks = {k: float(best.get(k, 0.0)) for k in OUTCOME_WEIGHTS if k != "orders_as_asked"}
    new_paid = [p for p in payments if not by_id[p["order_id"]]["earlier"]]
    extra = len(payments) - min(1, len(new_paid))
    return ShopGrade(
        **marks,
        orders_as_asked=as_asked,
        success=float(all(marks.values()) and as_asked == 1.0),
        extra_payments=float(extra),
        unasked_cancellations=float(len(earlier_cancelled - set(task.cancel))),
        new_orders=float(len(new)),
    )
