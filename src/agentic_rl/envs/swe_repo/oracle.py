"""The reference policy of ``swe-repo-v0``: the reverse mutation, applied through the env's tools.

Turn by turn: ``run_tests`` on the bug's first failing test (the evidence) and ``bash`` with
``grep -n 'def NAME('`` on the file; ``read_file`` from the function's ``def`` to just past the
bug; ``edit_file`` with the bug's lines as ``old`` and the original lines as ``new``; then
``run_tests`` again and ``submit``. Whether the edit was made is read from the file (equal to
the task's buggy file or not), not from the presence of the bug's lines, which a fix may keep.
"""

from __future__ import annotations

import ast
import shlex
from typing import Any

from agentic_rl.envs.swe_repo.catalogue import Bug
from agentic_rl.envs.swe_repo.mutations import functions
from agentic_rl.envs.swe_repo.tasks import buggy_files
from agentic_rl.tools.definition.parser import format_tool_call

__all__ = ["oracle_reply", "read_window_of"]


def read_window_of(bug: Bug, read_lines: int) -> tuple[int, int]:
    """The lines the oracle reads: from the function's ``def`` to two lines past the bug, at
    most ``read_lines`` of them. Never raises for a catalogue bug."""
    source = buggy_files(bug)[bug.file].decode("utf-8")
    defs = [f for q, f in functions(ast.parse(source)) if q == bug.mutation.function]
    end = bug.mutation.line + bug.mutation.after.count("\n") + 2
    start = min((f.lineno for f in defs if f.lineno <= bug.mutation.line), default=end)
    return max(start, end - read_lines + 1), end


def oracle_reply(bug: Bug, turn: int, current: str, read_lines: int) -> str:
    """The oracle's reply on ``turn`` (0-based) with the bug's file holding ``current``.

    Returns:
        one or two ``<tool_call>`` blocks (see the module docstring).
    """
    test, name = bug.failing[0], bug.mutation.function.rsplit(".", 1)[-1]
    calls: list[dict[str, Any]]
    if turn == 0:
        grep = f"grep -n {shlex.quote('def ' + name + '(')} {shlex.quote(bug.file)}"
        calls = [
            {"name": "run_tests", "arguments": {"target": test}},
            {"name": "bash", "arguments": {"command": grep}},
        ]
    elif turn == 1:
        start, end = read_window_of(bug, read_lines)
        args = {"path": bug.file, "start_line": start, "end_line": end}
        calls = [{"name": "read_file", "arguments": args}]
    elif current.encode("utf-8") == buggy_files(bug)[bug.file]:  # not edited yet
        args = {"path": bug.file, "old": bug.mutation.after, "new": bug.mutation.before}
        calls = [{"name": "edit_file", "arguments": args}]
    else:
        calls = [
            {"name": "run_tests", "arguments": {"target": test}},
            {"name": "submit", "arguments": {}},
        ]
    return "\n".join(format_tool_call(**c) for c in calls)
