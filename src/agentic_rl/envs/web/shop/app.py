"""The shop as a Flask app over the SQLite database of :mod:`agentic_rl.envs.web.shop.db`.

Pages (plain HTML forms, no JavaScript; every page starts with the links Home, Cart (n), My
orders):

==============================  ===========================================================
route                           what it shows or does
==============================  ===========================================================
``GET /``                       search box (``GET /search?q=``) and the category links
``GET /search?q=``              products that match every word of ``q`` (a word of the name,
                                the category, a colour or a size; any case), lowest price
                                first
``GET /category/<name>``        the category's products with their prices
``GET /product/<id>``           price, colours, sizes; form ``add_to_cart``: colour, size,
                                quantity (1-10)
``POST /cart/add``              adds a cart line (400 for an option the product lacks)
``GET /cart``                   the lines, each with a ``remove_from_cart`` form; Checkout
``GET /checkout``               shipping method and the ``place_order`` form
``POST /orders``                turns the cart into an order awaiting payment
``GET /orders``                 the customer's orders (earlier ones included)
``GET /orders/<id>``            the order; forms ``pay`` (while awaiting payment) and
                                ``cancel_order`` (until cancelled)
``POST /orders/<id>/pay``       captures a payment (409 when nothing is due)
``POST /orders/<id>/cancel``    cancels the order (a paid one is refunded; 409 when cancelled)
==============================  ===========================================================

Each state-changing form carries ``data-action`` with its action's name (the names above): the
env's permission policy decides on those names (:mod:`agentic_rl.envs.web.shop.env`). Every POST
is first put to the app's gate (:class:`~agentic_rl.envs.web.shop.gate.SubmissionGate`), whatever
made the browser send it; a refused one is answered 403 with the reason and changes nothing. Every
POST answers with a redirect (303) to the page that shows its effect. Errors are small HTML
pages with the reason. Flask is imported by :func:`create_app` only (extra ``web``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl.envs.web.shop.catalog import SHIPPING, money, search_terms
from agentic_rl.envs.web.shop.db import connect

__all__ = ["POST_ACTIONS", "TEMPLATES", "create_app"]

_BASE = """<!doctype html><html><head><title>Shop</title></head><body>
<nav><a href="/">Home</a> <a href="/cart">Cart ({{ cart_count }})</a> <a href="/orders">My orders</a></nav>
<main>{% block main %}{% endblock %}</main></body></html>"""

TEMPLATES = {
    "base.html": _BASE,
    "home.html": """{% extends "base.html" %}{% block main %}<h1>Shop</h1>
<form method="get" action="/search"><input id="q" name="q" placeholder="Search products">
<button>Search</button></form>
<ul>{% for c in categories %}<li><a href="/category/{{ c }}">{{ c|capitalize }}</a></li>{% endfor %}</ul>
{% endblock %}""",
    "list.html": """{% extends "base.html" %}{% block main %}<h1>{{ title }}</h1>
{% if not products %}<p>No products found.</p>{% endif %}
<ul>{% for p in products %}<li><a href="/product/{{ p.id }}">{{ p.name }}, {{ money(p.price) }}</a></li>
{% endfor %}</ul>{% endblock %}""",
    "product.html": """{% extends "base.html" %}{% block main %}<h1>{{ p.name }}</h1>
