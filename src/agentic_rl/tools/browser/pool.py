"""A process-wide pool of started :class:`~agentic_rl.tools.browser.launch.Browser` objects.

The trainer builds a fresh env per episode; without a pool every episode starts (and kills) a
Chromium, 2-6 s each on a busy machine. :func:`acquire` hands out an idle browser started with an
equal :class:`~agentic_rl.tools.browser.launch.BrowserConfig` (after a cheap health check: its
chromedriver is alive and answers a one-line script; an unhealthy one is closed) or starts a new
one; :func:`release` takes it back (on ``about:blank``; a browser that cannot get there is
closed) unless :attr:`BrowserPool.max_idle` browsers are idle already (then it is closed);
:func:`close_all` closes every idle browser and runs at interpreter exit (``atexit``).

Cleanup guarantees are :class:`Browser`'s own: each pooled browser keeps its watchdog registration, so a
SIGKILLed owner leaves no process, idle browsers included. A child made by ``os.fork`` starts
with an empty pool (the parent's browsers stay the parent's: the child forgets them without
closing them).

The default pool keeps at most ``$AGENTIC_RL_BROWSER_POOL_MAX_IDLE`` idle browsers (default 32:
the default training step's 4 tasks x 8 rollouts run at once); each idle one holds about
110 MB of private memory (measured on ``about:blank``).

Layer rule: the standard library only (like :mod:`~agentic_rl.tools.browser.launch`); Selenium
is imported when a browser starts. Thread-safe (one lock; starting, checking and closing
browsers run outside it).
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from pathlib import Path

from agentic_rl.tools.browser.launch import Browser, BrowserConfig

__all__ = [
    "DEFAULT_MAX_IDLE",
    "BrowserPool",
    "acquire",
    "close_all",
    "default_pool",
    "healthy",
    "release",
]

#: idle browsers the default pool keeps (``$AGENTIC_RL_BROWSER_POOL_MAX_IDLE`` overrides it)
DEFAULT_MAX_IDLE = 32


def _max_idle_from_env() -> int:
    """``$AGENTIC_RL_BROWSER_POOL_MAX_IDLE``; a value that is not a whole number >= 0 is named in
    a warning and the default is used (a typo must not stop the trainer at import)."""
    raw = os.environ.get("AGENTIC_RL_BROWSER_POOL_MAX_IDLE", "").strip()
    if not raw:
        return DEFAULT_MAX_IDLE
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        warnings.warn(
            f"AGENTIC_RL_BROWSER_POOL_MAX_IDLE={raw!r} is not a whole number >= 0; "
            f"the browser pool keeps at most {DEFAULT_MAX_IDLE} idle browsers",
            stacklevel=2,
        )
        return DEFAULT_MAX_IDLE
    return value


def _process_alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (exists and is no zombie). Never raises."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def healthy(browser: Browser) -> bool:
    """Whether ``browser`` is started and answers: its chromedriver (the process group's
    leader) runs, and the page runs a one-line script. Never raises."""
    if browser.driver is None or not _process_alive(browser.pgid):
        return False
    try:
        return browser.driver.execute_script("return 1;") == 1
    except Exception:  # noqa: BLE001 - any failure means: do not hand it out
        return False


def _disown(browser: Browser) -> None:
    """Make this process's copy of ``browser`` forget its processes (a forked child's copy of a
    parent's browser: closing it would kill the parent's)."""
    browser.driver, browser.pgid, browser.profile = None, None, None
    browser._registration = None


class BrowserPool:
    """Idle started browsers, handed out by config (see the module docstring).

    Args:
        max_idle: the most idle browsers kept (>= 0; 0 keeps none: every release closes).

    Raises:
        ValueError: ``max_idle`` < 0.
    """

    def __init__(self, max_idle: int = DEFAULT_MAX_IDLE):
        if max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, got {max_idle}")
        self.max_idle = int(max_idle)
        self._lock = threading.Lock()
        self._idle: list[Browser] = []

    def idle_count(self) -> int:
        """Number of idle browsers held now."""
        with self._lock:
            return len(self._idle)

    def idle_browsers(self) -> list[Browser]:
        """The idle browsers held now (a copy of the list; for tests and diagnostics)."""
        with self._lock:
            return list(self._idle)

    def _take(self, config: BrowserConfig) -> Browser | None:
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):  # the most recently released first
                if self._idle[i].config == config:
                    return self._idle.pop(i)
        return None

    def acquire(self, config: BrowserConfig = BrowserConfig()) -> Browser:
        """A started, healthy browser of ``config``: an idle one, else a new one.

        Idle browsers of ``config`` that fail the health check (:func:`healthy`) are closed
        and the next is tried. The caller owns the browser until :meth:`release` (or its own
        ``close()``).

        Returns:
            The browser, started (``browser.driver`` is its WebDriver).

        Raises:
            BrowserUnavailableError: Selenium, Chromium or chromedriver is missing.
            selenium.common.WebDriverException: a new browser failed to start (cleaned up).
        """
        while (browser := self._take(config)) is not None:
            if healthy(browser):
                return browser
            browser.close()
        browser = Browser(config)
        browser.start()
        return browser

    def release(self, browser: Browser) -> bool:
        """Take ``browser`` back: navigated to ``about:blank`` and kept idle, or closed when it
        is not started, cannot navigate, or ``max_idle`` browsers are idle already. Never
        raises (a browser that fails here is closed).

        Returns:
            True when the browser was kept idle, False when it was closed.
        """
        if browser.driver is None:
            browser.close()
            return False
        with self._lock:
            if any(b is browser for b in self._idle):
                return True  # released twice: it is idle already
            full = len(self._idle) >= self.max_idle
        if full:
            browser.close()
            return False
        try:
            browser.driver.get("about:blank")
        except Exception:  # noqa: BLE001 - a browser that cannot navigate is not reused
            browser.close()
            return False
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(browser)
                return True
        browser.close()  # another thread filled the pool meanwhile
        return False

    def close_all(self) -> int:
        """Close every idle browser (no process left). Never raises.

        Returns:
            How many were closed.
        """
        with self._lock:
            idle, self._idle = self._idle, []
        for browser in idle:
            browser.close()
        return len(idle)

    def _after_fork_in_child(self) -> None:
        """A forked child: a new lock, and the parent's idle browsers forgotten, not closed."""
        self._lock = threading.Lock()
        idle, self._idle = self._idle, []
        for browser in idle:
            _disown(browser)


_DEFAULT = BrowserPool(_max_idle_from_env())
atexit.register(_DEFAULT.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_DEFAULT._after_fork_in_child)


def default_pool() -> BrowserPool:
    """The process-wide pool that :func:`acquire`, :func:`release` and :func:`close_all` use
    (set ``default_pool().max_idle`` to change its size)."""
    return _DEFAULT


def acquire(config: BrowserConfig = BrowserConfig()) -> Browser:
    """:meth:`BrowserPool.acquire` of the process-wide pool (same errors and result)."""
    return _DEFAULT.acquire(config)


def release(browser: Browser) -> bool:
    """:meth:`BrowserPool.release` of the process-wide pool (never raises; True if kept)."""
    return _DEFAULT.release(browser)


def close_all() -> int:
    """:meth:`BrowserPool.close_all` of the process-wide pool (registered with ``atexit``);
    returns how many idle browsers it closed."""
    return _DEFAULT.close_all()
