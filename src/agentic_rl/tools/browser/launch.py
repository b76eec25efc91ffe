"""One headless Chromium per owner, driven by Selenium, that never outlives its owner.

:class:`Browser` starts Debian's ``chromium`` through ``chromedriver`` (never a downloaded
browser: both paths are given to Selenium, so Selenium Manager is never asked for one) with the
flags of :data:`CHROMIUM_FLAGS` (headless, no sandbox, no GPU, and every background service that
would try the network and stall offline turned off), a fresh temporary profile folder, and
``chromedriver`` in a session of its own, so that it and every Chromium process it spawns share
one process group.

Cleanup, in every way an owner can end:

* :meth:`Browser.close` (idempotent, never raises): ``driver.quit()``, then SIGKILL to the
  process group and to any process still naming the profile folder, then the folder is deleted;
* an exception in the owner: envs call ``close`` from ``finally``/``close()``;
* the owner killed (SIGKILL, a crash, an interpreter that never runs ``finally``): the owner's
  child-server watchdog (:mod:`agentic_rl.processes`, shared with every other child server)
  holds the read end of a pipe whose only write end is the owner's; the kernel closes it when
  the owner dies, and the watchdog then kills the group and the profile's processes and deletes
  the folder. The profile is registered before anything starts, the group id the moment
  ``chromedriver`` is spawned, before any Chromium exists.

Layer rule: imports the standard library only; Selenium is imported when a browser starts.
``chromedriver`` and Chromium run in :func:`browser_environment`: without a preloaded ``malloc``
replacement (the trainer's mimalloc, :mod:`agentic_rl.allocator`), under which Chromium exits at
start.
Linux only (process groups, ``/proc``). Chromium's crash handler runs in a session of its own:
``XDG_CONFIG_HOME`` points into the profile folder, so its command line (its crash database)
names the folder and the folder's sweep finds it. (``--disable-crashpad-for-testing`` would
avoid it but makes this Chromium hang on every page load.)
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl.processes import Registration, guard
from agentic_rl.tools.browser.identity import browser_identity

__all__ = [
    "CHROMIUM_FLAGS",
    "Browser",
    "BrowserConfig",
    "BrowserUnavailableError",
    "browser_environment",
    "find_browser",
    "live_pids",
]

#: flags every Chromium gets (FACTS: without the network ones, it tries the network and stalls)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-breakpad",
    "--disable-extensions",
    "--remote-debugging-pipe",  # DevTools to chromedriver over a pipe: no port to connect to
)


def browser_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) for chromedriver and Chromium: every
    ``LD_PRELOAD`` library whose file name contains ``malloc`` (mimalloc, jemalloc, tcmalloc) is
    taken out (other preloads stay) and the ``MIMALLOC_*`` settings are dropped.

    Why: ``LD_PRELOAD`` is inherited by every child, and ``agentic-rl`` re-executes itself with
    mimalloc preloaded (:mod:`agentic_rl.allocator`). Chromium brings its own allocator
    (PartitionAlloc) and exits at start under a preloaded one: Selenium reports
    ``SessionNotCreatedException: Chrome instance exited`` (measured 2026-12-02, Debian's
    chromium). Never raises.
    """
    env = dict(os.environ if base is None else base)
    preloaded = env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
    kept = [lib for lib in preloaded if lib and "malloc" not in os.path.basename(lib)]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    for key in [k for k in env if k.startswith("MIMALLOC_")]:
        del env[key]
    return env


class BrowserUnavailableError(RuntimeError):
    """Chromium, chromedriver or Selenium is missing (the message names it and how to get it)."""


@dataclass(frozen=True)
class BrowserConfig:
    """Where the browser is and how its window looks.

    Attributes:
        chromium: path of the Chromium binary; None: ``$AGENTIC_RL_CHROMIUM``, else ``chromium``
            on ``PATH``.
        chromedriver: path of chromedriver; None: ``$AGENTIC_RL_CHROMEDRIVER``, else
            ``chromedriver`` on ``PATH``.
        window: window size in CSS pixels (width, height).
        page_load_timeout_s: seconds a page load may take before Selenium raises.
        extra_flags: more Chromium flags after :data:`CHROMIUM_FLAGS`.
    """

    chromium: str | None = None
    chromedriver: str | None = None
    window: tuple[int, int] = (800, 600)
    page_load_timeout_s: float = 30.0
    extra_flags: tuple[str, ...] = ()


