"""Chromium mode of ``web-shop-v0``: the shop's pages in headless Chromium through the browser
layer (:mod:`agentic_rl.tools.browser`): :class:`~agentic_rl.tools.browser.launch.Browser`
(Debian's chromium + chromedriver, never left running), the page text of
:func:`~agentic_rl.tools.browser.snapshot.take_snapshot` and the actions of
:class:`~agentic_rl.tools.browser.actions.BrowserActions`. :class:`ChromiumPage` offers the same
methods as :class:`~agentic_rl.envs.web.shop.text_browser.TextBrowser`, so the env drives either.
Refs start at 1 on every page load (a new document), as in the text browser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

from agentic_rl.tools.browser.actions import BrowserActions
from agentic_rl.tools.browser.launch import Browser, BrowserConfig
from agentic_rl.tools.browser.snapshot import PageSnapshot, take_snapshot

__all__ = ["ChromiumPage"]

#: ``[navigates, action]`` for element ``arguments[0]`` clicked (or, with ``arguments[1]``, Enter
#: pressed in it): whether it loads a page (a link, a form submission) and the ``data-action``
#: of the form it submits (null when none)
_SUBMITS_JS = """
const e = arguments[0], enter = arguments[1];
if (!e) return [false, null];
const t = (e.getAttribute('type') || '').toLowerCase();
const submits = !!e.form && ((e.tagName === 'BUTTON' && (t || 'submit') === 'submit')
  || (e.tagName === 'INPUT' && ['submit', 'image'].includes(t))
  || (enter && e.tagName === 'INPUT' && !['checkbox', 'radio', 'button', 'reset', 'hidden'].includes(t)));
