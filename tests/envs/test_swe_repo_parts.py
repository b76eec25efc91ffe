"""swe-repo-v0's parts that need no sandbox and no fetched repository: the AST mutations (minimal
edits, checked by hand), the tool helpers, the harness rules, the grading tree, the issue texts
by level, the fetch's refusals and the shipped catalogue's shape."""

from __future__ import annotations

import io
import tarfile
from collections import Counter

import pytest

from agentic_rl.envs.swe_repo import repos
from agentic_rl.envs.swe_repo.catalogue import Bug, load_catalogue
from agentic_rl.envs.swe_repo.grading import diff_files, grading_tree
from agentic_rl.envs.swe_repo.mutations import (
    KINDS,
    Mutation,
    apply_mutation,
    mutate,
    sites,
)
from agentic_rl.envs.swe_repo.repos import REPOS, get_repo
from agentic_rl.envs.swe_repo.tasks import describe
from agentic_rl.envs.swe_repo.tools import cut, edit_text, normalize, parse_targets, read_window
from agentic_rl.errors import EnvUnavailableError

MODULE = '''\
import re


def clamp(value, low, high):
    """Keep value in [low, high]."""
    # the lower bound first
    if value < low:
        return low
    elif value > high:  # then the upper one
        return high
    else:
        return value


def words(text, limit=3):
    found = re.findall(r"\\w+", text)
    total = 0
    for w in found:
        total += len(w)
    if not found:
        return []
    return found[:limit] if limit and found else found
'''


def mutations(source: str, kind: str) -> list[Mutation]:
    """Every verified mutation of ``kind`` in ``source``, in :func:`sites` order."""
    found = (mutate(source, site) for site in sites(source, (kind,)))
    return [m for m in found if m is not None]


def _by_change(kind: str) -> dict[str, Mutation]:
    return {m.change: m for m in mutations(MODULE, kind)}


def test_flip_comparison_changes_only_the_operator_and_keeps_comments():
    m = _by_change("flip_comparison")["`<` -> `>`"]
    assert m.function == "clamp"
    assert m.before == "    if value < low:" and m.after == "    if value > low:"
    assert m.line == 7
    mutated = apply_mutation(MODULE, m)
    assert "# then the upper one" in mutated and "# the lower bound first" in mutated
    assert mutated.count("\n") == MODULE.count("\n")
    assert apply_mutation(mutated, m, reverse=True) == MODULE


def test_off_by_one_moves_a_boundary_of_the_body_not_a_default_argument():
    found = _by_change("off_by_one")
    # `total = 0` is in the body; the default `limit=3` is not
    assert sorted(found) == ["`0` -> `1`", "`<` -> `<=`", "`>` -> `>=`"]
    assert found["`0` -> `1`"].after == "    total = 1"
    assert found["`<` -> `<=`"].after == "    if value <= low:"
    assert found["`>` -> `>=`"].after == "    elif value >= high:  # then the upper one"
    const = mutations("def f(x):\n    return x[1] + 2\n", "off_by_one")
    assert [m.after for m in const] == ["    return x[0] + 2", "    return x[1] + 3"]


def test_swap_operator_in_augmented_assignment_and_boolean_operator():
    found = _by_change("swap_operator")
    assert found["`+` -> `-`"].after.strip() == "total -= len(w)"
    assert found["`and` -> `or`"].after.strip() == (
        "return found[:limit] if limit or found else found"
    )


def test_dropped_branch_keeps_the_elif_chain_and_the_else_block():
    found = {m.after: m for m in mutations(MODULE, "dropped_branch")}
    # removing `if value < low` leaves the elif as a plain if, comments kept
    first = next(m for m in found.values() if "removed `if value < low`" in m.change)
    mutated = apply_mutation(MODULE, first)
    assert "    if value > high:  # then the upper one\n        return high\n    else:" in mutated
    assert "return low" not in mutated
    # removing `if not found` drops the two lines
    second = next(m for m in found.values() if "removed `if not found`" in m.change)
    assert "return []" not in apply_mutation(MODULE, second)


def test_swapped_arguments_and_negated_condition():
    swap = mutations(MODULE, "swapped_arguments")
    assert [m.after.strip() for m in swap] == ['found = re.findall(text, r"\\w+")']
    negated = {m.after.strip() for m in mutations(MODULE, "negated_condition")}
    assert "if not value < low:" in negated
    assert "if found:" in negated  # `not` removed, not doubled
    assert "elif not value > high:  # then the upper one" in negated


def test_every_mutation_is_unique_in_its_file_and_reverses_exactly():
    for kind in KINDS:
        for m in mutations(MODULE, kind):
            mutated = apply_mutation(MODULE, m)
            assert MODULE.count(m.before) == 1 and mutated.count(m.after) == 1
            assert apply_mutation(mutated, m, reverse=True) == MODULE


def test_sites_are_cheap_and_mutate_checks_each_one():
    all_sites = sites(MODULE)
    assert {s.kind for s in all_sites} == set(KINDS)
    made = [mutate(MODULE, s) for s in all_sites]
    assert sum(m is not None for m in made) == sum(len(mutations(MODULE, k)) for k in KINDS)
    with pytest.raises(ValueError, match="unknown mutation kind"):
        mutations(MODULE, "typo")


