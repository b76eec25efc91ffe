"""The bug mutators of ``code-repair-v0``: seeded, AST-level changes to one function.

The kinds (:data:`BUG_KINDS`, described in :mod:`agentic_rl.envs.code_repair.tasks`) apply with
:mod:`ast` to the entry-point function of a module only. :func:`candidate_sites` lists, in a
deterministic order, every mutation of a kind that the function allows; a site is an index
into that list, so ``(problem, kind, site)`` names one bug for good.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

__all__ = ["BUG_KINDS", "candidate_sites"]

BUG_KINDS = ("operator_swap", "off_by_one", "wrong_variable", "missing_case")

_SWAP: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Div: ast.Mult,
    ast.And: ast.Or,
    ast.Or: ast.And,
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
_BOUNDARY: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


def _entry_function(tree: ast.Module, entry_point: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            return node
    raise ValueError(f"no top-level function {entry_point!r}")


def _body_nodes(func: ast.FunctionDef) -> list[ast.AST]:
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # skip the docstring
    return [n for stmt in body for n in ast.walk(stmt)]


def _local_names(func: ast.FunctionDef) -> list[str]:
    names = {a.arg for a in func.args.args + func.args.kwonlyargs + func.args.posonlyargs}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return sorted(names)


def _set_op(node: ast.AST, table: dict[type, type], index: int | None) -> Callable[[], str]:
    def apply() -> str:
        if index is None:
            old = node.op  # type: ignore[attr-defined]
            node.op = table[type(old)]()  # type: ignore[attr-defined]
            return f"{type(old).__name__} -> {type(node.op).__name__}"  # type: ignore[attr-defined]
        old = node.ops[index]  # type: ignore[attr-defined]
        node.ops[index] = table[type(old)]()  # type: ignore[attr-defined]
        return f"{type(old).__name__} -> {type(node.ops[index]).__name__}"  # type: ignore[attr-defined]

    return apply


def _ops_sites(nodes: list[ast.AST], table: dict[type, type]) -> list[Callable[[], str]]:
    sites = []
    for node in nodes:
        if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(node.op) in table:
            sites.append(_set_op(node, table, None))
        elif isinstance(node, ast.Compare):
            sites += [_set_op(node, table, i) for i, op in enumerate(node.ops) if type(op) in table]
    return sites


def _const_site(node: ast.Constant) -> Callable[[], str]:
    def apply() -> str:
        old = node.value
        node.value = old + 1
        return f"constant {old} -> {old + 1}"

    return apply


def _name_site(node: ast.Name, names: list[str]) -> Callable[[], str]:
    def apply() -> str:
        others = [n for n in names if n != node.id]
        old, node.id = node.id, others[sum(map(ord, node.id)) % len(others)]
        return f"variable {old} -> {node.id}"

    return apply


def _if_site(stmts: list[ast.stmt], index: int) -> Callable[[], str]:
    def apply() -> str:
        removed = stmts[index]
        assert isinstance(removed, ast.If)
        stmts[index : index + 1] = removed.orelse or ([ast.Pass()] if len(stmts) == 1 else [])
        return f"removed `if {ast.unparse(removed.test)}` (line {removed.lineno})"

    return apply


def candidate_sites(tree: ast.Module, entry_point: str, kind: str) -> list[Callable[[], str]]:
    """Mutations of ``kind`` possible in the entry function of ``tree``, in a fixed order.

    Each item mutates ``tree`` in place when called and returns a description of the change.

    Raises:
        ValueError: unknown ``kind`` or no such entry function.
    """
    func = _entry_function(tree, entry_point)
    nodes = _body_nodes(func)
    if kind == "operator_swap":
        return _ops_sites(nodes, _SWAP)
    if kind == "off_by_one":
        consts = [
            _const_site(n) for n in nodes if isinstance(n, ast.Constant) and type(n.value) is int
        ]
        return consts + _ops_sites(nodes, _BOUNDARY)
    if kind == "wrong_variable":
        names = _local_names(func)
        if len(names) < 2:
            return []
        return [
            _name_site(n, names)
            for n in nodes
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names
        ]
    if kind == "missing_case":
        sites = []
        for node in nodes:
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list):
                    sites += [
                        _if_site(stmts, i) for i, s in enumerate(stmts) if isinstance(s, ast.If)
                    ]
        top = func.body
        sites += [_if_site(top, i) for i, s in enumerate(top) if isinstance(s, ast.If)]
        return sites
    raise ValueError(f"unknown bug kind {kind!r}; known: {', '.join(BUG_KINDS)}")
