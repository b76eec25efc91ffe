"""The shape of the code that issue 38 promises, measured by ``scripts/structure_figures.py``.

The README draws the call path from ``agentic-rl train`` to ``optimizer.step()``; a tiny run on
the random Llama traces it (the agentic_rl frames on the stack at the first optimizer step inside
``rl_step``) and the drawing must be exactly that path, so it cannot go stale. The path stays
within 12 files, and the package has no import circle.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADING = "From `agentic-rl train` to `optimizer.step()`:"


def _load_figures():
    path = ROOT / "scripts" / "structure_figures.py"
    spec = importlib.util.spec_from_file_location("structure_figures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks the module up
    spec.loader.exec_module(module)
    return module


figures = _load_figures()


def readme_path(text: str) -> list[tuple[str, list[str]]]:
    """The (file, functions) of each line of the fenced block that follows ``HEADING`` in the
    README (``trainer/step.py   rl_step → credit_and_update``).

    Raises:
        ValueError: no heading, no fenced block right after it, or a line not of that form.
    """
    lines = text.splitlines()
    if HEADING not in lines:
        raise ValueError(f"README has no line {HEADING!r}")
    rest = lines[lines.index(HEADING) + 1 :]
    while rest and not rest[0].strip():
        rest.pop(0)
    if not rest or not rest[0].startswith("```") or "```" not in rest[1:]:
        raise ValueError(f"no fenced block right after {HEADING!r}")
    path = []
    for line in rest[1 : rest.index("```", 1)]:
        match = re.fullmatch(r"(\S+\.py)\s+(\S.*)", line.strip())
        if match is None:
            raise ValueError(f"not a 'file  function → function' line: {line!r}")
        path.append((match[1], [f.strip() for f in match[2].split("→")]))
    return path


def _drawn(path: list[tuple[str, list[str]]]) -> str:
    width = max(len(f) for f, _ in path) + 2
    return "\n".join(f"{f:<{width}}{' → '.join(names)}" for f, names in path)


@pytest.fixture(scope="module")
def traced(tiny_model_dir, tmp_path_factory):
    """One tiny ``agentic-rl train`` (1 RL step), traced at its first RL optimizer step."""
    workdir = tmp_path_factory.mktemp("structure")
    return figures.trace_train(workdir, model_dir=tiny_model_dir, profile=False)


def test_readme_draws_the_traced_path(traced):
    drawn = readme_path((ROOT / "README.md").read_text(encoding="utf-8"))
    assert drawn == traced.path, (
        f"the README's path is stale; the traced one is:\n{_drawn(traced.path)}"
    )


def test_path_from_train_to_optimizer_step_is_at_most_12_files(traced):
    assert traced.path_files <= 12, _drawn(traced.path)
    assert 1 <= traced.path_frames < traced.train_frames


def test_readme_path_parser():
    text = f"x\n{HEADING}\n\n```text\ncli/main.py    main → _cmd_train\na/b.py  f\n```\n"
    assert readme_path(text) == [("cli/main.py", ["main", "_cmd_train"]), ("a/b.py", ["f"])]
    with pytest.raises(ValueError, match="not a 'file"):
        readme_path(f"{HEADING}\n```\nno file here\n```\n")
    with pytest.raises(ValueError, match="no fenced block"):
        readme_path(f"{HEADING}\ntext\n```\na.py f\n```\n")


def _cycles() -> dict[str, list[dict]]:
    return figures.import_cycles(figures.parse_package(ROOT / "src" / "agentic_rl"))


def test_no_import_cycle_at_run_time():
    assert [c["cycle"] for c in _cycles()["runtime"]] == []


def test_no_import_cycle_even_under_type_checking():
    assert [c["cycle"] for c in _cycles()["with_type_checking"]] == []