<p>{{ money(p.price) }} each. Colours: {{ colours|join(", ") }}. Sizes: {{ sizes|join(", ") }}.</p>
<form method="post" action="/cart/add" data-action="add_to_cart">
<input type="hidden" name="product_id" value="{{ p.id }}">
<select id="colour" name="colour">{% for c in colours %}<option>{{ c }}</option>{% endfor %}</select>
<select id="size" name="size">{% for s in sizes %}<option>{{ s }}</option>{% endfor %}</select>
<input id="quantity" type="number" name="quantity" value="1" min="1" max="10">
<button>Add to cart</button></form>{% endblock %}""",
    "cart.html": """{% extends "base.html" %}{% block main %}<h1>Cart</h1>
{% if not lines %}<p>Your cart is empty.</p>{% endif %}
<ul>{% for x in lines %}<li>{{ x.name }}, {{ x.colour }}, {{ x.size }},
quantity {{ x.quantity }}: {{ money(x.price * x.quantity) }}
<form method="post" action="/cart/remove/{{ x.id }}" data-action="remove_from_cart"><button>Remove</button></form></li>
{% endfor %}</ul>{% if lines %}<p>Items: {{ money(items) }}</p><a href="/checkout">Checkout</a>{% endif %}
{% endblock %}""",
    "checkout.html": """{% extends "base.html" %}{% block main %}<h1>Checkout</h1>
{% if not items %}<p>Your cart is empty.</p>{% else %}<p>Items: {{ money(items) }}</p>
<form method="post" action="/orders" data-action="place_order">
<select id="shipping" name="shipping">{% for name, fee in shipping %}
<option value="{{ name }}">{{ name }}, {{ money(fee) }}</option>{% endfor %}</select>
<button>Place order</button></form>{% endif %}{% endblock %}""",
    "orders.html": """{% extends "base.html" %}{% block main %}<h1>My orders</h1>
<ul>{% for o in orders %}<li><a href="/orders/{{ o.id }}">Order #{{ o.id }}: {{ o.names }}, {{ o.status }}</a></li>
{% endfor %}</ul>{% endblock %}""",
    "order.html": """{% extends "base.html" %}{% block main %}<h1>Order #{{ o.id }}</h1>
<p>Status: {{ o.status }}{% if o.status == "cancelled" and paid %} (refunded){% endif %}</p>
<ul>{% for x in lines %}<li>{{ x.name }}, {{ x.colour }}, {{ x.size }},
quantity {{ x.quantity }}, {{ money(x.price) }} each</li>
{% endfor %}</ul><p>Shipping: {{ o.shipping }}, {{ money(o.shipping_fee) }}. Total: {{ money(o.total) }}</p>
{% if o.status == "awaiting payment" %}<form method="post" action="/orders/{{ o.id }}/pay" data-action="pay">
<button>Pay {{ money(o.total) }}</button></form>{% endif %}
{% if o.status != "cancelled" %}<form method="post" action="/orders/{{ o.id }}/cancel" data-action="cancel_order">
<button>Cancel order</button></form>{% endif %}{% endblock %}""",
    "error.html": """{% extends "base.html" %}{% block main %}<h1>Error {{ code }}</h1>
