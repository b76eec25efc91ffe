"""Text helpers shared by the game adapters: ANSI stripping and action parsing.

Action syntax of the Gymnasium adapters: ``<action>NAME</action>`` where NAME is one of the
game's action names (case-insensitive) or its index ``0..n-1``. If the reply has several tags
the first counts; a reply without a tag is accepted only when the whole reply (stripped) is a
name or an index. Anything else is an invalid action (an error observation, never an exception).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: ANSI escape sequences (CSI colour/cursor codes such as ``\x1b[41m``), per ECMA-48
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_BRACKET = re.compile(r"\[[^\[\]\n]*\]")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape codes (colours, highlights)."""
    return _ANSI.sub("", text)


def parse_action(text: str, names: Sequence[str]) -> tuple[int | None, str]:
    """Parse a reply into an action index (see the module docstring for the syntax).

    Args:
        text: the assistant reply.
        names: action names, index i naming action i.

    Returns:
        ``(index, "")`` for a valid action, or ``(None, reason)`` with a one-line reason.
    """
    match = _ACTION_TAG.search(text)
    if match is None:
        candidate = text.strip()
        index = _lookup(candidate, names)
        if index is not None:
            return index, ""
        return None, "no <action>...</action> tag in the reply"
    candidate = match.group(1).strip()
    index = _lookup(candidate, names)
    if index is None:
        shown = candidate if len(candidate) <= 40 else candidate[:37] + "..."
        return None, f"unknown action {shown!r}"
    return index, ""


def _lookup(candidate: str, names: Sequence[str]) -> int | None:
    lowered = candidate.lower()
    for i, name in enumerate(names):
        if lowered == name.lower():
            return i
    if lowered.isdigit() and int(lowered) < len(names):
        return int(lowered)
    return None


def last_bracketed(text: str) -> str | None:
    """The last ``[...]`` span of ``text`` on one line (TextArena's move syntax), or None."""
    spans = _BRACKET.findall(text)
    return spans[-1] if spans else None


def action_help(names: Sequence[str]) -> str:
    """One sentence telling the policy the action syntax."""
    return (
        f"Reply with exactly one action as <action>NAME</action>, where NAME is one of: "
        f"{', '.join(names)} (for example <action>{names[0]}</action>)."
    )
