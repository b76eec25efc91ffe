"""The MiniWoB++ task set of ``miniwob/<task>-v0`` and a scripted oracle per task.

Each oracle reads only what the policy sees: the task's utterance and the current page
(:class:`~agentic_rl.tools.browser.snapshot.PageSnapshot`), and returns the next action as a tool
call ``{"name": ..., "arguments": {...}}`` (one action per turn), or None when it sees no way on.
It works from any state the page can be in (a warm-up demonstration, or guidance in the middle
of a policy's episode): it looks at what is already done (a field's value, a box's state, the
open tab or result page) before acting.

==================  ============  ==========================================================
task                kind          what the agent does
==================  ============  ==========================================================
click-button        click         click the button with the given text
click-link          click         click the link (a word in a paragraph) with the given text
click-dialog        click         close a jQuery UI dialog with its "x" button
click-checkboxes    click         tick exactly the named boxes, then Submit (partial credit)
click-option        click         choose the named radio button, then Submit
enter-text          type          type the given text into the field, then Submit
enter-password      form          type the password into both fields, then Submit
login-user          form          type a username and a password, then Login
choose-list         form          choose the named entry of a drop-down list, then Submit
use-autocomplete    multi-step    type a prefix, pick the matching suggestion, then Submit
click-tab-2         multi-step    open tabs until the named link shows, then click it
search-engine       multi-step    search a name, go to the result page of the k-th result,
                                  click it
==================  ============  ==========================================================
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentic_rl.tools.browser.snapshot import PageElement, PageSnapshot

__all__ = ["MINIWOB_TASKS", "MiniWoBTask", "quoted", "random_action"]

Call = dict[str, Any] | None


@dataclass(frozen=True)
class MiniWoBTask:
    """One task of the set: its MiniWoB name, kind, a line for ``agentic-rl envs``, its oracle."""

    name: str
    kind: str
    description: str
    oracle: Callable[[str, PageSnapshot], Call]


def quoted(utterance: str) -> list[str]:
    """The double-quoted strings of ``utterance``, in order (``'a "b" c "d"'`` -> ``["b", "d"]``)."""
    return re.findall(r'"([^"]*)"', utterance)


def _click(el: PageElement | None) -> Call:
    return None if el is None else {"name": "click", "arguments": {"ref": el.ref}}


def _type(el: PageElement | None, text: str) -> Call:
    return None if el is None else {"name": "type", "arguments": {"ref": el.ref, "text": text}}


def _first(page: PageSnapshot, **match: Any) -> PageElement | None:
    found = page.find(**match)
    return found[0] if found else None


def _fill_then_click(
    page: PageSnapshot, fields: list[tuple[str, str]], button: dict[str, Any]
) -> Call:
    """Type each ``(field id, text)`` whose value differs, then click ``button``."""
    for field_id, text in fields:
        el = _first(page, id=field_id)
        if el is not None and el.value != text:
            return _type(el, text)
    return _click(_first(page, **button))


def click_button(utterance: str, page: PageSnapshot) -> Call:
    """'Click on the "X" button.'"""
    return _click(_first(page, text=quoted(utterance)[0], role="button"))


def click_link(utterance: str, page: PageSnapshot) -> Call:
    """'Click on the link "X".' (the links are ``span.alink`` words)."""
    return _click(_first(page, text=quoted(utterance)[0], cls="alink"))


def click_dialog(utterance: str, page: PageSnapshot) -> Call:
    """'Close the dialog box by clicking the "x".'"""
    return _click(_first(page, role="button", cls="ui-button"))


def _named_list(utterance: str) -> list[str]:
    match = re.match(r"Select (.*) and click Submit\.", utterance)
    names = match.group(1) if match else ""
    return [] if names == "nothing" else [n.strip() for n in names.split(",") if n.strip()]


def click_checkboxes(utterance: str, page: PageSnapshot) -> Call:
    """'Select A, B and click Submit.' ('Select nothing ...' when none is named)."""
    wanted = set(_named_list(utterance))
    for box in page.find(role="checkbox"):
        if box.checked != (box.text in wanted):
            return _click(box)
    return _click(_first(page, text="Submit", role="button"))


def click_option(utterance: str, page: PageSnapshot) -> Call:
    """'Select X and click Submit.' (radio buttons)."""
    (name,) = _named_list(utterance) or [""]
    radio = _first(page, role="radio", text=name)
    if radio is not None and not radio.checked:
        return _click(radio)
    return _click(_first(page, text="Submit", role="button"))


def enter_text(utterance: str, page: PageSnapshot) -> Call:
    """'Enter "X" into the text field and press Submit.'"""
    return _fill_then_click(page, [("tt", quoted(utterance)[0])], {"id": "subbtn"})


def enter_password(utterance: str, page: PageSnapshot) -> Call:
    """'Enter the password "X" into both text fields and press submit.'"""
    word = quoted(utterance)[0]
    return _fill_then_click(page, [("password", word), ("verify", word)], {"id": "subbtn"})


def login_user(utterance: str, page: PageSnapshot) -> Call:
    """'Enter the username "u" and the password "p" into the text fields and press login.'"""
    user, password = quoted(utterance)[:2]
    return _fill_then_click(page, [("username", user), ("password", password)], {"id": "subbtn"})


def choose_list(utterance: str, page: PageSnapshot) -> Call:
    """'Select X from the list and click Submit.'"""
    match = re.match(r"Select (.*) from the list", utterance)
    menu = _first(page, id="options")
    if match and menu is not None and menu.value != match.group(1):
        return {"name": "select", "arguments": {"ref": menu.ref, "option": match.group(1)}}
    return _click(_first(page, text="Submit", role="button"))


def use_autocomplete(utterance: str, page: PageSnapshot) -> Call:
    """'Enter an item that starts with "F" [and ends with "E"].'"""
    parts = quoted(utterance)
    start, end = parts[0], parts[1] if len(parts) > 1 else ""
    ok = lambda text: text.startswith(start) and text.endswith(end)  # noqa: E731
    field = _first(page, id="tags")
    for item in page.find(cls="ui-menu-item-wrapper"):  # an open menu covers the button
        if ok(item.text):
            return _click(item)
    if field is not None and field.value and ok(field.value):
        return _click(_first(page, id="subbtn"))
    return _type(field, start)


def click_tab_2(utterance: str, page: PageSnapshot) -> Call:
    """'Switch between the tabs to find and click on the link "X".' Opens the tab after the open
    one until the link shows."""
    link = _first(page, text=quoted(utterance)[0], cls="alink")
    if link is not None:
        return _click(link)
    tabs = [e for e in page.find(role="link") if e.text.startswith("Tab #")]
    current = next((i for i, t in enumerate(tabs) if t.selected), -1)
    return _click(tabs[(current + 1) % len(tabs)]) if tabs else None


def search_engine(utterance: str, page: PageSnapshot) -> Call:
    """'Use the textbox to enter "N" and press "Search", then find and click the Kth search
    result.' Three results a page: result K is on page (K-1)//3 + 1."""
    name = quoted(utterance)[0]
    match = re.search(r"click the (\d+)(?:st|nd|rd|th) search result", utterance)
    rank = int(match.group(1)) if match else 1
    box = _first(page, id="search-text")
    titles = page.find(cls="search-title")
    if box is not None and box.value != name:
        return _type(box, name)
    if not titles:
        return _click(_first(page, id="search"))
    want = str((rank - 1) // 3 + 1)
    pages = [e for e in page.find(cls="page-link") if e.text.isdigit()]
    current = next((p for p in pages if p.selected), None)
    if current is not None and current.text != want:
        return _click(next((p for p in pages if p.text == want), None))
    return _click(titles[(rank - 1) % 3] if len(titles) >= 3 else None)


_TASKS = (
    ("click-button", "click", "click the button with the given text", click_button),
    ("click-link", "click", "click the link with the given text", click_link),
    ("click-dialog", "click", 'close a dialog with its "x"', click_dialog),
    ("click-checkboxes", "click", "tick the named check boxes, then Submit", click_checkboxes),
    ("click-option", "click", "choose the named radio button, then Submit", click_option),
    ("enter-text", "type", "type the given text, then Submit", enter_text),
    ("enter-password", "form", "type a password into two fields, then Submit", enter_password),
    ("login-user", "form", "type a username and a password, then Login", login_user),
    ("choose-list", "form", "choose an entry of a drop-down list, then Submit", choose_list),
    ("use-autocomplete", "multi-step", "type a prefix, pick the suggestion", use_autocomplete),
    ("click-tab-2", "multi-step", "open tabs to find a link, click it", click_tab_2),
    ("search-engine", "multi-step", "search, page to the k-th result, click it", search_engine),
)
#: the task set, by MiniWoB task name
MINIWOB_TASKS: dict[str, MiniWoBTask] = {
    name: MiniWoBTask(name, kind, description, oracle) for name, kind, description, oracle in _TASKS
}


def random_action(utterance: str, page: PageSnapshot, rng: random.Random) -> dict[str, Any]:
    """The random baseline's action: a uniformly drawn ref of the page and a valid action for
    it (``select`` a random option of a select, ``type`` a quoted string of the utterance or a
    word of it into a text field, else ``click``); ``press Enter`` when the page shows no ref."""
    refs = [e for e in page.elements if e.ref is not None]
    if not refs:
        return {"name": "press", "arguments": {"key": "Enter"}}
    el = rng.choice(refs)
    if el.options:
        return {"name": "select", "arguments": {"ref": el.ref, "option": rng.choice(el.options)}}
    if el.role == "textbox":
        words = quoted(utterance) or utterance.split()
        return {"name": "type", "arguments": {"ref": el.ref, "text": rng.choice(words)}}
    return {"name": "click", "arguments": {"ref": el.ref}}