<p>{{ message }}</p>{% endblock %}""",
}


def _cart(conn: Any) -> list[Any]:
    return conn.execute(
        "SELECT c.*, p.name, p.price FROM cart_items c JOIN products p ON p.id = c.product_id "
        "ORDER BY c.id"
    ).fetchall()


def _order_lines(conn: Any, order_id: int) -> list[Any]:
    return conn.execute(
        "SELECT i.*, p.name FROM order_items i JOIN products p ON p.id = i.product_id "
        "WHERE i.order_id = ? ORDER BY i.id",
        (order_id,),
    ).fetchall()


def _row_terms(row: Any) -> frozenset[str]:
    """:func:`~agentic_rl.envs.web.shop.catalog.search_terms` of a ``products`` row."""
    return search_terms(
        row["name"], row["category"], row["colours"].split(","), row["sizes"].split(",")
    )


def _register_routes(app: Any, page: Any, db: Any) -> None:
    """The read-only routes (the module docstring's GET pages)."""
    from flask import abort, request

    @app.get("/")
    def home() -> str:
        cats = [r[0] for r in db().execute("SELECT DISTINCT category FROM products ORDER BY 1")]
        return page("home.html", categories=cats)

    @app.get("/search")
    def search() -> str:
        words = request.args.get("q", "").lower().split()
        wanted = set(words)
        rows = db().execute("SELECT * FROM products ORDER BY price, id").fetchall()
        found = [r for r in rows if wanted <= _row_terms(r)]
        title = f"Results for {' '.join(words)!r}, lowest price first"
        return page("list.html", title=title, products=found)

    @app.get("/category/<name>")
    def category(name: str) -> str:
        rows = db().execute("SELECT * FROM products WHERE category = ? ORDER BY id", (name,))
        rows = rows.fetchall()
        if not rows:
            abort(404, f"no category {name!r}")
        return page("list.html", title=name.capitalize(), products=rows)

    @app.get("/product/<int:pid>")
    def product(pid: int) -> str:
        p = db().execute("SELECT * FROM products WHERE id = ?", (pid,)).fetchone()
        if p is None:
            abort(404, f"no product {pid}")
        return page(
            "product.html", p=p, colours=p["colours"].split(","), sizes=p["sizes"].split(",")
        )

    @app.get("/cart")
    def cart() -> str:
        lines = _cart(db())
        return page("cart.html", lines=lines, items=sum(x["price"] * x["quantity"] for x in lines))

    @app.get("/checkout")
    def checkout() -> str:
        items = sum(x["price"] * x["quantity"] for x in _cart(db()))
        return page("checkout.html", items=items, shipping=list(SHIPPING.items()))

    @app.get("/orders")
    def orders() -> str:
        rows = db().execute("SELECT * FROM orders ORDER BY id").fetchall()
        listed = [
            {**dict(o), "names": "; ".join(x["name"] for x in _order_lines(db(), o["id"]))}
            for o in rows
        ]
        return page("orders.html", orders=listed)

    @app.get("/orders/<int:oid>")
    def order(oid: int) -> str:
        o = db().execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
        if o is None:
            abort(404, f"no order #{oid}")
        paid = db().execute("SELECT COUNT(*) FROM payments WHERE order_id = ?", (oid,)).fetchone()
        return page("order.html", o=o, lines=_order_lines(db(), oid), paid=paid[0])


def _register_cart_actions(app: Any, db: Any) -> None:
    """The cart routes (POST): add and remove lines; each answered by a 303 redirect."""
    from flask import abort, redirect, request

    @app.post("/cart/add")
    def add_to_cart() -> Any:
        form = request.form
        p = db().execute("SELECT * FROM products WHERE id = ?", (form.get("product_id"),))
        p = p.fetchone()
        if p is None:
            abort(400, "unknown product")
        colour, size, qty = form.get("colour", ""), form.get("size", ""), form.get("quantity", "")
        if colour not in p["colours"].split(",") or size not in p["sizes"].split(","):
            abort(400, f"{p['name']} comes in colours {p['colours']} and sizes {p['sizes']}")
        if not qty.strip().isdigit() or not 1 <= int(qty) <= 10:
            abort(400, f"quantity must be a whole number from 1 to 10, got {qty!r}")
        with db() as conn:
            conn.execute(
                "INSERT INTO cart_items (product_id, colour, size, quantity) VALUES (?, ?, ?, ?)",
                (p["id"], colour, size, int(qty)),
            )
        return redirect("/cart", 303)

    @app.post("/cart/remove/<int:item>")
    def remove_from_cart(item: int) -> Any:
        with db() as conn:
            conn.execute("DELETE FROM cart_items WHERE id = ?", (item,))
        return redirect("/cart", 303)


def _register_order_actions(app: Any, db: Any) -> None:
    """The order routes (POST): place, pay, cancel; each answered by a 303 redirect."""
    from flask import abort, redirect, request

    @app.post("/orders")
    def place_order() -> Any:
        shipping = request.form.get("shipping", "")
        if shipping not in SHIPPING:
            abort(400, f"shipping must be one of {', '.join(SHIPPING)}")
        with db() as conn:
            lines = _cart(conn)
            if not lines:
                abort(400, "the cart is empty")
            fee = SHIPPING[shipping]
            total = sum(x["price"] * x["quantity"] for x in lines) + fee
            cur = conn.execute(
                "INSERT INTO orders (shipping, shipping_fee, total, status) VALUES (?, ?, ?, ?)",
                (shipping, fee, total, "awaiting payment"),
            )
            conn.executemany(
                "INSERT INTO order_items (order_id, product_id, colour, size, quantity, price) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        cur.lastrowid,
                        x["product_id"],
                        x["colour"],
                        x["size"],
                        x["quantity"],
                        x["price"],
                    )
                    for x in lines
                ],
            )
            conn.execute("DELETE FROM cart_items")
        return redirect(f"/orders/{cur.lastrowid}", 303)

    @app.post("/orders/<int:oid>/pay")
    def pay(oid: int) -> Any:
        with db() as conn:
            o = conn.execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
            if o is None or o["status"] != "awaiting payment":
                abort(409, f"order #{oid} has nothing to pay")
            conn.execute("INSERT INTO payments (order_id, amount) VALUES (?, ?)", (oid, o["total"]))
            conn.execute("UPDATE orders SET status = 'paid' WHERE id = ?", (oid,))
        return redirect(f"/orders/{oid}", 303)

    @app.post("/orders/<int:oid>/cancel")
    def cancel_order(oid: int) -> Any:
        with db() as conn:
            o = conn.execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
            if o is None or o["status"] == "cancelled":
                abort(409, f"order #{oid} cannot be cancelled")
            conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (oid,))
            conn.execute("INSERT INTO cancellations (order_id) VALUES (?)", (oid,))
        return redirect(f"/orders/{oid}", 303)


