"""MkDocs hooks of the docs site (``mkdocs.yml``: ``hooks``): the generated Reference and links.

* **Reference pages, generated.** One page per module of ``src/agentic_rl`` (its docstring and
  its public, documented members, rendered by mkdocstrings from the source) and one per package
  (the package docstring, what its ``__init__`` defines itself, and a table of its modules with
  the first line of each docstring). They exist only in the build (``on_files``) and are added
  under the nav's ``Reference`` entry (``on_config``), so a new module is documented the moment
  it exists and a moved one moves with it. A folder of modules without an ``__init__.py`` is
  not a package setuptools installs: it is reported as a warning (``--strict`` fails on it).
* **The command line reference.** ``<!-- agentic-rl-cli -->`` in a page becomes the ``--help``
  of ``agentic-rl`` and of each of its commands, from the parser itself
  (:func:`agentic_rl.cli.main.build_parser`), so it is never out of date.
* **Links to files outside the docs folder.** A page's link to ``…/src/agentic_rl/x/y.py``
  becomes a link to module ``agentic_rl.x.y``'s Reference page. A link to a file under
  ``examples/``, ``benchmarks/``, ``configs/`` or ``scripts/`` becomes a link to a generated page
  that shows the file (``files/<path>/``, outside the nav). Any other link that leaves the docs
  folder (``../README.md``) stays broken and fails the strict build (``validation`` in
  ``mkdocs.yml``): link the docs page that holds the content instead.
"""

from __future__ import annotations

import ast
import logging
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.agentic_rl")

PACKAGE = "agentic_rl"
REFERENCE = "reference"
CLI_MARKER = "<!-- agentic-rl-cli -->"
_SOURCE_LINK = re.compile(r"\]\(((?:\.\./)+)src/(agentic_rl/[\w/]+?)(/__init__)?\.py(#[^)]*)?\)")
_REPO_LINK = re.compile(r"\]\(((?:\.\./)+)((?:examples|benchmarks|configs|scripts)/[\w./-]+)\)")
SHOWN_FILES = "files"
_LANGUAGES = {".py": "python", ".toml": "toml", ".sh": "bash", ".json": "json", ".yml": "yaml"}


@dataclass(frozen=True)
class Module:
    """One page of the Reference: a module or a package of ``agentic_rl``."""

    name: str  # dotted, e.g. agentic_rl.trainer.recipe
    path: Path  # the .py file (a package's __init__.py)
    is_package: bool

    @property
    def page(self) -> str:
        """The page's path in the docs folder."""
        parts = self.name.split(".")
        if self.is_package:
            return posixpath.join(REFERENCE, *parts, "index.md")
        return posixpath.join(REFERENCE, *parts) + ".md"


def _summary(path: Path) -> str:
    """The first line of a module's docstring (empty if it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().split("\n", 1)[0]


def discover(src: Path) -> list[Module]:
    """Every public package and module under ``src/agentic_rl``, packages before their modules.

    A folder with ``.py`` files but no ``__init__.py`` is logged as a warning and left out.
    """
    root = src / PACKAGE
    found: list[Module] = []

    def walk(folder: Path, dotted: str) -> None:
        found.append(Module(dotted, folder / "__init__.py", True))
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith(("_", ".")):
                continue
            if entry.is_dir():
                if (entry / "__init__.py").is_file():
                    walk(entry, f"{dotted}.{entry.name}")
                elif any(entry.rglob("*.py")):
                    log.warning(
                        "%s has Python files but no __init__.py: not a package setuptools "
                        "installs, and not in the Reference",
                        entry.relative_to(src.parent),
                    )
            elif entry.suffix == ".py":
                found.append(Module(f"{dotted}.{entry.stem}", entry, False))

    walk(root, PACKAGE)
    return found


def _own_members(init: Path) -> list[str]:
    """Public names an ``__init__.py`` defines itself (not re-exports), in ``__all__`` if it has one."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    names, exported = [], None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    exported = set(ast.literal_eval(node.value))
    return [n for n in names if not n.startswith("_") and (exported is None or n in exported)]


def page_markdown(module: Module, modules: list[Module]) -> str:
    """The Markdown of ``module``'s Reference page (a mkdocstrings ``:::`` block)."""
    if not module.is_package:
        return f"::: {module.name}\n"
    members = _own_members(module.path)
    lines = [f"::: {module.name}", "    options:", f"      members: {members or False}", ""]
    children = [m for m in modules if m.name.rpartition(".")[0] == module.name]
    if children:
        lines += ["## Modules", "", "| module | what it holds |", "|---|---|"]
        here = posixpath.dirname(module.page)
        for child in children:
            link = posixpath.relpath(child.page, here)
            summary = _summary(child.path).replace("|", "\\|")
            lines.append(f"| [`{child.name}`]({link}) | {summary} |")
    return "\n".join(lines) + "\n"


