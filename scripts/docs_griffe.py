"""Griffe extension of the docs site: the docstrings' reStructuredText bits made into Markdown.

agentic-rl's docstrings are Google-style with Sphinx roles (``:class:`~agentic_rl.types.Turn```,
``:func:`setup```), ``::`` literal blocks and RST simple tables (``====  ====``). mkdocstrings
renders Markdown, so before the docstrings are parsed this extension (``mkdocs.yml``, the python
handler's ``extensions``) rewrites, in place:

* a role whose target resolves to an object of ``agentic_rl`` that the Reference shows into an
  autorefs cross-reference (``[`Turn`][agentic_rl.types.Turn]``): a link the site build checks;
  a role naming something the Reference does not show (a private helper, ``torch.Tensor``, a
  parameter) into plain code. Targets resolve as Sphinx does: a dotted ``agentic_rl.…`` path
  (``~`` shows its last part), else a name in the scope of the object, its class, its module and
  its package, following imports to the object itself;
* a role naming an ``agentic_rl.…`` path that does not exist into plain code *and* a warning, so
  ``mkdocs build --strict`` fails on a stale reference (a renamed or moved object);
* ``docs/design.md, decision N`` into a link to that decision of the design guide;
* a paragraph ending in ``::`` into one ending in ``:`` (its indented block is Markdown code);
* an RST definition list (a term line, its definition indented below it) into a Markdown one
  (``def_list``), so the definition is text, not an indented code block;
* an RST simple table into a Markdown table.

Loaded by path (``scripts/docs_griffe.py:RstToMarkdown``); imports only griffe and the stdlib.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

log = griffe.get_logger("agentic_rl_docs")

PACKAGE = "agentic_rl"
_ROLE = re.compile(r":(?:py:)?(class|mod|func|meth|attr|data|exc|obj|const):`([^`]+)`")
_DESIGN = re.compile(r"docs/design\.md,\s+decision\s+(\d+)")
_BORDER = re.compile(r"^( *)(=+)((?: +=+)+) *$")


def _find(collection: Any, path: str) -> Any:
    """The object at ``path`` in the loaded modules (aliases followed to their target), or None."""
    try:
        obj = collection.get_member(path)
    except (KeyError, ValueError):
        return None
    seen = 0
    while obj is not None and obj.is_alias and seen < 20:
        try:
            obj = obj.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
        seen += 1
    return obj


def shown(obj: Any) -> bool:
    """Whether the Reference renders ``obj``: every part of its path public (``filters: public``,
    so ``__all__`` counts) and documented (``show_if_no_docstring: false``) inside ``agentic_rl``.
    """
    node = obj
    while node is not None and node.path != PACKAGE:
        if not node.path.startswith(PACKAGE + "."):
            return False
        if node.is_module:
            if node.name.startswith("_") and node.name != "__init__":
                return False
        elif not node.is_public or not node.has_docstrings:
            return False
        node = node.parent
    return node is not None


def _scopes(obj: Any) -> list[Any]:
    """Where a relative name is looked up: the object, its parents up to the package."""
    scopes, node = [], obj
    while node is not None:
        scopes.append(node)
        node = node.parent
    return scopes


def resolve(collection: Any, obj: Any, target: str) -> Any:
    """The object a role's ``target`` names from inside ``obj``'s docstring, or None."""
    target = target.lstrip(".")
    if target.startswith(PACKAGE + ".") or target == PACKAGE:
        return _find(collection, target)
    head, _, rest = target.partition(".")
    for scope in _scopes(obj):
        member = scope.members.get(head) if hasattr(scope, "members") else None
        if member is None:
            continue
        path = member.target_path if member.is_alias else member.path
        found = _find(collection, f"{path}.{rest}" if rest else path)
        if found is not None:
            return found
    return None


def _role(collection: Any, obj: Any, match: re.Match[str], stale: list[str]) -> str:
    text = match.group(2).strip()
    title = None
    titled = re.fullmatch(r"(.*?)\s*<([^>]+)>", text)
    if titled:
        title, text = titled.group(1), titled.group(2)
    short = text.startswith("~")
    target = text.lstrip("~")
    label = title or (target.rsplit(".", 1)[-1] if short else target.lstrip("."))
    found = resolve(collection, obj, target)
    if found is None:
        if target.startswith(PACKAGE + "."):
            stale.append(target)
        return f"`{label}`"
    if not shown(found):
        return f"`{label}`"
    return f"[`{label}`][{found.path}]"


def simple_tables(text: str) -> str:
    """``text`` with each RST simple table (border, header, border, rows, border) as Markdown."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        table = _table_at(lines, i)
        if table is None:
            out.append(lines[i])
            i += 1
            continue
        rows, end = table
        indent = _BORDER.match(lines[i]).group(1)
        out.extend(["", *(indent + row for row in _markdown_rows(rows)), ""])
        i = end
    return "\n".join(out)