#: endpoint (view function) of each state-changing route -> the action the gate decides on
POST_ACTIONS = ("add_to_cart", "remove_from_cart", "place_order", "pay", "cancel_order")


def create_app(db_path: str | Path, gate: Callable[[str], str | None] | None = None) -> Any:
    """The Flask app serving the shop whose database is at ``db_path``.

    Args:
        db_path: the shop's SQLite database.
        gate: ``gate(action) -> None`` to let a POST of ``action`` (one of
            :data:`POST_ACTIONS`) through, or the reason to refuse it (403); None refuses every
            POST (a shop nobody decides for changes nothing).

    Raises:
        ImportError: Flask is not installed (extra ``web``).
    """
    from flask import Flask, abort, g, render_template, request
    from jinja2 import DictLoader
    from werkzeug.exceptions import HTTPException

    app = Flask("agentic_rl_web_shop")
    app.jinja_loader = DictLoader(TEMPLATES)

    def db() -> Any:
        if "db" not in g:
            g.db = connect(db_path)
        return g.db

    @app.teardown_appcontext
    def close_db(_exc: BaseException | None) -> None:
        conn = g.pop("db", None)
        if conn is not None:
            conn.close()

    def page(name: str, **context: Any) -> str:
        count = db().execute("SELECT COALESCE(SUM(quantity), 0) FROM cart_items").fetchone()[0]
        return render_template(name, cart_count=count, money=money, **context)

    @app.before_request
    def admit() -> None:
        if request.method in ("GET", "HEAD", "OPTIONS") or request.endpoint is None:
            return  # reads, and what routing answers 404/405 itself
        action = request.endpoint
        if action not in POST_ACTIONS:  # a state-changing route nobody named: never unguarded
            abort(403, f"Not submitted: {action} is not an action the gate knows")
        refusal = "no permission policy decides for this shop" if gate is None else gate(action)
        if refusal is not None:
            abort(403, f"Not submitted: {refusal}")

    @app.errorhandler(HTTPException)
    def error(exc: HTTPException) -> tuple[str, int]:
        return page("error.html", code=exc.code, message=exc.description), exc.code or 500

    _register_routes(app, page, db)
    _register_cart_actions(app, db)
    _register_order_actions(app, db)
    return app
