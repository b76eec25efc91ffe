"""Bug injection for ``swe-repo-v0``: one AST mutation of one function, written as a minimal text edit.

The approach of SWE-smith (Yang et al. 2025, "SWE-smith: Scaling Data for Software Engineering
Agents", arXiv:2504.21798, its "procedural modifications"): parse a module with :mod:`ast`,
change one node inside one function, and keep the bug only if the repository's tests catch
it (:mod:`agentic_rl.envs.swe_repo.catalogue`). The kinds (:data:`KINDS`):

=====================  ======================================================================
kind                   change
=====================  ======================================================================
``flip_comparison``    ``==``/``!=``, ``<``/``>``, ``<=``/``>=``, ``in``/``not in``,
                       ``is``/``is not``
``off_by_one``         an integer constant ``c`` -> ``c - 1`` (odd ``c``) or ``c + 1``
                       (even); ``<``/``<=``, ``>``/``>=``
``swap_operator``      ``+``/``-``, ``*``/``/``, ``//`` -> ``/``, ``%`` -> ``//``, ``**`` -> ``*``,
                       ``&``/``|``, ``<<``/``>>``, ``and``/``or`` (also in ``x += y``)
``dropped_branch``     an ``if`` statement removed (its ``else`` block, or ``elif`` chain,
                       kept in its place; ``pass`` where the block would be empty)
``swapped_arguments``  two adjacent positional arguments of a call swapped
``negated_condition``  the test of an ``if``/``elif``/``while`` negated (``not`` added or
                       removed)
=====================  ======================================================================

Minimal edits. The mutated module is **not** ``ast.unparse``'d (that would drop comments and
reformat the file, a tell-tale sign): only the operator token, the constant, the swapped
argument texts, the negated test or the removed statement's lines change, located with the
nodes' source positions (and :mod:`tokenize` for operators). Every edit is checked: the edited
text must parse to exactly the mutated tree (``ast.dump`` equal), else the site is skipped.

A :class:`Mutation` is stored as a block of whole lines before and after (with enough
context lines to occur once in its file), so it can be applied to the pristine file and
reversed with one exact string replacement (what the oracle does with ``edit_file``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from agentic_rl.envs.swe_repo.edits import Source, apply_edits, changed_block, op_edit

__all__ = [
    "KINDS",
    "Mutation",
    "Site",
    "apply_mutation",
    "functions",
    "mutate",
    "sites",
]

KINDS = (
    "flip_comparison",
    "off_by_one",
    "swap_operator",
    "dropped_branch",
    "swapped_arguments",
    "negated_condition",
)
_FLIP = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.Gt,
    ast.Gt: ast.Lt,
    ast.LtE: ast.GtE,
    ast.GtE: ast.LtE,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_ARITH = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.And: ast.Or,
    ast.Or: ast.And,
}
_TOKEN = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.Gt: ">",
    ast.LtE: "<=",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass(frozen=True)
class Mutation:
    """One injected bug in one file.

    Attributes:
        kind: one of :data:`KINDS`.
        function: qualified name of the mutated function (``Class.method``, ``outer.inner``).
        line: 1-based line of the first line of :attr:`before` in the original file.
        before: the original lines (joined with ``\\n``, no final newline); occurs once in the
            original file.
        after: the same lines with the bug; occurs once in the mutated file.
        change: what changed, in words (e.g. ``"`<` -> `<=`"``).
    """

    kind: str
    function: str
    line: int
    before: str
    after: str
    change: str


def functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of ``tree`` with its qualified name, in source order."""
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _own_nodes(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``func``'s body (docstring, nested functions and classes excluded), in
    a fixed depth-first order."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    out: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child)

    for stmt in body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            visit(stmt)
    return out


def _function_sites(
    src: Source, func: ast.FunctionDef | ast.AsyncFunctionDef, kind: str
) -> list[Callable]:
    """The sites of ``kind`` in ``func``; each ``make()`` mutates ``func`` in place and returns
    ``(edits, change)``, or None when no minimal edit exists."""
    nodes = _own_nodes(func)
    return [
        make
        for node in ([func, *nodes] if kind == "dropped_branch" else nodes)
        for make in _node_sites(src, node, kind)
    ]


def _node_sites(src: Source, node: ast.AST, kind: str) -> list[Callable]:
    if kind in ("flip_comparison", "off_by_one") and isinstance(node, ast.Compare):
        table = _FLIP if kind == "flip_comparison" else _BOUNDARY
        return [
            _compare_site(src, node, i, table) for i, op in enumerate(node.ops) if type(op) in table
        ]
    if kind == "off_by_one" and isinstance(node, ast.Constant) and type(node.value) is int:
        return [_constant_site(src, node)]
    if kind == "swap_operator":
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            return [_binop_site(src, node)]
        if isinstance(node, ast.BoolOp):
            return [_boolop_site(src, node)]
    if kind == "dropped_branch" and isinstance(node, _BLOCKS):
        return [_drop_site(src, node, f, i) for f, i in _if_statements(src, node)]
    if kind == "swapped_arguments" and isinstance(node, ast.Call):
        args = node.args
        if any(isinstance(a, ast.Starred) for a in args):
            return []
        return [
            _swap_site(src, node, i)
            for i in range(len(args) - 1)
            if src.segment(args[i]) != src.segment(args[i + 1])
        ]
    if kind == "negated_condition" and isinstance(node, (ast.If, ast.While)):
        return [_negate_site(src, node)]
    return []


_BLOCKS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.If,
    ast.For,
    ast.While,
    ast.With,
    ast.Try,
    ast.ExceptHandler,
)


