"""Line budgets of the source tree: files at most 500 lines, functions at most 80 lines.

Usage: ``python .ci/check_budgets.py [ROOT ...]`` (default ``src``). Prints every file and every
function (methods and nested functions included, decorators and docstring counted) over its
budget, one per line as ``path:line: ...``, and exits 1 when there is any; 0 otherwise.
A function's length is ``end_lineno - lineno + 1`` of its ``ast`` node.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def over_budget(path: Path) -> list[str]:
    """The budget violations of one Python file, as ``path:line: message`` strings."""
    text = path.read_text(encoding="utf-8")
    problems = []
    n_lines = len(text.splitlines())
    if n_lines > MAX_FILE_LINES:
        problems.append(f"{path}:1: file has {n_lines} lines (budget {MAX_FILE_LINES})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - start + 1
            if length > MAX_FUNCTION_LINES:
                problems.append(
                    f"{path}:{node.lineno}: function {node.name} has {length} lines "
                    f"(budget {MAX_FUNCTION_LINES})"
                )
    return problems


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("src")]
    problems = [p for root in roots for f in sorted(root.rglob("*.py")) for p in over_budget(f)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
