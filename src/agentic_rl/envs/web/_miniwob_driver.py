"""The miniwob package's own Gymnasium env, with its browser started by :class:`Browser`.

Imported only when a ``miniwob/<task>-v0`` env starts its browser (it imports ``miniwob``).
``MiniWoBEnvironment`` drives the task page (seeding, ``core.startEpisodeReal``, reward and
done); :class:`GuardedInstance` replaces only how its ``SeleniumInstance`` starts and stops
Chromium: through :class:`~agentic_rl.tools.browser.launch.Browser` (Debian's binaries, offline
flags, a watchdog, no leftover process) instead of ``webdriver.Chrome`` with default options.
With ``pooled=True`` the browser comes from the process-wide pool
(:mod:`agentic_rl.tools.browser.pool`) and goes back to it on ``close()``.
The task pages are MiniWoB's ``file://`` pages, or, where the browser's own uid cannot read the
installed package (a root owner whose virtualenv lies in a private folder such as ``/root``:
:mod:`agentic_rl.tools.browser.identity`), the same files served by miniwob's HTTP server on
loopback (:func:`page_base_url`).
"""

from __future__ import annotations

from typing import Any

from miniwob.environment import MiniWoBEnvironment
from miniwob.http_server import start_http_server
from miniwob.selenium_instance import HTML_DIR, SeleniumInstance
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.wait import WebDriverWait

from agentic_rl.tools.browser import pool
from agentic_rl.tools.browser.actions import TRACK_TIMERS_JS
from agentic_rl.tools.browser.identity import readable_by_browser
from agentic_rl.tools.browser.launch import Browser, BrowserConfig

__all__ = ["GuardedInstance", "GuardedMiniWoB", "TURN_CLOCK_MAX_TIME_MS", "page_base_url"]

#: the page's own timer under the turn clock: never reached (setTimeout's limit is 2**31 - 1 ms)
TURN_CLOCK_MAX_TIME_MS = 1_000_000_000


def page_base_url() -> str | None:
    """None (MiniWoB's own ``file://`` pages) when the browser can read the installed pages,
    else ``http://127.0.0.1:<port>/miniwob/`` of miniwob's one HTTP server for them (a thread of
    this process, on loopback, started on first use).

    Raises:
        OSError: the server cannot bind a port.
    """
    if readable_by_browser(HTML_DIR / "miniwob"):
        return None
    return f"{start_http_server(str(HTML_DIR))}miniwob/"


class GuardedInstance(SeleniumInstance):
    """MiniWoB's Selenium instance, its Chromium started and closed by :class:`Browser`.

    Args:
        browser_config: where the binaries are, the window.
        turn_clock: replace the page's wall-clock episode timer by one that never fires (the
            env then times the episode in actions); the task's own limit is kept in
            ``max_time_ms``.
        pooled: take the browser from the process-wide pool when the driver is created, and
            hand it back on ``close()`` (a started browser just loads the task page again).
        kwargs: ``SeleniumInstance``'s own arguments.

    Attributes:
        browser: the instance's :class:`Browser` (in pooled mode an unstarted placeholder until
            the driver is created, and again after ``close()``: a released browser is no
            longer this instance's).
    """

    def __init__(
        self, browser_config: BrowserConfig, turn_clock: bool, pooled: bool = False, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.browser_config, self.pooled = browser_config, pooled
        self.browser = Browser(browser_config)
        self.turn_clock = turn_clock
        self.max_time_ms = 10_000.0

    def create_driver(self) -> None:
        """Start Chromium, open the task page and wait for MiniWoB's start screen.

        Raises:
            selenium.common.WebDriverException / TimeoutException: the page did not load (the
                browser is closed first, a pooled one too: it is not handed back).
        """
        try:
            if self.pooled and self.browser.driver is None:
                self.browser = pool.acquire(self.browser_config)
            self.driver = self.browser.start()
            self.driver.implicitly_wait(0)  # a missing ref is an answer, not a 5 s wait
            self.driver.get(self.url)
            WebDriverWait(self.driver, 10).until(
                EC.element_to_be_clickable((By.ID, self.SYNC_SCREEN_ID))
            )
            self.inner_width, self.inner_height = self.driver.execute_script(
                "return [window.innerWidth, window.innerHeight];"
            )
            self.max_time_ms = float(self.driver.execute_script("return core.EPISODE_MAX_TIME;"))
            if self.turn_clock:
                self.driver.execute_script(f"core.EPISODE_MAX_TIME = {TURN_CLOCK_MAX_TIME_MS};")
            self.driver.execute_script(TRACK_TIMERS_JS)
        except BaseException:
            self.close(discard=True)
            raise

    def close(self, discard: bool = False) -> None:
        """Close the browser (no process left), or, in pooled mode, hand it back to the pool
        (unless ``discard``: a browser that failed is closed, never reused). Idempotent, never
        raises."""
        if not self.pooled:
            self.browser.close()
        else:
            browser, self.browser = self.browser, Browser(self.browser_config)
            self.driver = None  # the pool's browser is no longer this instance's to drive
            if discard:
                browser.close()
            else:
                pool.release(browser)
        self.died = True


class GuardedMiniWoB(MiniWoBEnvironment):
    """``MiniWoBEnvironment`` whose instance is a :class:`GuardedInstance`.

    Args:
        task: the MiniWoB task name (``click-button``).
        browser_config: see :class:`GuardedInstance`.
        turn_clock: see :class:`GuardedInstance`.
        pooled: see :class:`GuardedInstance`.
    """

    def __init__(
        self, task: str, browser_config: BrowserConfig, turn_clock: bool, pooled: bool = False
    ):
        self._browser_config, self._turn_clock, self._pooled = browser_config, turn_clock, pooled
        super().__init__(subdomain=task, base_url=page_base_url())

    def _hard_reset_instance(self) -> None:
        if getattr(self, "instance", None) is not None:
            self.instance.close()
        self.instance = GuardedInstance(
            self._browser_config, self._turn_clock, self._pooled, index=0, **self.instance_kwargs
        )
        self.instance.start()
        self.instance.wait()

    @property
    def driver(self) -> Any:
        """The Selenium driver of the running instance."""
        return self.instance.driver
