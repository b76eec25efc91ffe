"""Browser actions as tools: ``click``, ``type``, ``press``, ``select``, ``scroll`` on refs.

:class:`BrowserActions` holds a way to get a Selenium driver (the env's browser, started lazily)
and offers :meth:`BrowserActions.tools`: one :class:`~agentic_rl.tools.definition.tool.Tool` per
action with its JSON schema, meant to run through a
:class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission policy, audit log). The
refs are those of the latest :func:`~agentic_rl.tools.browser.snapshot.take_snapshot` rendering.

=============================  ===================================================  ================
tool                           what it does (Selenium)                              side effect
=============================  ===================================================  ================
``click(ref)``                 a real mouse click in the middle of the element      workspace_write
``type(ref, text)``            clicks the field, clears it, types ``text`` key by   workspace_write
                               key (key events fire, so autocompletes react)
``press(key)``                 a key to the focused element: ``Enter``, ``Tab``,    workspace_write
                               ``Escape``, ``Backspace``, ``Delete``, ``Space``,
                               ``ArrowUp``/``Down``/``Left``/``Right``, ``Home``,
                               ``End``, ``PageUp``, ``PageDown``, one character, or
                               a chord such as ``Control+a``
``select(ref, option)``        chooses the option of a ``<select>`` by its text      workspace_write
                               (then by its value)
``scroll(target, direction)``  scrolls the page (``target="page"``) or the          read_only
                               element with that ref by about one screen
=============================  ===================================================  ================

The side-effect classes (:data:`SIDE_EFFECTS`) feed the permission policy: the actions change
the page, which is the env's own workspace (nothing outside the browser), so
``workspace_write``; scrolling only changes what is seen.

Errors become the tool's error observation (the executor turns the exception into
``Error: ...``, ``ok=False``) and never end the episode: :class:`UnknownRefError` (a ref never
shown: the message lists the refs on the page), :class:`StaleRefError` (a ref whose element is
gone since it was shown), an element that cannot take the action (not a select, hidden or
covered: Selenium's message, shortened), an unknown key or option (the valid ones are named).

After every action the page is let to *settle*: up to ``settle_s`` seconds until no short timer
(≤ 1 s, e.g. an autocomplete's delay) and no jQuery animation is pending (the first snapshot of an
episode installs the timer tracker), so the next observation shows the effect.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from agentic_rl.tools.definition.tool import Tool

__all__ = [
    "KEYS",
    "SIDE_EFFECTS",
    "BrowserActions",
    "StaleRefError",
    "UnknownRefError",
    "TRACK_TIMERS_JS",
]

#: permission class of each browser tool (``[tools.permissions.tools.<name>] side_effect``)
SIDE_EFFECTS = {
    "click": "workspace_write",
    "type": "workspace_write",
    "press": "workspace_write",
    "select": "workspace_write",
    "scroll": "read_only",
}
#: key names ``press`` accepts -> Selenium ``Keys`` attribute
KEYS = {
    "Enter": "ENTER",
    "Tab": "TAB",
    "Escape": "ESCAPE",
    "Backspace": "BACKSPACE",
    "Delete": "DELETE",
    "Space": "SPACE",
    "ArrowUp": "ARROW_UP",
    "ArrowDown": "ARROW_DOWN",
    "ArrowLeft": "ARROW_LEFT",
    "ArrowRight": "ARROW_RIGHT",
    "Home": "HOME",
    "End": "END",
    "PageUp": "PAGE_UP",
    "PageDown": "PAGE_DOWN",
}
_MODIFIERS = {
    "Control": "CONTROL",
    "Ctrl": "CONTROL",
    "Shift": "SHIFT",
    "Alt": "ALT",
    "Meta": "META",
}

#: wraps ``setTimeout`` so pending short timers can be counted (idempotent)
TRACK_TIMERS_JS = r"""
if (!window.__arlPending) {
  window.__arlPending = new Set();
  const st = window.setTimeout.bind(window), ct = window.clearTimeout.bind(window);
  window.setTimeout = function (fn, ms, ...args) {
    ms = +ms || 0;
    if (typeof fn !== 'function' || ms >= 1000) return st(fn, ms, ...args);
    const id = st(function () { window.__arlPending.delete(id); fn.apply(this, args); }, ms);
    window.__arlPending.add(id);
    return id;
  };
  window.clearTimeout = function (id) { window.__arlPending.delete(id); return ct(id); };
}
"""
_PENDING_JS = (
    "return (window.__arlPending ? window.__arlPending.size : 0)"
    " + (window.jQuery && jQuery.timers ? jQuery.timers.length : 0);"
)


class UnknownRefError(LookupError):
    """A ref that was never shown on the page."""


class StaleRefError(LookupError):
    """A ref that was shown, but whose element is no longer on the page."""


def _short(exc: Exception) -> str:
    """Selenium's message without its stack trace and session info."""
    text = getattr(exc, "msg", None) or str(exc)
    text = re.sub(r' data-[\w-]+="[^"]*"', "", text)  # the page's bookkeeping attributes
    return re.split(r"\n|\(Session info", text)[0].strip() or type(exc).__name__


