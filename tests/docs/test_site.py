"""The documentation site: ``mkdocs build --strict`` passes, and its checks really fail.

The full build (``mkdocs.yml``) renders every page and the Reference of every module of
``agentic_rl`` from the docstrings; ``--strict`` fails it on a broken link or anchor, a page
left out of the nav, or a docstring reference to an ``agentic_rl`` path that does not exist. The
smaller tests build a tiny site over a throwaway ``agentic_rl`` package with the same hooks, to
show that a stale reference, a broken link and a module without ``__init__.py`` fail the build,
and test the docstring conversion (``scripts/docs_griffe.py``) and the hooks
(``scripts/docs_hooks.py``) on their own.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="the docs extra is not installed (pip install -e '.[docs]'; make test installs it)",
)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_site_builds_strict(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    site = tmp_path / "site"
    pages = list(site.rglob("index.html"))
    assert len(pages) > 200  # the written pages and a Reference page per module
    recipe = (site / "reference/agentic_rl/trainer/recipe/index.html").read_text()
    assert 'id="agentic_rl.trainer.recipe.train"' in recipe
    cli = (site / "reference/cli/index.html").read_text()
    assert "agentic-rl check-env" in cli and "--seeds SEEDS" in cli  # generated --help
    design = (site / "design/index.html").read_text()
    assert 'id="decision-1"' in design


# --- a tiny site over a throwaway agentic_rl package, with the real hooks -------------------

_CONFIG = """\
site_name: tiny
strict: true
validation: {omitted_files: warn, absolute_links: warn, unrecognized_links: warn, anchors: warn}
hooks: [scripts/docs_hooks.py]
plugins:
  - autorefs
  - mkdocstrings:
      handlers:
        python:
          paths: [src]
          options:
            extensions: [scripts/docs_griffe.py:RstToMarkdown]
            filters: public
            show_root_heading: true
            heading_level: 1
nav:
  - Home: index.md
  - Reference: []
"""


def tiny_site(tmp_path: Path, doc: str, page: str = "# Home\n") -> Path:
    """A site whose package ``agentic_rl`` has one module ``core`` documented as ``doc``."""
    (tmp_path / "scripts").mkdir()
    for name in ("docs_hooks.py", "docs_griffe.py"):
        (tmp_path / "scripts" / name).write_text((ROOT / "scripts" / name).read_text())
    package = tmp_path / "src" / "agentic_rl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "core.py").write_text(
        f'"""Core.\n\n{doc}\n"""\n\n\ndef step() -> int:\n    """One step."""\n    return 1\n'
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page)
    (tmp_path / "mkdocs.yml").write_text(_CONFIG)
    return tmp_path / "mkdocs.yml"


def test_a_docstring_reference_becomes_a_checked_link(tmp_path):
    config = tiny_site(tmp_path, "Calls :func:`~agentic_rl.core.step` and :func:`step`.")
    result = build(config, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    html = (tmp_path / "site/reference/agentic_rl/core/index.html").read_text()
    links = re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]+)"', html)
    assert links == ["#agentic_rl.core.step"] * 2


def test_a_stale_docstring_reference_fails_the_strict_build(tmp_path):
    config = tiny_site(tmp_path, "Calls :func:`agentic_rl.core.gone`.")
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "agentic_rl.core: docstring names agentic_rl.core.gone, which does not exist" in (
        result.stderr
    )


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    for page in ("[x](nowhere.md)", "[x](#no-such-heading)"):
        folder = tmp_path / str(len(page))
        folder.mkdir()
        result = build(tiny_site(folder, "Plain.", page=f"# Home\n\n{page}\n"), folder / "site")
        assert result.returncode != 0, page


def test_a_link_to_a_source_file_goes_to_its_reference_page(tmp_path):
    page = "# Home\n\nSee [core](../src/agentic_rl/core.py).\n"
    result = build(tiny_site(tmp_path, "Plain.", page=page), tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'href="reference/agentic_rl/core/"' in (tmp_path / "site/index.html").read_text()


def test_a_module_folder_without_init_fails_the_strict_build(tmp_path):
    config = tiny_site(tmp_path, "Plain.")
    (tmp_path / "src/agentic_rl/loose").mkdir()
    (tmp_path / "src/agentic_rl/loose/mod.py").write_text('"""Loose."""\n')
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "agentic_rl/loose has Python files but no __init__.py" in result.stderr


# --- the docstring conversion on its own ----------------------------------------------------


def test_rst_simple_tables_become_markdown_tables():
    griffe_ext = _load("docs_griffe")
    text = (
        "Intro.\n\n==========  =====\nname        what\n==========  =====\n"
        "reinforce_pp  wide first cell\ngrpo        a\n            continued\n==========  =====\n"
    )
    assert (
        "| name | what |\n|---|---|\n| reinforce_pp | wide first cell |\n| grpo | a continued |\n"
        in (griffe_ext.simple_tables(text))
    )


def test_definition_lists_and_literal_blocks_become_markdown():
    griffe_ext = _load("docs_griffe")
    text = "Task\n    A question.\nReward\n    One.\n\nAn example::\n\n    code\n\nArgs:\n    x: y."
    assert griffe_ext.definition_lists(griffe_ext.literal_blocks(text)) == (
        "Task\n:   A question.\nReward\n:   One.\n\nAn example:\n\n    code\n\nArgs:\n    x: y."
    )


def test_the_hooks_list_every_public_module_once():
    hooks = _load("docs_hooks")
    modules = hooks.discover(ROOT / "src")
    names = [m.name for m in modules]
    assert len(names) == len(set(names))
    assert {"agentic_rl", "agentic_rl.types", "agentic_rl.trainer", "agentic_rl.envs.base"} <= set(
        names
    )
    assert not [n for n in names if any(p.startswith("_") for p in n.split("."))]
    files = {m.path.relative_to(ROOT / "src").as_posix() for m in modules}
    on_disk = {
        p.relative_to(ROOT / "src").as_posix()
        for p in (ROOT / "src/agentic_rl").rglob("*.py")
        if not any(part.startswith("_") for part in p.relative_to(ROOT / "src").parts[:-1])
        and (not p.name.startswith("_") or p.name == "__init__.py")
    }
    assert files == on_disk