def test_tool_helpers():
    assert cut("x" * 10, 20) == "x" * 10
    shown = cut("a" * 60 + "b" * 60, 30)
    assert shown.startswith("a" * 20) and shown.endswith("b" * 10) and "90 characters cut" in shown
    out = (
        "....F.. [100%]\n======== FAILURES ========\n________ test_x ________\n"
        "E  assert <obj at 0x7f3a2b1c9d> == 1\n======== 1 failed, 6 passed in 0.12s ========"
    )
    assert normalize(out) == (
        "=== FAILURES ===\n___ test_x ___\nE  assert <obj at 0x…> == 1\n=== 1 failed, 6 passed ==="
    )
    assert parse_targets("tests/a.py::test_x 'b.py::t[1 2]'") == [
        "tests/a.py::test_x",
        "b.py::t[1 2]",
    ]
    with pytest.raises(ValueError, match="not options"):
        parse_targets("-p evil")
    assert edit_text("a b a c", "f", "b", "B") == "a B a c"
    with pytest.raises(ValueError, match="occurs 2 times"):
        edit_text("a b a c", "f", "a", "A")
    with pytest.raises(ValueError, match="not found"):
        edit_text("a b", "f", "z", "A")
    text = "\n".join(f"line {i}" for i in range(1, 11))
    assert (
        read_window(text, "f.py", 3, 4, 60)
        == "f.py, lines 3-4 (the file has 10 lines):\nline 3\nline 4"
    )
    assert read_window(text, "f.py", 9, 0, 60).endswith("line 9\nline 10")
    assert (
        read_window(text, "f.py", 1, 0, 2)
        == "f.py, lines 1-2 (the file has 10 lines):\nline 1\nline 2"
    )


def test_harness_and_source_rules():
    spec = get_repo("toolz")
    assert spec.is_source("toolz/itertoolz.py")
    assert not spec.is_source("toolz/tests/test_itertoolz.py")  # a test, inside the package
    assert spec.is_harness("toolz/tests/test_itertoolz.py")
    for path in ("conftest.py", "toolz/conftest.py", "setup.cfg", "pyproject.toml", "x.pth"):
        assert spec.is_harness(path) and not spec.is_source(path)
    assert not spec.is_source("README.rst") and not spec.is_harness("README.rst")
    with pytest.raises(ValueError, match="unknown repository"):
        get_repo("nope")


def test_grading_tree_takes_only_the_agents_library_files():
    spec = get_repo("inflection")
    pristine = {
        "inflection/__init__.py": b"buggy\n",
        "test_inflection.py": b"real tests\n",
        "setup.cfg": b"[x]\n",
    }
    agent = {
        "inflection/__init__.py": b"fixed\n",
        "inflection/extra.py": b"new module\n",
        "test_inflection.py": b"def test_ok(): pass\n",  # a tampered test
        "conftest.py": b"collect_ignore_glob = ['*']\n",  # a new harness file
        "notes.txt": b"scratch\n",
    }
    tree = grading_tree(spec, pristine, agent)
    assert tree == {
        "inflection/__init__.py": b"fixed\n",
        "inflection/extra.py": b"new module\n",
        "test_inflection.py": b"real tests\n",
        "setup.cfg": b"[x]\n",
    }
    diff, changed = diff_files(pristine, agent)
    assert changed == (
        "conftest.py",
        "inflection/__init__.py",
        "inflection/extra.py",
        "notes.txt",
        "setup.cfg",
        "test_inflection.py",
    )
    assert "--- a/inflection/__init__.py\n+++ b/inflection/__init__.py\n" in diff
    assert "-buggy\n+fixed\n" in diff and "--- /dev/null\n+++ b/conftest.py" in diff


def _bug(**kw) -> Bug:
    mutation = Mutation("flip_comparison", "Inflector.camelize", 12, "a < b", "a > b", "`<` -> `>`")
    fields = dict(
        id="inflection-000",
        repo="inflection",
        file="inflection/__init__.py",
        mutation=mutation,
        failing=("test_inflection.py::test_camelize[a]", "test_inflection.py::test_camelize[b]"),
        messages={"test_inflection.py::test_camelize[a]": "AssertionError: assert 'Ab' == 'AB'"},
    )
    return Bug(**{**fields, **kw})


def test_issue_gives_away_less_at_each_level():
    bug, spec = _bug(), get_repo("inflection")
    easy, medium, hard = (describe(bug, spec, level) for level in ("easy", "medium", "hard"))
    for text in (easy, medium, hard):
        assert "AssertionError: assert 'Ab' == 'AB'" in text and "a > b" not in text
    assert "inflection/__init__.py" in easy and "`Inflector.camelize`" in easy
    assert "test_camelize[a]" in easy and "(1 more test fail too.)" in easy
    assert "test_camelize[a]" in medium and "inflection/__init__.py" not in medium
    assert "test_camelize" not in hard and "2 tests of the suite fail" in hard
    assert "__init__.py" not in hard


def test_fetch_refuses_links_and_reports_a_missing_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    with pytest.raises(EnvUnavailableError, match="python -m agentic_rl.envs.swe_repo fetch"):
        repos.repo_dir(REPOS[0])
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("pkg-1.0/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
        data = tarfile.TarInfo("pkg-1.0/a.py")
        data.size = 2
        tar.addfile(data, io.BytesIO(b"x\n"))
    with pytest.raises(ValueError, match="not a file or folder"):
        repos._unpack(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "pkg-1.0" / "a.py").exists()


def test_shipped_catalogue_has_200_bugs_over_several_repositories_and_every_kind():
    bugs = load_catalogue()
    assert len(bugs) >= 200
    per_repo = Counter(b.repo for b in bugs)
    assert len(per_repo) >= 3 and min(per_repo.values()) >= 10
    assert {b.mutation.kind for b in bugs} == set(KINDS)
    assert len({b.id for b in bugs}) == len(bugs)
    for bug in bugs:
        assert 1 <= len(bug.failing) <= 40 and bug.messages
        assert bug.mutation.before != bug.mutation.after
        assert get_repo(bug.repo).is_source(bug.file)
