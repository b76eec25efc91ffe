"""Grading of ``swe-repo-v0``: the agent's library files run against a pristine copy of the tests.

After the episode, the workspace's files are copied out (the sandbox's processes stopped,
links never followed) and compared with the task's first workspace:

- **diff**: a unified diff of every changed, added or deleted file (``.git`` and caches
  aside), recorded in the trajectory (the ``submit`` result and the final ``info["diff"]``);
- **harness**: a change to a test file or a harness file (``conftest.py``, pytest/tox/setup
  configuration, ``sitecustomize.py``, ``*.pth``; :meth:`RepoSpec.is_harness
  <agentic_rl.envs.swe_repo.repos.RepoSpec.is_harness>`) is reported, and never graded: the
  grading tree is the task's pristine tree with only the agent's *library* files (``.py``
  under the library paths) taken over, so editing a test or the harness cannot make a wrong
  fix pass;
- **suspicious code**: library files where the agent raised the count of references to the
  test machinery or process exits (:data:`~agentic_rl.envs.swe_repo.testing.SUSPICIOUS`);
  such a submission is not resolved.

The grading tree runs the repository's whole suite in a fresh sandbox. ``resolved`` (SWE-bench's
definition): every test the bug broke passes and every other test still passes (as many passed
as in the pristine run, none failed).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from agentic_rl.envs.swe_repo.catalogue import Bug, repo_tests
from agentic_rl.envs.swe_repo.repos import RepoSpec
from agentic_rl.envs.swe_repo.testing import SUSPICIOUS, TestRun, run_pytest
from agentic_rl.envs.swe_repo.tools import normalize
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.snapshot import WorkspaceImage

__all__ = ["Grade", "diff_files", "files_of", "grade", "grading_tree", "image_of"]

_IGNORED = (".git/", "__pycache__/", ".pytest_cache/")
MAX_DIFF_CHARS = 20_000


@dataclass(frozen=True)
class Grade:
    """The grade of a submission.

    Attributes:
        resolved: every test passes in the pristine-tests run, and no suspicious code.
        fail_to_pass: fraction of the bug's failing tests that pass now.
        regressions: tests that failed (or files that failed to collect) other than the bug's.
        harness: changed test or harness files (sorted paths).
        suspicious: added library lines that reach for the test machinery.
        diff: unified diff of the workspace against the task's first workspace (capped).
        changed: changed, added or deleted files (sorted paths; caches and ``.git`` aside).
        detail: the end of the grading run's output when it did not resolve (timings and
            addresses removed, so that a replay gives the same info).
    """

    resolved: bool
    fail_to_pass: float
    regressions: int
    harness: tuple[str, ...]
    suspicious: tuple[str, ...]
    diff: str
    changed: tuple[str, ...]
    detail: str = ""


def files_of(image: WorkspaceImage) -> dict[str, bytes]:
    """``{path: bytes}`` of the regular files of ``image`` outside ``.git`` and caches."""
    return {
        path: payload
        for path, kind, payload, _mode in image.entries
        if kind == "file"
        and isinstance(payload, bytes)
        and not any(path.startswith(p) or f"/{p}" in path for p in _IGNORED)
    }


def image_of(files: dict[str, bytes]) -> WorkspaceImage:
    """A workspace image holding ``files`` (folders created, modes 0755 / 0644). Never raises."""
    entries, dirs = [], set()
    for path in files:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    entries += [(d, "dir", None, 0o755) for d in dirs]
    entries += [(p, "file", data, 0o644) for p, data in files.items()]
    return WorkspaceImage(
        tuple(sorted(entries, key=lambda e: e[0])), sum(len(d) for d in files.values())
    )


def _text(data: bytes | None) -> list[str]:
    if data is None:
        return []
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def diff_files(before: dict[str, bytes], after: dict[str, bytes]) -> tuple[str, tuple[str, ...]]:
    """``(unified diff, changed paths)`` from ``before`` to ``after`` (git-style ``a/``, ``b/``
    names; the diff is cut at :data:`MAX_DIFF_CHARS`). Never raises."""
    changed = tuple(sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p)))
    chunks = []
    for path in changed:
        chunks += difflib.unified_diff(
            _text(before.get(path)),
            _text(after.get(path)),
            f"a/{path}" if path in before else "/dev/null",
            f"b/{path}" if path in after else "/dev/null",
        )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in chunks)
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + f"…[diff cut: {len(text)} characters in all]\n"
    return text, changed


def grading_tree(
    spec: RepoSpec, pristine: dict[str, bytes], agent: dict[str, bytes]
) -> dict[str, bytes]:
    """The pristine tree with the agent's library files (changed, added, deleted) taken over;
    everything else (tests, harness, other files) pristine. Never raises."""
    tree = {p: d for p, d in pristine.items() if not spec.is_source(p)}
    tree.update({p: d for p, d in agent.items() if spec.is_source(p)})
    return tree


def _suspicious(spec: RepoSpec, pristine: dict[str, bytes], agent: dict[str, bytes]) -> list[str]:
    """Added lines of library files whose references to the test machinery rose in number."""
    found = []
    for path, data in agent.items():
        if not spec.is_source(path) or pristine.get(path) == data:
            continue
        old, new = _text(pristine.get(path)), _text(data)
        if sum(len(SUSPICIOUS.findall(x)) for x in new) > sum(
            len(SUSPICIOUS.findall(x)) for x in old
        ):
            added = [x for x in difflib.ndiff(old, new) if x.startswith("+ ")]
            found += [f"{path}: {x[2:].strip()[:120]}" for x in added if SUSPICIOUS.search(x)]
    return found


def _score(bug: Bug, run: TestRun) -> tuple[float, int, bool]:
    """``(fail_to_pass, regressions, all_pass)`` of a grading run."""
    passed = run.with_outcome("passed")
    fixed = sum(t in passed for t in bug.failing) / len(bug.failing)
    bad = {**run.with_outcome("failed"), **run.with_outcome("error")}
    regressions = sum(t not in bug.failing for t in bad)
    baseline = repo_tests(bug.repo)["passed"]
    all_pass = (
        not bad
        and len(passed) == baseline
        and not run.timed_out
        and not run.problem
        and run.returncode == 0
    )
    if not run.tests and not all_pass:
        regressions = max(regressions, 1)  # the suite did not run at all
    return fixed, regressions, all_pass


def grade(
    bug: Bug,
    spec: RepoSpec,
    pristine: dict[str, bytes],
    agent: dict[str, bytes],
    config: SandboxConfig,
    timeout_s: float = 60.0,
) -> Grade:
    """Grade the agent's files (see the module docstring) in a fresh sandbox.

    Args:
        bug: the task's bug (its failing tests).
        spec: the repository.
        pristine: the task's first workspace files (:func:`files_of`).
        agent: the workspace files at the end of the episode.
        config: the grading sandbox's configuration.
        timeout_s: limit of the suite's run.

    Raises:
        SandboxUnavailableError, SandboxError: the grading sandbox cannot run.
    """
    diff, changed = diff_files(pristine, agent)
    harness = tuple(p for p in changed if spec.is_harness(p))
    suspicious = tuple(_suspicious(spec, pristine, agent))
    with EpisodeSandbox(config) as box:
        image_of(grading_tree(spec, pristine, agent)).materialize(box.workspace, box.uid)
        run = run_pytest(box, list(spec.tests), spec.pythonpath, timeout_s)
    fixed, regressions, all_pass = _score(bug, run)
    resolved = all_pass and not suspicious
    detail = "" if resolved else normalize(run.problem or run.output)[-1500:]
    return Grade(resolved, fixed, regressions, harness, suspicious, diff, changed, detail)
