"""Lines of ``src/agentic_rl`` that only the tests reach (issue 38: "test-only lines").

A name-based reachability walk over the AST, no imports executed:

- nodes are the top-level functions and classes of every module under ``src/agentic_rl`` and
  the methods of those classes;
- the roots are what a user runs: the module-level statements of the library (registries,
  constants; not its imports or ``__all__``), every file under ``benchmarks/``, ``examples/``,
  ``scripts/`` and ``.ci/``, the ```python`` blocks of ``docs/`` (the code a page tells users
  to write; a name only mentioned in prose is no use), the strings of ``configs/*.toml`` and
  the ``[project.scripts]`` / entry points of ``pyproject.toml`` (``module:attr`` strings);
- a top-level node is reached when its name is referenced (a name, an attribute, an imported
  name, or a string that is a bare or dotted ``module:attr`` identifier) from reached code; a
  method when its class is reached and its name is referenced from reached code, or it is a
  dunder or a hook a library calls (``do_GET``, ``forward``, …).

Names are matched without scopes, so a name defined twice is reached when either use is: the
count is a lower bound of the unreachable code, never a false alarm from a shadowed name.
Unreached nodes are reported as *test-only* when ``tests/`` references their name, else *dead*.
Run from the repository root: ``python scripts/test_only_code.py [--list]``; the last line
printed is ``test-only lines: N`` (and ``dead lines: M``).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "src" / "agentic_rl"
USER_DIRS = ("benchmarks", "examples", "scripts", ".ci")
#: methods another library calls by protocol, never by a name in this code base (http.server,
#: torch, threading, logging, json, a file object; gymnasium's Env and Space; Selenium's and
#: miniwob's instance and environment)
HOOKS = {
    "do_GET", "do_POST", "do_PUT", "do_DELETE", "do_HEAD", "log_message", "handle", "setup",
    "finish", "forward", "run", "emit", "filter", "default", "encode", "decode", "encoding",
    "writable", "contains", "is_np_flattenable", "to_jsonable", "from_jsonable",
    "observation_space", "action_space", "create_driver", "_hard_reset_instance",
}  # fmt: skip
_PATHLIKE = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")
_PYTHON_BLOCK = re.compile(r"^ *```python\n(.*?)^ *```", re.M | re.S)
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")  # a call in code sent as text (a sandbox driver)


@dataclass
class Node:
    """One function, class or method of the library."""

    module: str
    qualname: str
    name: str
    lines: int
    refs: set[str]
    owner: str | None = None  # qualname of the class of a method
    reached: bool = False
    registered: bool = False  # decorated with a registering call (``@atexit.register``)
    methods: list[Node] = field(default_factory=list)


def _docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (never references)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def references(nodes: list[ast.AST], skip: set[int], aliases: dict[str, str]) -> set[str]:
    """The identifiers ``nodes`` reference (names, attributes, imported names, path strings)."""
    out: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name):
                out.add(node.id)
                out.add(aliases.get(node.id, node.id))
            elif isinstance(node, ast.Attribute):
                out.add(node.attr)
            elif isinstance(node, ast.alias):
                out.update(node.name.split("."))
            elif isinstance(node, ast.JoinedStr):  # f"{_PACKAGE}.module:attr": a path string
                text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
                if _PATHLIKE.match(text):
                    out.update(re.split(r"[.:]", text))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in skip:
                    continue
                if _PATHLIKE.match(node.value):
                    out.update(re.split(r"[.:]", node.value))
                out.update(_CALLED.findall(node.value))
    return out


def _registers(decorator: ast.expr) -> bool:
    """Whether a decorator hands the function to a registry (``atexit.register``, ``register_x(...)``)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return "register" in name


def _span(node: ast.AST) -> int:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return node.end_lineno - first + 1


def _aliases(tree: ast.Module) -> dict[str, str]:
    return {
        a.asname: a.name.split(".")[-1]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for a in node.names
        if a.asname
    }