def find_browser(config: BrowserConfig = BrowserConfig()) -> tuple[str, str]:
    """``(chromium, chromedriver)`` paths for ``config`` (see :class:`BrowserConfig`).

    Raises:
        BrowserUnavailableError: one of them is not found (names Debian's packages).
    """
    chromium = config.chromium or os.environ.get("AGENTIC_RL_CHROMIUM") or shutil.which("chromium")
    driver = (
        config.chromedriver
        or os.environ.get("AGENTIC_RL_CHROMEDRIVER")
        or shutil.which("chromedriver")
    )
    if not chromium or not driver:
        missing = "chromium" if not chromium else "chromedriver"
        raise BrowserUnavailableError(
            f"{missing} not found: install Debian's packages (apt-get install chromium "
            "chromium-driver) or set AGENTIC_RL_CHROMIUM / AGENTIC_RL_CHROMEDRIVER"
        )
    return chromium, driver


def live_pids(pgid: int | None = None, marker: str | None = None) -> list[int]:
    """Pids of running (not zombie) processes in group ``pgid`` or whose command line holds
    ``marker``; what a test asserts empty after a browser closed. Never raises."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] == "Z":  # state: a zombie holds no memory and runs nothing
            continue
        in_group = pgid is not None and int(fields[2]) == pgid
        if in_group or (marker is not None and marker in cmdline):
            found.append(int(entry))
    return sorted(found)


class Browser:
    """A lazily started headless Chromium with a watchdog (see the module docstring).

    Args:
        config: binaries, window, timeouts.

    Attributes:
        driver: the Selenium WebDriver once :meth:`start` ran, else None.
        pgid: process group of chromedriver and its Chromium, once started.
        profile: the temporary profile folder (its path marks the browser's command lines).
    """

    def __init__(self, config: BrowserConfig = BrowserConfig()):
        self.config = config
        self.driver: Any = None
        self.pgid: int | None = None
        self.profile: str | None = None
        self._registration: Registration | None = None

    def start(self) -> Any:
        """Start the browser (once; later calls return the same driver).

        Returns:
            The Selenium WebDriver.

        Raises:
            BrowserUnavailableError: Selenium, Chromium or chromedriver is missing.
            selenium.common.WebDriverException: the browser failed to start (everything it
                started is cleaned up first).
        """
        if self.driver is not None:
            return self.driver
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError as exc:
            raise BrowserUnavailableError(
                f"selenium is not installed ({exc}): pip install 'agentic-rl[web]'"
            ) from None
        chromium, chromedriver = find_browser(self.config)
        try:
            identity = browser_identity()  # never root: a uid of its own when we are root
        except PermissionError as exc:
            raise BrowserUnavailableError(str(exc)) from None
        command = identity.argv(chromedriver)
        self.profile = tempfile.mkdtemp(prefix="agentic-rl-browser-")
        self._registration = guard().register(cmdline=self.profile, rmtree=self.profile)
        browser = self

        class _GuardedService(Service):
            """chromedriver in a session of its own, its group told to the watchdog at once."""

            def _start_process(self, path: str) -> None:
                super()._start_process(path)
                browser.pgid = self.process.pid
                if browser._registration is not None:
                    browser._registration.add(pgid=self.process.pid)

            def command_line_args(self) -> list[str]:
                return [*command[1:], *super().command_line_args()]  # setpriv … chromedriver

        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        width, height = self.config.window
        for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}", *self.config.extra_flags):
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        env = {**browser_environment(), "XDG_CONFIG_HOME": os.path.join(self.profile, "config")}
        try:
            service = _GuardedService(
                executable_path=command[0],
                popen_kw={"start_new_session": True},
                env=identity.prepare(self.profile, env),
            )
            self.driver = webdriver.Chrome(service=service, options=options)
            self.driver.set_page_load_timeout(self.config.page_load_timeout_s)
        except BaseException:
            self.close()
            raise
        return self.driver

    def pids(self) -> list[int]:
        """Pids of this browser's live processes (chromedriver and Chromium). Never raises."""
        if self.pgid is None and self.profile is None:
            return []
        return live_pids(self.pgid, self.profile)

    def close(self) -> None:
        """Quit the browser and make sure none of its processes is left (module docstring).
        Idempotent; never raises."""
        driver, self.driver = self.driver, None
        if driver is not None:
            try:
                driver.quit()
            except Exception:  # noqa: BLE001 - a dead browser cannot quit; we kill it below
                pass
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except OSError:
                pass
        if self.profile is not None:
            for pid in live_pids(marker=self.profile):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _remove_tree(self.profile)
        self.pgid, self.profile = None, None
        registration, self._registration = self._registration, None
        if registration is not None:
            registration.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit; the watchdog cleans up anyway
            pass


def _remove_tree(path: str, attempts: int = 5) -> None:
    """Delete ``path``; retried briefly (a dying Chromium may still write into its profile)."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.05)