def _compare_site(src: Source, node: ast.Compare, i: int, table: dict) -> Callable:
    def make():
        old = type(node.ops[i])
        node.ops[i] = table[old]()
        left = node.left if i == 0 else node.comparators[i - 1]
        edit = op_edit(src, left, node.comparators[i], _TOKEN[old], _TOKEN[table[old]])
        return ([edit], f"`{_TOKEN[old]}` -> `{_TOKEN[table[old]]}`") if edit else None

    return make


def _constant_site(src: Source, node: ast.Constant) -> Callable:
    def make():
        old = node.value
        node.value = old - 1 if old % 2 else old + 1
        return [(*src.span(node), str(node.value))], f"`{src.segment(node)}` -> `{node.value}`"

    return make


def _binop_site(src: Source, node: ast.BinOp | ast.AugAssign) -> Callable:
    def make():
        old = type(node.op)
        node.op = _ARITH[old]()
        new = _TOKEN[_ARITH[old]]
        if isinstance(node, ast.AugAssign):
            edit = op_edit(src, node.target, node.value, _TOKEN[old] + "=", new + "=")
        else:
            edit = op_edit(src, node.left, node.right, _TOKEN[old], new)
        return ([edit], f"`{_TOKEN[old]}` -> `{new}`") if edit else None

    return make


def _boolop_site(src: Source, node: ast.BoolOp) -> Callable:
    def make():
        old, new = type(node.op), _ARITH[type(node.op)]
        node.op = new()
        edits = [
            op_edit(src, a, b, _TOKEN[old], _TOKEN[new])
            for a, b in zip(node.values, node.values[1:])
        ]
        if any(e is None for e in edits):
            return None
        return edits, f"`{_TOKEN[old]}` -> `{_TOKEN[new]}`"

    return make


def _is_elif(src: Source, node: ast.If) -> bool:
    return src.segment(node).startswith("elif")


def _if_statements(src: Source, node: ast.AST) -> list[tuple[str, int]]:
    """``(field, index)`` of the plain ``if`` statements (not ``elif``) directly in ``node``'s
    statement lists."""
    out = []
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(node, field, None)
        if isinstance(stmts, list):
            out += [
                (field, i)
                for i, s in enumerate(stmts)
                if isinstance(s, ast.If) and not _is_elif(src, s)
            ]
    return out


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _drop_site(src: Source, parent: ast.AST, field: str, index: int) -> Callable:
    def make():
        stmts = getattr(parent, field)
        node: ast.If = stmts[index]
        first, last = node.lineno, node.end_lineno or node.lineno
        indent = _indent(src.lines[first - 1])
        if src.offset(first, node.col_offset) != src.starts[first - 1] + len(indent):
            return None  # not the first statement of its line
        start, end = src.starts[first - 1], src.starts[last]
        if node.orelse and _is_elif(src, node.orelse[0]):
            block = src.text[src.offset(node.orelse[0].lineno, 0) : end]
            text = indent + block.lstrip(" \t")[len("el") :]
        elif node.orelse:
            lo, hi = node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno
            cut = len(_indent(src.lines[lo - 1])) - len(indent)
            text = "".join(line[min(cut, len(_indent(line))) :] for line in src.lines[lo - 1 : hi])
        else:
            text = f"{indent}pass\n" if len(stmts) == 1 else ""
        if not text.endswith("\n") and text:
            text += "\n"
        stmts[index : index + 1] = node.orelse or ([ast.Pass()] if len(stmts) == 1 else [])
        test = ast.unparse(node.test)
        return [(start, end, text)], f"removed `if {test[:60]}` (line {first})"

    return make