def _nav_entries(modules: list[Module], parent: str) -> list[Any]:
    """The nav under package ``parent``: its page, its modules, its sub-packages as sections."""
    entries: list[Any] = []
    for m in modules:
        if m.name.rpartition(".")[0] != parent:
            continue
        short = m.name.rpartition(".")[2]
        if m.is_package:
            entries.append({m.name: [m.page, *_nav_entries(modules, m.name)]})
        else:
            entries.append({short: m.page})
    return entries


def _modules(config: Any) -> list[Module]:
    cached = config.extra.get("_agentic_rl_modules")
    if cached is None:
        src = _repo_root(config) / "src"
        cached = config.extra["_agentic_rl_modules"] = discover(src)
    return cached


def on_config(config: Any) -> Any:
    """Add the generated Reference pages to the nav's ``Reference`` section."""
    modules = _modules(config)
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Reference" in entry:
            entry["Reference"] = [
                *entry["Reference"],
                {PACKAGE: [modules[0].page, *_nav_entries(modules, PACKAGE)]},
            ]
            return config
    log.warning("mkdocs.yml: no 'Reference' entry in nav, so the generated pages are not listed")
    return config


def _repo_root(config: Any) -> Path:
    return Path(config.config_file_path).resolve().parent


def linked_repo_files(docs: Path, root: Path) -> set[str]:
    """Repository paths (``examples/x.py``) that the pages in ``docs`` link to and that exist."""
    found = set()
    for page in docs.rglob("*.md"):
        for match in _REPO_LINK.finditer(page.read_text(encoding="utf-8")):
            target = (page.parent / match.group(1) / match.group(2)).resolve()
            if target.is_file() and root in target.parents and docs not in target.parents:
                found.add(target.relative_to(root).as_posix())
    return found


def shown_file_markdown(path: str, root: Path) -> str:
    """The page that shows repository file ``path``: its name and its text as a code block."""
    text = (root / path).read_text(encoding="utf-8")
    fence = "````" if "```" in text else "```"
    language = _LANGUAGES.get(Path(path).suffix, "text")
    return f"# `{path}`\n\n{fence}{language}\n{text.rstrip()}\n{fence}\n"


def on_files(files: Any, config: Any) -> Any:
    """Add the generated Reference pages and the pages of linked repository files."""
    from mkdocs.structure.files import File, InclusionLevel

    modules = _modules(config)
    for module in modules:
        files.append(File.generated(config, module.page, content=page_markdown(module, modules)))
    root = _repo_root(config)
    for path in sorted(linked_repo_files(Path(config.docs_dir).resolve(), root)):
        files.append(
            File.generated(
                config,
                f"{SHOWN_FILES}/{path}.md",
                content=shown_file_markdown(path, root),
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
        )
    return files


def cli_help() -> str:
    """``agentic-rl --help`` and each command's ``--help``, as Markdown sections."""
    import argparse

    from agentic_rl.cli.main import build_parser

    parser = build_parser()
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
    parts = ["## agentic-rl", "", "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        command.formatter_class = parser.formatter_class
        parts += [f"## agentic-rl {name}", "", "```text", command.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def source_links(markdown: str, page_uri: str) -> str:
    """``markdown`` with links to ``src/agentic_rl/….py`` pointing at their Reference pages and
    links to ``examples/``, ``benchmarks/``, ``configs/`` or ``scripts/`` files at their pages."""

    def replace(match: re.Match[str]) -> str:
        dotted = match.group(2).replace("/", ".")
        is_package = match.group(3) is not None
        target = Module(dotted, Path(), is_package).page
        return f"]({posixpath.relpath(target, posixpath.dirname(page_uri) or '.')})"

    def shown(match: re.Match[str]) -> str:
        docs_depth = len(posixpath.dirname(page_uri).split("/")) if "/" in page_uri else 0
        if len(match.group(1)) // 3 != docs_depth + 1:  # not a path from the repository root
            return match.group(0)
        target = f"{SHOWN_FILES}/{match.group(2)}.md"
        return f"]({posixpath.relpath(target, posixpath.dirname(page_uri) or '.')})"

    return _REPO_LINK.sub(shown, _SOURCE_LINK.sub(replace, markdown))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the CLI reference marker and point source-file links at the Reference."""
    del config, files
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_help())
    return source_links(markdown, page.file.src_uri)
