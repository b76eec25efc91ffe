"""A reusable browser action layer: a headless Chromium that never outlives its owner
(:mod:`~agentic_rl.tools.browser.launch`) and a process-wide pool of started ones
(:mod:`~agentic_rl.tools.browser.pool`, not imported here), the page as compact text with stable
element refs (:mod:`~agentic_rl.tools.browser.snapshot`), and the actions as tools with JSON
schemas and side-effect classes (:mod:`~agentic_rl.tools.browser.actions`). Selenium is imported
only when a browser starts (extra ``web``). Used by the MiniWoB++ envs
(:mod:`agentic_rl.envs.web.miniwob`).
"""

from agentic_rl.tools.browser.actions import (
    KEYS,
    SIDE_EFFECTS,
    BrowserActions,
    StaleRefError,
    UnknownRefError,
)
from agentic_rl.tools.browser.launch import (
    CHROMIUM_FLAGS,
    Browser,
    BrowserConfig,
    BrowserUnavailableError,
    find_browser,
    live_pids,
)
from agentic_rl.tools.browser.snapshot import PageElement, PageSnapshot, take_snapshot

__all__ = [
    "CHROMIUM_FLAGS",
    "KEYS",
    "SIDE_EFFECTS",
    "Browser",
    "BrowserActions",
    "BrowserConfig",
    "BrowserUnavailableError",
    "PageElement",
    "PageSnapshot",
    "StaleRefError",
    "UnknownRefError",
    "find_browser",
    "live_pids",
    "take_snapshot",
]
