"""The shop's seeded catalogue, earlier orders and tasks (hidden constraints), as plain data.

:func:`make_task` turns an episode seed into a :class:`ShopTask`: a catalogue of
:data:`PRODUCTS_PER_CATEGORY` products in each of six categories, two earlier orders of the
customer (one paid, one awaiting payment) and what the customer wants. The wanted item is named
by its kind (e.g. "rain jacket") with a colour, a size, a quantity, a shipping method and a
budget for the whole order (items and shipping); the product itself is not named. Among the
products of that kind exactly one satisfies every constraint: the decoys are dearer (over
budget), or lack the colour, or lack the size. Kinds of task (:data:`TASK_KINDS`):

``buy``        one item, standard shipping;
``buy_many``   2-3 items, express or pickup shipping;
``replace``    first cancel a named earlier order, then buy as in ``buy_many``.

Money is in cents. Nothing here imports Flask: the database and the app read these values.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "SHIPPING",
    "TASK_KINDS",
    "PRODUCTS_PER_CATEGORY",
    "EarlierOrder",
    "Product",
    "ShopTask",
    "make_task",
    "money",
    "search_terms",
]

#: category -> (kinds of item, sizes offered)
CATEGORIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "shoes": (("running shoes", "hiking boots", "sneakers"), ("40", "41", "42", "43", "44")),
    "shirts": (("linen shirt", "flannel shirt", "polo shirt"), ("S", "M", "L", "XL")),
    "jackets": (("rain jacket", "down jacket", "fleece jacket"), ("S", "M", "L", "XL")),
    "socks": (("wool socks", "ski socks", "cotton socks"), ("S", "M", "L")),
    "hats": (("beanie", "sun hat", "bucket hat"), ("S", "M", "L")),
    "bags": (("backpack", "tote bag", "duffel bag"), ("small", "medium", "large")),
}
COLOURS = ("black", "white", "blue", "red", "green", "grey", "navy", "brown")
BRANDS = ("Alder", "Birch", "Cedar", "Dune", "Ember", "Fjord", "Grove", "Harbor", "Iris", "Juniper")
#: shipping method -> fee in cents
SHIPPING = {"standard": 500, "express": 1500, "pickup": 0}
TASK_KINDS = ("buy", "buy_many", "replace")
PRODUCTS_PER_CATEGORY = 4
_PRICE_RANGE = {"shoes": (40, 120), "shirts": (20, 60), "jackets": (50, 150), "socks": (5, 20)}


def money(cents: int) -> str:
    """``$12.50`` for 1250 cents. Never raises."""
    return f"${cents // 100}.{cents % 100:02d}"


def search_terms(
    name: str, category: str, colours: Sequence[str], sizes: Sequence[str]
) -> frozenset[str]:
    """The words the shop's search matches for a product: the words of its name and category,
    its colours and sizes, lower case (a query matches when every one of its lower-cased words
    is among them). Never raises."""
    return frozenset(" ".join([name, category, *colours, *sizes]).lower().split())


@dataclass(frozen=True)
class Product:
    """One product: id, name (brand + kind), category, kind, price (cents), colours, sizes."""

    id: int
    name: str
    category: str
    kind: str
    price: int
    colours: tuple[str, ...]
    sizes: tuple[str, ...]


@dataclass(frozen=True)
class EarlierOrder:
    """An order the customer placed before the episode: id, product, options, status."""

    id: int
    product_id: int
    colour: str
    size: str
    quantity: int
    shipping: str
    status: str  # "paid" or "awaiting payment"


@dataclass(frozen=True)
class ShopTask:
    """One episode's shop and goal.

    Attributes:
        seed: the episode seed.
        kind: one of :data:`TASK_KINDS`.
        products: the catalogue, ids 1..N in category order.
        earlier_orders: the customer's orders before the episode (ids below every new order).
        target: id of the one product that satisfies the constraints.
        colour, size, quantity, shipping, budget: the constraints (budget in cents, on the
            order's total: items and shipping).
        cancel: ids of earlier orders the task asks to cancel (empty for ``buy``/``buy_many``).
        text: the task as the customer says it.
    """

    seed: int
    kind: str
    products: tuple[Product, ...]
    earlier_orders: tuple[EarlierOrder, ...]
    target: int
    colour: str
    size: str
    quantity: int
    shipping: str
    budget: int
    cancel: tuple[int, ...]
    text: str

    def product(self, product_id: int) -> Product:
        """The product with ``product_id``.

        Raises:
            KeyError: no such product.
        """
        for p in self.products:
            if p.id == product_id:
                return p
        raise KeyError(product_id)


def _price(rng: random.Random, category: str) -> int:
    lo, hi = _PRICE_RANGE.get(category, (15, 80))
    return rng.randrange(lo, hi + 1) * 100 - rng.choice((0, 1, 5, 51))


def _wanted(rng: random.Random, kind: str) -> tuple[str, str, int, str]:
    """(category, item kind, quantity, shipping) of the wanted item."""
    category = rng.choice(sorted(CATEGORIES))
    item = rng.choice(CATEGORIES[category][0])
    if kind == "buy":
        return category, item, 1, "standard"
    return category, item, rng.choice((2, 3)), rng.choice(("express", "pickup"))


def _rest(rng: random.Random, items: list, others: list, n: int) -> list:
    """``n`` picks from ``items`` not in ``others`` (in order of ``items``, shuffled)."""
    pool = [x for x in items if x not in others]
    return sorted(rng.sample(pool, min(n, len(pool))), key=items.index)


def _products(rng: random.Random, kind: str, wanted: tuple[str, str, int, str]) -> tuple:
    """The catalogue and (target id, colour, size, budget) for the wanted item."""
    category, item, qty, shipping = wanted
    sizes = list(CATEGORIES[category][1])
    colour, size = rng.choice(COLOURS), rng.choice(sizes)
    brands = rng.sample(BRANDS, len(BRANDS))
    price = _price(rng, category)
    fee = SHIPPING[shipping]
    budget = qty * price + fee + rng.randrange(1, 10) * 100  # slack below a decoy's difference
    dear = max(price + (budget - qty * price - fee) // qty + 500, price + 1000)
    variants = [  # (price, colours, sizes): the target, then the decoys
        (price, [colour, *_rest(rng, list(COLOURS), [colour], 1)], sizes),
        (dear, [colour, *_rest(rng, list(COLOURS), [colour], 1)], sizes),
        (price - 300, _rest(rng, list(COLOURS), [colour], 2), sizes),
        (price - 200, [colour], [s for s in sizes if s != size]),
    ]
    order = rng.sample(range(len(variants)), len(variants))
    products: list[Product] = []
    target = 0
    for cat in sorted(CATEGORIES):
        kinds, cat_sizes = CATEGORIES[cat]
        for slot in range(PRODUCTS_PER_CATEGORY):
            pid = len(products) + 1
            if cat == category:
                p_price, p_colours, p_sizes = variants[order[slot]]
                name = f"{brands[slot]} {item}"
                target = pid if order[slot] == 0 else target
                p_item = item
            else:
                p_item = kinds[slot % len(kinds)]
                name = f"{brands[slot]} {p_item}"
                p_price = _price(rng, cat)
                p_colours = _rest(rng, list(COLOURS), [], 2)
                p_sizes = list(cat_sizes)
            colours = tuple(sorted(p_colours, key=COLOURS.index))
            products.append(Product(pid, name, cat, p_item, p_price, colours, tuple(p_sizes)))
    return tuple(products), target, colour, size, budget


def _earlier(rng: random.Random, products: tuple[Product, ...], target: int) -> tuple:
    """Two earlier orders of other products: one paid, one awaiting payment."""
    first = rng.randrange(1001, 1090)
    picks = rng.sample([p for p in products if p.id != target], 2)
    return tuple(
        EarlierOrder(
            first + 7 * i,
            p.id,
            p.colours[0],
            p.sizes[0],
            1,
            "standard",
            "paid" if i == 0 else "awaiting payment",
        )
        for i, p in enumerate(picks)
    )


def make_task(seed: int, kinds: tuple[str, ...] = TASK_KINDS) -> ShopTask:
    """The task of ``seed``: kind ``kinds[seed % len(kinds)]``, the rest drawn from the seed.

    Raises:
        ValueError: ``kinds`` is empty or names an unknown kind.
    """
    if not kinds or any(k not in TASK_KINDS for k in kinds):
        raise ValueError(f"task kinds must be a non-empty subset of {TASK_KINDS}, got {kinds!r}")
    kind = kinds[seed % len(kinds)]
    rng = random.Random(f"web-shop/{seed}")
    wanted = _wanted(rng, kind)
    products, target, colour, size, budget = _products(rng, kind, wanted)
    earlier = _earlier(rng, products, target)
    _, item, qty, shipping = wanted
    cancel: tuple[int, ...] = ()
    lead = ""
    if kind == "replace":
        old = rng.choice(earlier)
        cancel = (old.id,)
        lead = (
            f"First cancel my order #{old.id} (the {products[old.product_id - 1].name}); "
            "keep my other orders. Then "
        )
    text = (
        f"{lead}{'b' if lead else 'B'}uy {item} in {colour}, size {size}, quantity {qty}, "
        f"with {shipping} shipping. Spend at most {money(budget)} in total (items and "
        "shipping). Pay for the order, then reply that you are done."
    )
    return ShopTask(
        seed, kind, products, earlier, target, colour, size, qty, shipping, budget, cancel, text
    )