const link = e.tagName === 'A' && !!e.getAttribute('href');
return [submits || link, submits ? (e.form.dataset.action || null) : null];
"""
#: notes on the current document when any form is submitted (capture phase: before the browser
#: sends it), whatever caused it: a key, a click, implicit submission
_WATCH_SUBMIT_JS = """
if (!window.__arlSubmitWatch) {
  window.__arlSubmitWatch = true;
  document.addEventListener('submit', () => { window.__arlSubmitted = true; }, true);
}
window.__arlSubmitted = false;
"""


class ChromiumPage:
    """The shop in headless Chromium (see the module docstring).

    Args:
        base_url: ``base_url() -> "http://127.0.0.1:<port>"``.
        config: where Chromium and chromedriver are.
        settle_s: the most seconds to let a page settle after an action.
    """

    def __init__(
        self,
        base_url: Callable[[], str],
        config: BrowserConfig = BrowserConfig(),
        settle_s: float = 0.5,
    ):
        self._base_url = base_url
        self.browser = Browser(config)
        self.actions = BrowserActions(self.browser.start, settle_s)
        self.focus: int | None = None  # the text browser's; Chromium tracks its own

    @property
    def path(self) -> str:
        """The current page's path and query ("/" before the browser started)."""
        if self.browser.driver is None:
            return "/"
        parts = urlsplit(self.browser.driver.current_url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def open(self, path: str) -> None:
        """Load the page at ``path``, refs from 1.

        Raises:
            BrowserUnavailableError / selenium.common.WebDriverException: the browser failed.
        """
        driver = self.browser.start()
        driver.get(urljoin(self._base_url(), path))
        take_snapshot(driver, reset_refs=True)

    def reset(self) -> None:
        """Forget cookies and open the home page (starting the browser on first use)."""
        self.browser.start().delete_all_cookies()
        self.open("/")

    def snapshot(self) -> PageSnapshot:
        """The current page as text (the browser layer's rendering)."""
        return take_snapshot(self.browser.start())

    def _submits(self, element: Any, enter: bool) -> tuple[bool, str | None]:
        try:
            navigates, action = self.browser.start().execute_script(_SUBMITS_JS, element, enter)
        except Exception:  # noqa: BLE001 - a page in flux submits nothing we can name
            return False, None
        return bool(navigates), action

    def _form_action(self, element: Any, enter: bool) -> str | None:
        return self._submits(element, enter)[1]

    def _loading(self, act: Callable[[], str], element: Any = None, enter: bool = False) -> str:
        """Run ``act``; when it loads a page (a link or submit predicted from ``element``, or any
        form submission it caused: Space on a button, a ``type`` that clicks one, …), wait (up
        to the page-load timeout) until the old document is gone and the new one is complete,
        so the next snapshot shows it and the submission is decided while ``act``'s call runs
        (:mod:`~agentic_rl.envs.web.shop.gate`)."""
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By

        driver = self.browser.start()
        navigates = element is not None and self._submits(element, enter)[0]
        try:
            old, windows = driver.find_element(By.TAG_NAME, "html"), set(driver.window_handles)
            driver.execute_script(_WATCH_SUBMIT_JS)
        except WebDriverException:  # a page in flux: nothing to watch
            old = None
        try:
            result = act()
        finally:
            if old is not None and (navigates or self._left(old)):
                self._follow(old, windows)
        return result

    def _follow(self, old: Any, windows: set[str]) -> None:
        """Wait until the document ``old`` is replaced, or a window opened (a submission with
        Shift or Control held), then until the new document is complete; a new window becomes
        the page (the old one is closed), so the env keeps one window that shows the result.

        Raises:
            selenium.common.TimeoutException: nothing loaded within the page-load timeout.
        """
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.wait import WebDriverWait

        driver = self.browser.start()

        def moved(d: Any) -> str | bool:
            try:
                old.tag_name  # noqa: B018 - raises once the document is replaced
            except WebDriverException:
                return True
            opened = [h for h in d.window_handles if h not in windows]
            return opened[-1] if opened else False

        wait = WebDriverWait(driver, self.browser.config.page_load_timeout_s, 0.02)
        where = wait.until(moved)
        if isinstance(where, str):
            driver.close()
            driver.switch_to.window(where)
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    def _left(self, old: Any) -> bool:
        """Whether the document ``old`` submitted a form or is gone already. Never raises."""
        from selenium.common.exceptions import WebDriverException

        try:
            old.tag_name  # raises once the document is replaced  # noqa: B018
            return bool(self.browser.start().execute_script("return !!window.__arlSubmitted"))
        except WebDriverException:
            return True

    def form_action(self, ref: Any) -> str | None:
        """The ``data-action`` of the form a click on ``ref`` submits (None: none). Never raises."""
        try:
            element = self.actions.element(int(ref))
        except Exception:  # noqa: BLE001 - unknown/stale refs fail in the action itself
            return None
        return self._form_action(element, False)

    def enter_action(self) -> str | None:
        """The ``data-action`` of the form Enter submits from the focused element. Never raises."""
        try:
            element = self.browser.start().switch_to.active_element
        except Exception:  # noqa: BLE001
            return None
        return self._form_action(element, True)

    def click(self, ref: int) -> str:
        """:meth:`BrowserActions.click`, waiting for the page it loads."""
        try:
            element = self.actions.element(int(ref))
        except Exception:  # noqa: BLE001 - the action itself reports the bad ref
            element = None
        return self._loading(lambda: self.actions.click(ref), element, False)

    def type(self, ref: int, text: str) -> str:
        """:meth:`BrowserActions.type`, waiting for the page a submission it caused loads."""
        return self._loading(lambda: self.actions.type(ref, text))

    def press(self, key: str) -> str:
        """:meth:`BrowserActions.press`, waiting for the page it loads (Enter, Space, …)."""
        element = None
        if key == "Enter":
            try:
                element = self.browser.start().switch_to.active_element
            except Exception:  # noqa: BLE001
                element = None
        return self._loading(lambda: self.actions.press(key), element, True)

    def select(self, ref: int, option: str) -> str:
        """:meth:`BrowserActions.select`, waiting for the page a submission it caused loads."""
        return self._loading(lambda: self.actions.select(ref, option))

    def scroll(self, target: str, direction: str) -> str:
        """:meth:`BrowserActions.scroll`."""
        return self.actions.scroll(target, direction)

    def pids(self) -> list[int]:
        """Pids of the browser's live processes (empty when none runs). Never raises."""
        return self.browser.pids()

    def close(self) -> None:
        """Close the browser (no process left). Idempotent; never raises."""
        self.browser.close()