def _swap_site(src: Source, node: ast.Call, i: int) -> Callable:
    def make():
        a, b = node.args[i], node.args[i + 1]
        text_a, text_b = src.segment(a), src.segment(b)
        edits = [(*src.span(a), text_b), (*src.span(b), text_a)]
        node.args[i], node.args[i + 1] = b, a
        return edits, f"swapped arguments `{text_a[:40]}` and `{text_b[:40]}`"

    return make


def _negate_site(src: Source, node: ast.If | ast.While) -> Callable:
    def make():
        test = node.test
        text = src.segment(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            node.test = test.operand
            inner = src.segment(test.operand)
            if src.text[src.span(test)[0] : src.span(test.operand)[0]].count("(") > 0:
                inner = "(" + inner + ")"
            return [(*src.span(test), inner)], f"removed `not` from `{text[:60]}`"
        node.test = ast.UnaryOp(ast.Not(), test)
        simple = isinstance(test, (ast.Compare, ast.Call, ast.Name, ast.Attribute, ast.Subscript))
        new = f"not {text}" if simple else f"not ({text})"
        return [(*src.span(test), new)], f"negated `{text[:60]}`"

    return make


@dataclass(frozen=True)
class Site:
    """Where a mutation can go: the ``index``-th site of ``kind`` in the ``function``-th function
    of a module (:func:`functions` order), named ``qualname``."""

    function: int
    qualname: str
    kind: str
    index: int


def sites(source: str, kinds: tuple[str, ...] = KINDS) -> list[Site]:
    """Every mutation site of ``kinds`` in module ``source``, in a fixed order (functions in
    source order, then kinds, then nodes depth-first). Cheap: nothing is verified yet.

    Raises:
        ValueError: an unknown kind.
        SyntaxError: ``source`` does not parse.
    """
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown mutation kinds {unknown}; known: {', '.join(KINDS)}")
    src, tree = Source(source), ast.parse(source)
    return [
        Site(i, qualname, kind, k)
        for i, (qualname, func) in enumerate(functions(tree))
        for kind in kinds
        for k in range(len(_function_sites(src, func, kind)))
    ]


def mutate(source: str, site: Site) -> Mutation | None:
    """The mutation at ``site`` as a minimal edit of ``source``, or None when no minimal edit
    parses to the mutated tree (see the module docstring).

    Raises:
        IndexError: ``site`` does not exist in ``source``.
        SyntaxError: ``source`` does not parse.
    """
    src, tree = Source(source), ast.parse(source)
    func = functions(tree)[site.function][1]
    made = _function_sites(src, func, site.kind)[site.index]()
    if made is None:
        return None
    edits, change = made
    mutated = apply_edits(source, edits)
    expected = ast.dump(tree)  # the whole module, mutated in place
    try:
        if ast.dump(ast.parse(mutated)) != expected:
            return None
    except SyntaxError:
        return None
    block = changed_block(source, mutated)
    if block is None:
        return None
    return Mutation(site.kind, site.qualname, block[0], block[1], block[2], change)


def apply_mutation(source: str, mutation: Mutation, *, reverse: bool = False) -> str:
    """``source`` with ``mutation`` applied (``before`` -> ``after``), or reversed.

    Raises:
        ValueError: the text to replace does not occur exactly once.
    """
    old, new = (mutation.after, mutation.before) if reverse else (mutation.before, mutation.after)
    count = source.count(old)
    if count != 1:
        raise ValueError(f"the mutation's text occurs {count} times, expected once")
    return source.replace(old, new, 1)