def _columns(border: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"=+", border)]


def _cells(line: str, cols: list[tuple[int, int]]) -> list[str]:
    """The cells of one row; a cell that runs past its column's border (as RST tolerates) ends
    at the next space instead."""
    cells, start = [], cols[0][0]
    for k in range(len(cols)):
        stop = len(line) if k == len(cols) - 1 else cols[k + 1][0]
        while 0 < stop < len(line) and not line[stop - 1].isspace() and not line[stop].isspace():
            stop += 1
        cells.append(line[start:stop].strip())
        start = stop
    return cells


def _table_at(lines: list[str], i: int) -> tuple[list[list[str]], int] | None:
    """(rows, index after the table) when an RST simple table starts at line ``i``."""
    if not _BORDER.match(lines[i]):
        return None
    border = lines[i].rstrip()
    borders = [j for j in range(i + 1, len(lines)) if lines[j].rstrip() == border]
    if len(borders) < 2 or borders[0] == i + 1:
        return None
    cols = _columns(border)
    header = [_cells(line, cols) for line in lines[i + 1 : borders[0]]]
    rows: list[list[str]] = [[" ".join(c).strip() for c in zip(*header, strict=True)]]
    end = borders[1]
    for line in lines[borders[0] + 1 : end]:
        if not line.strip():
            continue
        cells = _cells(line, cols)
        if cells[0] == "" and len(rows) > 1:  # a continuation line of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows, end + 1


def _markdown_rows(rows: list[list[str]]) -> list[str]:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [row(rows[0]), "|" + "---|" * len(rows[0]), *(row(r) for r in rows[1:])]


def literal_blocks(text: str) -> str:
    """``text`` with RST's ``::`` paragraph ends made ``:`` (a lone ``::`` line removed)."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if line.rstrip().endswith("::") and (k + 1 == len(lines) or not lines[k + 1].strip()):
            stripped = line.rstrip()
            lines[k] = "" if stripped.strip() == "::" else stripped[:-1]
    return "\n".join(lines)


_NOT_A_TERM = re.compile(r"^(?:[*+|>#-]|\d+[.)]\s|\.\. )")


def definition_lists(text: str) -> str:
    """``text`` with RST definition lists as Markdown ones.

    A line at the left margin after a blank or an indented line (the definition above it), not
    a list item and not ending in ``:`` (a Google section, a literal block's lead), directly
    followed by an indented line, gets that line as its ``:   `` definition."""
    lines = text.split("\n")
    out = list(lines)
    for k in range(len(lines) - 1):
        term, first = lines[k], lines[k + 1]
        if (
            term.strip()
            and not term[0].isspace()
            and (k == 0 or not lines[k - 1].strip() or lines[k - 1][0].isspace())
            and not term.rstrip().endswith(":")
            and not _NOT_A_TERM.match(term)
            and first.startswith("    ")
            and first.strip()
        ):
            out[k + 1] = ":   " + first[4:]
    lines = out
    return "\n".join(lines)


def to_markdown(collection: Any, obj: Any, text: str) -> tuple[str, list[str]]:
    """The docstring ``text`` of ``obj`` in Markdown, and the stale ``agentic_rl`` paths it names."""
    stale: list[str] = []
    text = _ROLE.sub(lambda m: _role(collection, obj, m, stale), text)
    text = _DESIGN.sub(lambda m: f"[{m.group(0)}][decision-{m.group(1)}]", text)
    return definition_lists(simple_tables(literal_blocks(text))), stale


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: Any, loader: Any, **kwargs: Any) -> None:
        """Rewrite the docstrings of ``pkg`` and every object under it, once it is loaded."""
        del kwargs
        if pkg.path != PACKAGE:
            return
        collection = loader.modules_collection
        stack = [pkg]
        while stack:
            obj = stack.pop()
            if obj.is_alias:
                continue
            if obj.docstring is not None:
                value, stale = to_markdown(collection, obj, obj.docstring.value)
                obj.docstring.value = value
                for target in stale:
                    log.warning(f"{obj.path}: docstring names {target}, which does not exist")
            stack.extend(m for m in obj.members.values() if not m.is_alias)
