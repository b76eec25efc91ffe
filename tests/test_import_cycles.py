"""No import circle among the modules of ``src/agentic_rl`` (issue 38: envs/base.py → spaces.py →
contract.py → base.py was one, type-only).

An edge is a module-level import (also under ``if TYPE_CHECKING:`` and in ``try`` blocks: a
type-only circle is still a circle for a reader and for type checkers); imports inside
functions are deliberate late imports and are not edges. ``from package import name`` is an
edge to the submodule ``package.name`` when there is one, else to the package. A circle is a
strongly connected group of two or more modules (Tarjan's algorithm).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "agentic_rl"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports at module level."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in modules else base)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in found if m in modules and m != name}


def import_cycles(root: Path) -> list[list[str]]:
    """The strongly connected groups (of two or more modules) of ``root``'s import graph."""
    modules = _modules(root)
    graph = {name: sorted(_imports(name, path, modules)) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan (1972); the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return groups


def test_src_has_no_import_cycle():
    assert import_cycles(SRC) == []


def test_the_finder_finds_a_type_only_circle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
    )
    (pkg / "c.py").write_text("from . import a\ndef g():\n    import pkg.b\n")
    (pkg / "d.py").write_text("def h():\n    from pkg import a\n")  # a late import: no edge
    assert import_cycles(pkg) == [["pkg.a", "pkg.b", "pkg.c"]]