class BrowserActions:
    """The browser tools over a lazily obtained driver (see the module docstring).

    Args:
        driver: ``driver() -> WebDriver``; called on each action (an env starts its browser
            on the first call).
        settle_s: the most seconds to wait for the page to settle after an action.
    """

    def __init__(self, driver: Callable[[], Any], settle_s: float = 1.5):
        self._driver = driver
        self.settle_s = float(settle_s)

    # -- refs ------------------------------------------------------------------------------
    def element(self, ref: int) -> Any:
        """The live element of ``ref``.

        Raises:
            UnknownRefError: ``ref`` was never shown (the message lists the current refs).
            StaleRefError: ``ref``'s element left the page.
        """
        from selenium.webdriver.common.by import By

        driver = self._driver()
        found = driver.find_elements(By.CSS_SELECTOR, f'[data-arl-ref="{int(ref)}"]')
        if found:
            return found[0]
        shown = driver.execute_script(
            "return [window.__arlNextRef || 1, Array.from(document.querySelectorAll("
            "'[data-arl-ref]')).map(e => +e.dataset.arlRef).sort((a, b) => a - b)];"
        )
        next_ref, live = int(shown[0]), shown[1]
        refs = ", ".join(map(str, live[:40])) or "none"
        if 1 <= ref < next_ref:
            raise StaleRefError(
                f"ref {ref} is stale: its element is no longer on the page. "
                f"Use a ref from the latest page (refs now: {refs})"
            )
        raise UnknownRefError(f"unknown ref {ref}: it was never shown. Refs on the page: {refs}")

    def settle(self) -> None:
        """Wait up to ``settle_s`` for pending short timers and animations (module docstring)."""
        driver = self._driver()
        deadline = time.monotonic() + self.settle_s
        while time.monotonic() < deadline:
            if not driver.execute_script(_PENDING_JS):
                return
            time.sleep(0.02)

    def _act(self, what: Callable[[], str]) -> str:
        from selenium.common.exceptions import WebDriverException

        try:
            result = what()
        except WebDriverException as exc:
            raise RuntimeError(_short(exc)) from None
        self.settle()
        return result

    # -- the actions -----------------------------------------------------------------------
    def click(self, ref: int) -> str:
        """Click the element ``ref`` (a real mouse click at its centre)."""

        def run() -> str:
            self.element(ref).click()
            return f"clicked [{ref}]"

        return self._act(run)

    def type(self, ref: int, text: str) -> str:
        """Click the field ``ref``, clear it, and type ``text`` key by key."""

        def run() -> str:
            el = self.element(ref)
            el.click()
            el.clear()
            el.send_keys(text)
            return f"typed {text!r} into [{ref}]"

        return self._act(run)

    def press(self, key: str) -> str:
        """Press ``key`` (a name of :data:`KEYS`, one character, or a ``Modifier+key`` chord) on
        the focused element.

        Raises:
            ValueError: an unknown key name (the message lists the valid ones).
        """
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        *mods, main = key.split("+") if len(key) > 1 else [key]
        if any(m not in _MODIFIERS for m in mods) or not (main in KEYS or len(main) == 1):
            raise ValueError(
                f"unknown key {key!r}: use one of {', '.join(KEYS)}, one character, or a chord "
                f"like Control+a (modifiers: {', '.join(_MODIFIERS)})"
            )
        typed = getattr(Keys, KEYS[main]) if main in KEYS else main

        def run() -> str:
            chain = ActionChains(self._driver())
            for m in mods:
                chain.key_down(getattr(Keys, _MODIFIERS[m]))
            chain.send_keys(typed)
            for m in reversed(mods):
                chain.key_up(getattr(Keys, _MODIFIERS[m]))
            chain.perform()
            return f"pressed {key}"

        return self._act(run)

    def select(self, ref: int, option: str) -> str:
        """Choose ``option`` (its visible text, else its value) in the ``<select>`` ``ref``.

        Raises:
            ValueError: ``ref`` is not a select, or has no such option (the options are listed).
        """
        from selenium.webdriver.support.select import Select

        def run() -> str:
            el = self.element(ref)
            if el.tag_name.lower() != "select":
                raise ValueError(f"[{ref}] is a <{el.tag_name.lower()}>, not a <select>; use click")
            menu = Select(el)
            texts = [o.text.strip() for o in menu.options]
            values = [o.get_attribute("value") for o in menu.options]
            if option.strip() in texts:
                menu.select_by_index(texts.index(option.strip()))
            elif option in values:
                menu.select_by_value(option)
            else:
                raise ValueError(f"[{ref}] has no option {option!r}; options: {texts}")
            return f"selected {option!r} in [{ref}]"

        return self._act(run)

    def scroll(self, target: str, direction: str) -> str:
        """Scroll the page (``target="page"``) or the element with ref ``target`` ``up`` or
        ``down`` by about one screen (``left``/``right`` sideways).

        Raises:
            ValueError: a bad direction or a target that is neither ``page`` nor a number.
        """
        steps = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
        if direction not in steps:
            raise ValueError(f"direction must be one of {', '.join(steps)}, got {direction!r}")
        dx, dy = steps[direction]
        if target != "page" and not str(target).strip().lstrip("[").rstrip("]").isdigit():
            raise ValueError(f'target must be "page" or a ref number, got {target!r}')

        def run() -> str:
            driver = self._driver()
            if target == "page":
                driver.execute_script(
                    "window.scrollBy(arguments[0] * innerWidth * 0.8, arguments[1] * innerHeight * 0.8);",
                    dx,
                    dy,
                )
            else:
                el = self.element(int(str(target).strip().lstrip("[").rstrip("]")))
                driver.execute_script(
                    "const e = arguments[0]; e.scrollBy(arguments[1] * e.clientWidth * 0.8,"
                    " arguments[2] * e.clientHeight * 0.8);",
                    el,
                    dx,
                    dy,
                )
            return f"scrolled {target} {direction}"

        return self._act(run)

    # -- tools -----------------------------------------------------------------------------
    def tools(self) -> dict[str, Tool]:
        """``{name: Tool}`` of the five actions with their JSON schemas (module docstring)."""
        ref = {"type": "integer", "description": "the element's number in [brackets] on the page"}
        text = {"type": "string"}

        def schema(props: dict[str, Any]) -> dict[str, Any]:
            return {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            }

        return {
            "click": Tool("click", "Click the element [ref].", schema({"ref": ref}), self.click),
            "type": Tool(
                "type",
                "Clear the text field [ref] and type text into it.",
                schema({"ref": ref, "text": {**text, "description": "the text to type"}}),
                self.type,
            ),
            "press": Tool(
                "press",
                "Press a key on the focused element: Enter, Tab, Escape, Backspace, ArrowDown, ... "
                "or one character.",
                schema({"key": {**text, "description": "key name, e.g. Enter"}}),
                self.press,
            ),
            "select": Tool(
                "select",
                "Choose an option of the drop-down list [ref] by its text.",
                schema({"ref": ref, "option": {**text, "description": "the option's text"}}),
                self.select,
            ),
            "scroll": Tool(
                "scroll",
                'Scroll the page (target "page") or the element [ref] up or down.',
                schema(
                    {
                        "target": {**text, "description": '"page" or a ref number'},
                        "direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
                    }
                ),
                self.scroll,
            ),
        }
