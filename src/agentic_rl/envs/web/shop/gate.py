"""The shop server's submission gate: every state-changing request is decided where it lands.

web-shop-v0 names a browser action by the shop form it submits (a ``click`` on the Pay button
is run as ``pay``), so the permission policy can decide on ``pay``. Naming the action before it
runs cannot be complete in a real browser: a button also submits on Space, Shift+Enter, a
``type`` that clicks it, keys typed as code points, focus moved by Tab first, … So the decision
also sits where the submission *arrives*: the shop app asks its :class:`SubmissionGate` before
every POST (``add_to_cart``, ``remove_from_cart``, ``place_order``, ``pay``,
``cancel_order``), and answers 403 with the reason when the gate refuses.

The gate admits a submission of action ``a`` when

* ``a`` was approved beforehand: the env runs a routed call (already decided and audited by the
  permission layer) inside ``with gate.approved(a):`` — one submission of ``a`` is admitted per
  approval; or
* ``decide(a)`` (the env's callback) returns None: the env puts the submission through its
  permission policy and audit log as a call to ``a`` made by the browser action that was running
  (:meth:`agentic_rl.envs.web.shop.env.WebShopEnv._decide_submission`). A refusal string is the
  403's text, which the next page shows.

Without ``decide`` every unapproved submission is refused. Thread-safe: the server calls the
gate from its request threads while the env's step waits for the browser.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["SubmissionGate"]


class SubmissionGate:
    """Decides each state-changing request of the shop (module docstring).

    Args:
        decide: ``decide(action) -> None`` (admit) or the reason to refuse; None refuses every
            submission that was not approved.
    """

    def __init__(self, decide: Callable[[str], str | None] | None = None):
        self.decide = decide
        self._lock = threading.Lock()
        self._approved: dict[str, int] = {}

    @contextmanager
    def approved(self, action: str) -> Iterator[None]:
        """Admit one submission of ``action`` while the block runs (a call the permission layer
        already allowed); the approval is withdrawn at the end, used or not."""
        with self._lock:
            self._approved[action] = self._approved.get(action, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._approved.get(action, 0) - 1
                if left > 0:
                    self._approved[action] = left
                else:
                    self._approved.pop(action, None)

    def __call__(self, action: str) -> str | None:
        """None to admit a submission of ``action``, else why it is refused. Never raises
        (a ``decide`` that raises refuses, naming the exception)."""
        with self._lock:
            if self._approved.get(action, 0) > 0:
                self._approved[action] -= 1
                return None
        if self.decide is None:
            return f"{action}: this submission did not go through the permission policy"
        try:
            return self.decide(action)
        except Exception as exc:  # noqa: BLE001 - a broken decision refuses, loudly in the page
            return f"{action}: refused, the permission check raised {type(exc).__name__}: {exc}"
