"""Text edits behind :mod:`agentic_rl.envs.swe_repo.mutations`: ``ast`` positions as character
offsets, an operator token located between two nodes, edits applied, and the changed block of
lines made unique in its file."""

from __future__ import annotations

import ast
import io
import tokenize

__all__ = ["Edit", "Source", "apply_edits", "changed_block", "op_edit"]

# An edit: (start offset, end offset, replacement) in the module text, in characters.
Edit = tuple[int, int, str]


class Source:
    """A module's text with character offsets of ``ast`` positions (which count UTF-8 bytes).

    Never raises for positions inside the text."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        """The character offset of line ``lineno`` (1-based), UTF-8 byte column ``col``."""
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        """``(start, end)`` character offsets of ``node``'s source."""
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def segment(self, node: ast.AST) -> str:
        """``node``'s source text."""
        start, end = self.span(node)
        return self.text[start:end]


def op_edit(src: Source, left: ast.AST, right: ast.AST, old: str, new: str) -> Edit | None:
    """The edit turning operator ``old`` between nodes ``left`` and ``right`` into ``new``;
    None when the text between them is not just that operator (with brackets and spaces)."""
    start, end = src.span(left)[1], src.span(right)[0]
    gap = src.text[start:end]
    found: list[tokenize.TokenInfo] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(gap).readline):
            if tok.type in (tokenize.OP, tokenize.NAME) and tok.string not in "()[]{}":
                found.append(tok)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a gap with an unclosed bracket ends the stream; what came before counts
    if not found or " ".join(t.string for t in found) != old:
        return None
    gap_lines = gap.splitlines(keepends=True) or [""]
    pos = [sum(len(x) for x in gap_lines[: r - 1]) + c for r, c in (found[0].start, found[-1].end)]
    return (start + pos[0], start + pos[1], new)


def apply_edits(text: str, edits: list[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied (last first). Never raises."""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def changed_block(original: str, mutated: str) -> tuple[int, str, str] | None:
    """``(line, before, after)``: the changed lines with the fewest context lines that make
    ``before`` unique in ``original`` and ``after`` unique in ``mutated``; None if none do."""
    a, b = original.splitlines(), mutated.splitlines()
    lo = 0
    while lo < min(len(a), len(b)) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    for _ in range(12):
        before, after = "\n".join(a[lo:hi_a]), "\n".join(b[lo:hi_b])
        if before.strip() and after.strip():
            if original.count(before) == 1 and mutated.count(after) == 1:
                return lo + 1, before, after
        if lo > 0:
            lo -= 1
        if hi_a < len(a):
            hi_a, hi_b = hi_a + 1, hi_b + 1
    return None