def library_nodes(path: Path) -> tuple[list[Node], set[str]]:
    """The nodes of one library module and the references of its module-level statements."""
    tree = ast.parse(path.read_text(), str(path))
    skip, aliases = _docstring_ids(tree), _aliases(tree)
    module = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts)
    nodes, root_stmts = [], []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = [
                s for s in stmt.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            parts = [
                *stmt.decorator_list,
                *getattr(stmt, "bases", []),
                *getattr(stmt, "keywords", []),
            ]
            if not isinstance(stmt, ast.ClassDef):
                parts, body = [stmt], []
            node = Node(
                module, stmt.name, stmt.name, _span(stmt), references(parts + body, skip, aliases)
            )
            node.registered = any(_registers(d) for d in stmt.decorator_list)
            if isinstance(stmt, ast.ClassDef):
                for m in stmt.body:
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef):
                        node.methods.append(
                            Node(module, f"{stmt.name}.{m.name}", m.name, _span(m),
                                 references([m], skip, aliases), owner=stmt.name)
                        )  # fmt: skip
            nodes.append(node)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            continue
        elif isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
        ):
            continue
        else:
            root_stmts.append(stmt)
    return nodes, references(root_stmts, skip, aliases)


def file_references(path: Path) -> set[str]:
    """Every identifier a Python file references (a user-side or test file)."""
    tree = ast.parse(path.read_text(), str(path))
    return references([tree], _docstring_ids(tree), _aliases(tree))


def _strings(value) -> set[str]:
    if isinstance(value, str):
        return set(re.split(r"[.:]", value)) if _PATHLIKE.match(value) else set()
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values()), set())
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value), set())
    return set()


def user_roots() -> set[str]:
    """The references of the user-side files, the configs and the package's entry points."""
    refs: set[str] = set()
    for folder in USER_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() != Path(__file__).resolve():
                refs |= file_references(path)
    for path in sorted((ROOT / "configs").rglob("*.toml")):
        refs |= _strings(tomllib.loads(path.read_text()))
    for path in sorted((ROOT / "docs").rglob("*.md")):  # the Python a page tells users to run
        for block in _PYTHON_BLOCK.findall(path.read_text()):
            try:
                tree = ast.parse(textwrap.dedent(block))
            except SyntaxError:
                continue
            refs |= references([tree], set(), _aliases(tree))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("project", {})
    refs |= _strings(project.get("scripts", {})) | _strings(project.get("entry-points", {}))
    return refs


def walk(extra_roots: set[str]) -> list[Node]:
    """All library nodes, ``reached`` set from the user roots plus ``extra_roots``."""
    nodes, reached_refs = [], user_roots() | extra_roots
    for path in sorted(LIBRARY.rglob("*.py")):
        found, refs = library_nodes(path)
        nodes += found
        reached_refs |= refs
    for node in nodes:  # registered by a decorator (@atexit.register, @register(...)): called
        if node.registered:  # by whoever holds the registry
            reached_refs.add(node.name)
        if node.name.startswith("__") and node.name.endswith("__"):  # a module's __getattr__
            reached_refs.add(node.name)  # or __dir__ (PEP 562): Python calls it
    changed = True
    while changed:
        changed = False
        for node in nodes:
            if not node.reached and node.name in reached_refs:
                node.reached, changed = True, True
                reached_refs |= node.refs
            if not node.reached:
                continue
            for m in node.methods:
                hook = m.name in HOOKS or (m.name.startswith("__") and m.name.endswith("__"))
                if not m.reached and (hook or m.name in reached_refs):
                    m.reached, changed = True, True
                    reached_refs |= m.refs
    return nodes


def unreached(nodes: list[Node]) -> dict[str, Node]:
    """The unreached nodes by ``module.qualname`` (a method of an unreached class is in its class)."""
    out = {f"{n.module}.{n.qualname}": n for n in nodes if not n.reached}
    for n in nodes:
        if n.reached:
            out.update({f"{m.module}.{m.qualname}": m for m in n.methods if not m.reached})
    return out


def main() -> int:
    """Print the unreached nodes (``--list``) and the test-only / dead line counts.

    *test-only*: reached when the test files are roots too; *dead*: reached by nothing.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list every unreached node")
    args = parser.parse_args()
    test_refs: set[str] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        test_refs |= file_references(path)
    by_users, with_tests = unreached(walk(set())), unreached(walk(test_refs))
    totals = {"test-only": 0, "dead": 0}
    for key in sorted(by_users):
        node, kind = by_users[key], "dead" if key in with_tests else "test-only"
        totals[kind] += node.lines
        if args.list:
            print(f"{kind:9} {node.lines:4}  {key}")
    print(f"dead lines: {totals['dead']}")
    print(f"test-only lines: {totals['test-only']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
