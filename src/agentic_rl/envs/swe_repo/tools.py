"""The shell and file helpers behind ``swe-repo-v0``'s tools (the tools themselves: :mod:`.env`).

``bash`` runs ``bash -c COMMAND`` in ``/workspace`` as a child of the episode sandbox's
interpreter, in its own process group, killed whole after ``timeout_s``, with :data:`BASH_ENV`
added to the sandbox's environment; its combined output is cut to a head and a tail.
``read_file`` shows a window of lines, ``edit_file`` replaces one
exact occurrence of a string, ``run_tests`` shows pytest's output without the progress lines,
timings and object addresses (so that the same workspace gives the same observation).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Callable
from typing import Any

from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.python_tool import ExecResult

__all__ = [
    "BASH_ENV",
    "cut",
    "make_tools",
    "edit_text",
    "normalize",
    "parse_targets",
    "read_window",
    "run_bash",
]

_BASH = """
import json as _j, os as _o, signal as _s, subprocess as _sp
_env = dict(_o.environ, **{env!r})
_p = _sp.Popen(["bash", "-c", {command!r}], cwd="/workspace", stdin=_sp.DEVNULL, env=_env,
               stdout=_sp.PIPE, stderr=_sp.STDOUT, start_new_session=True)
try:
    _out, _late = _p.communicate(timeout={timeout!r})[0], False
except _sp.TimeoutExpired:
    _o.killpg(_p.pid, _s.SIGKILL)
    _out, _late = _p.communicate()[0], True
_j.dumps([_p.returncode, _out.decode("utf-8", "replace")[-{keep}:], _late])
"""


#: the shell's environment besides the sandbox's: git without the system config and attributes
#: (the sandbox user cannot read ``/etc``), with an identity for commits, and no pager
BASH_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@localhost",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@localhost",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "TERM": "dumb",
}


def run_bash(
    box: EpisodeSandbox, command: str, timeout_s: float, keep: int = 50_000
) -> tuple[int | None, str, bool, ExecResult]:
    """Run ``command`` with bash in ``box``'s workspace.

    Returns:
        ``(exit status, output (its last ``keep`` characters), timed out, the interpreter
        call's result)``; the exit status is None when the interpreter call itself died (its
        result says why).

    Raises:
        SandboxUnavailableError, SandboxError: the sandbox cannot start.
    """
    code = _BASH.format(command=command, timeout=float(timeout_s), keep=int(keep), env=BASH_ENV)
    result = box.run_python(code)
    if result.value is None:
        return None, result.render(), result.timed_out, result
    status, output, late = json.loads(ast.literal_eval(result.value))
    return status, output, bool(late), result


def cut(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first two thirds and last third
    around a ``…[N characters cut]…`` line. Never raises."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n…[{len(text) - head - tail} characters cut]…\n{text[-tail:]}"


_PROGRESS = re.compile(r"^[.FEsxX]+\s*(\[\s*\d+%\])?\s*$")
_TIMING = re.compile(r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_RULE = re.compile(r"([=_-])\1{5,}")


def normalize(output: str) -> str:
    """pytest's output without progress-dot lines, durations and object addresses, its ruler
    lines (``=====``, ``_____``) cut to three characters. Never raises."""
    lines = [line for line in output.splitlines() if not _PROGRESS.match(line)]
    text = _ADDRESS.sub("0x…", _TIMING.sub("", "\n".join(lines)))
    return _RULE.sub(r"\1\1\1", text).strip()


def parse_targets(target: str) -> list[str]:
    """The test paths or node ids of a ``run_tests`` call (shell-like splitting).

    Raises:
        ValueError: a target is an option (starts with ``-``), there are more than 10, or the
            quoting is broken.
    """
    try:
        parts = shlex.split(target or "")
    except ValueError as exc:
        raise ValueError(f"cannot split the targets: {exc}") from None
    if any(p.startswith("-") for p in parts):
        raise ValueError("targets are test paths or ids (file.py::test_name), not options")
    if len(parts) > 10:
        raise ValueError("at most 10 targets per run")
    return parts


def read_window(text: str, path: str, start: int, end: int, max_lines: int) -> str:
    """Lines ``start``..``end`` (1-based, inclusive; ``end`` <= 0: ``max_lines`` lines) of
    ``text`` under a header naming them; at most ``max_lines`` lines.

    Raises:
        ValueError: ``start`` is past the end of the file.
    """
    lines = text.splitlines()
    start = max(1, int(start))
    if lines and start > len(lines):
        raise ValueError(f"{path} has {len(lines)} lines; start_line {start} is past the end")
    last = start + max_lines - 1 if end <= 0 else min(int(end), start + max_lines - 1)
    last = min(last, len(lines))
    body = "\n".join(lines[start - 1 : last])
    more = f" (the file has {len(lines)} lines)" if last < len(lines) or start > 1 else ""
    return f"{path}, lines {start}-{last}{more}:\n{body}"


def edit_text(text: str, path: str, old: str, new: str) -> str:
    """``text`` with the one occurrence of ``old`` replaced by ``new``.

    Raises:
        ValueError: ``old`` is empty, absent, or occurs more than once (the message says how
            to fix the call).
    """
    if not old:
        raise ValueError("old must be the exact text to replace (not empty)")
    count = text.count(old)
    if count == 0:
        raise ValueError(
            f"old was not found in {path}: copy it exactly from read_file, spaces included"
        )
    if count > 1:
        raise ValueError(f"old occurs {count} times in {path}: include more surrounding lines")
    return text.replace(old, new, 1)


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def make_tools(fns: dict[str, tuple[Callable[..., Any], Any]], read_lines: int) -> dict[str, Tool]:
    """The five tools of ``swe-repo-v0`` (schemas and descriptions) around ``fns``:
    ``{name: (function, risk detector or None)}`` for ``bash``, ``read_file``, ``edit_file``,
    ``run_tests`` and ``submit``.

    Raises:
        KeyError: a tool's function is missing.
    """
    text = {"type": "string"}
    path = {"type": "string", "description": "path relative to the repository root"}
    lines = {"path": path, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}
    specs = {
        "bash": (
            "Run a shell command in the repository (no network).",
            {"command": text},
            ["command"],
        ),
        "read_file": (
            f"Show lines of a file (at most {read_lines}; end_line 0: as many).",
            lines,
            ["path"],
        ),
        "edit_file": (
            "Replace the one exact occurrence of old with new in a file.",
            {"path": path, "old": text, "new": text},
            ["path", "old", "new"],
        ),
        "run_tests": (
            "Run pytest on test files or ids (file.py::test_name); empty: the whole suite.",
            {"target": text},
            [],
        ),
        "submit": ("Submit your fix; ends the episode.", {}, []),
    }
    return {
        name: Tool(name, doc, _schema(props, required), fns[name][0], fns[name][1])
        for name, (doc, props, required) in specs.items()
    }
