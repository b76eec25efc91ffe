"""The validated bugs of ``swe-repo-v0``: built once in the sandbox, shipped as JSON, re-verifiable.

A bug is kept only when the repository's pristine suite passes (twice, so no test is flaky)
and the mutated one fails at least one and at most :data:`MAX_FAILING` tests, the same ones in
two runs, with no
collection error, none in a file whose test ids differ between machines
(:attr:`RepoSpec.unstable <agentic_rl.envs.swe_repo.repos.RepoSpec.unstable>`), and within the
time limit (SWE-smith's validation: the "fail to pass" tests
are those the bug breaks; every other test must still pass after a fix). Sites are drawn in a
seeded order that alternates the kinds, with at most two bugs per function. The file holds the
mutation (lines before and after, :class:`~agentic_rl.envs.swe_repo.mutations.Mutation`), not
the repository, and the failing tests with the first messages::

    python -m agentic_rl.envs.swe_repo build             # ~15 min on 2 cores
    python -m agentic_rl.envs.swe_repo verify [--sample N]

``verify`` re-runs every bug (or N drawn ones) and checks that exactly the recorded tests
fail. The shipped file is ``data/swe_repo_bugs.json``; entries are in a seeded shuffled
order, so ``seed % N`` spreads over the repositories.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from agentic_rl.envs.swe_repo.mutations import KINDS, Mutation, Site, apply_mutation, mutate, sites
from agentic_rl.envs.swe_repo.repos import REPOS, RepoSpec, get_repo, repo_dir
from agentic_rl.envs.swe_repo.testing import TestRun, run_pytest
from agentic_rl.tools.sandbox import workspace as ws
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.snapshot import WorkspaceImage

__all__ = [
    "Bug",
    "CATALOGUE_PATH",
    "MAX_FAILING",
    "build_catalogue",
    "load_catalogue",
    "verify_catalogue",
    "write_catalogue",
    "repo_tests",
    "sandbox_config",
    "source_files",
    "verify_bug",
]

CATALOGUE_PATH = Path(__file__).with_name("data") / "swe_repo_bugs.json"
#: a bug that breaks more tests than this is too diffuse to be an issue about one function
MAX_FAILING = 40
#: at most this many messages are kept per bug (the descriptions use the first)
_MESSAGES = 3


@dataclass(frozen=True)
class Bug:
    """A validated bug.

    Attributes:
        id: ``<repo>-<n>``, stable across loads.
        repo: the repository's name (:data:`~agentic_rl.envs.swe_repo.repos.REPOS`).
        file: the mutated file, relative to the repository root.
        mutation: what changed (lines before and after, kind, function).
        failing: node ids of the tests the bug makes fail (the "fail to pass" tests), in run
            order.
        messages: ``{node id: failure message}`` of the first failing tests.
    """

    id: str
    repo: str
    file: str
    mutation: Mutation
    failing: tuple[str, ...]
    messages: dict[str, str] = field(compare=False)  # not hashed: a Bug is a cache key

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this bug in the catalogue file. Never raises."""
        row = asdict(self)
        row["mutation"] = asdict(self.mutation)
        row["failing"] = list(self.failing)
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Bug:
        """A bug from its catalogue row.

        Raises:
            KeyError, TypeError: a field is missing or of the wrong type.
        """
        return cls(
            row["id"],
            row["repo"],
            row["file"],
            Mutation(**row["mutation"]),
            tuple(row["failing"]),
            dict(row["messages"]),
        )


def sandbox_config(timeout_s: float = 60.0) -> SandboxConfig:
    """The sandbox of the test runs: calls may last ``timeout_s`` + 15 s, outputs and the
    per-test report may be large (the tools cut what they show)."""
    return SandboxConfig(timeout_s=timeout_s + 15.0, max_output_chars=400_000)


def repo_tests(name: str) -> dict[str, Any]:
    """``{"version", "passed", "skipped"}`` of repository ``name``'s pristine suite, as recorded
    in the shipped catalogue.

    Raises:
        KeyError: the catalogue has no such repository.
    """
    return _catalogue_json()["repos"][name]  # the parsed file is cached


@lru_cache(maxsize=1)
def _catalogue_json() -> dict[str, Any]:
    text = (
        resources.files("agentic_rl.envs.swe_repo")
        .joinpath("data/swe_repo_bugs.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


def load_catalogue(path: Path | None = None) -> list[Bug]:
    """The validated bugs, in the file's (seeded, shuffled) order.

    Raises:
        FileNotFoundError: no catalogue file (build it, see the module docstring).
        ValueError: an entry names an unknown repository or kind.
    """
    data = json.loads(path.read_text(encoding="utf-8")) if path else _catalogue_json()
    bugs = [Bug.from_json(row) for row in data["bugs"]]
    for bug in bugs:
        get_repo(bug.repo)
        if bug.mutation.kind not in KINDS:
            raise ValueError(f"catalogue entry {bug.id}: unknown kind {bug.mutation.kind!r}")
    return bugs


def source_files(spec: RepoSpec, root: Path) -> list[str]:
    """The library files of ``spec`` under ``root`` (relative POSIX paths, sorted)."""
    out = []
    for base in spec.source:
        path = root / base
        found = [path] if path.is_file() else sorted(path.rglob("*.py"))
        out += [p.relative_to(root).as_posix() for p in found]
    return sorted(f for f in out if spec.is_source(f))


class _Runner:
    """One sandbox holding a pristine repository, to run its suite with one file changed."""

    def __init__(self, spec: RepoSpec, timeout_s: float = 60.0):
        self.spec, self.root = spec, repo_dir(spec)
        self.box = EpisodeSandbox(sandbox_config(timeout_s))
        WorkspaceImage.capture(self.root).materialize(self.box.workspace, self.box.uid)
        self.timeout_s = timeout_s

    def run(self, changed: dict[str, str] | None = None, timeout_s: float | None = None) -> TestRun:
        """The suite with ``changed`` files (``{path: text}``), which are put back after."""
        changed = changed or {}
        for path, text in changed.items():
            ws.write_file(self.box.workspace, path, text, max_bytes=1 << 24, uid=self.box.uid)
        try:
            return run_pytest(
                self.box, list(self.spec.tests), self.spec.pythonpath, timeout_s or self.timeout_s
            )
        finally:
            for path in changed:
                original = (self.root / path).read_text(encoding="utf-8")
                ws.write_file(
                    self.box.workspace, path, original, max_bytes=1 << 24, uid=self.box.uid
                )

    def close(self) -> None:
        self.box.close()


def _baseline(runner: _Runner) -> dict[str, Any]:
    """Run the pristine suite twice; ``{"passed", "skipped", "seconds"}``.

    Raises:
        RuntimeError: a test fails or the two runs differ.
    """
    runs = [runner.run() for _ in range(2)]
    for run in runs:
        if run.returncode != 0 or run.with_outcome("failed") or run.with_outcome("error"):
            raise RuntimeError(
                f"{runner.spec.key}: the pristine suite fails:\n{run.output[-2000:]}"
            )
    if runs[0].with_outcome("passed").keys() != runs[1].with_outcome("passed").keys():
        raise RuntimeError(f"{runner.spec.key}: the pristine suite is not deterministic")
    return {
        "version": runner.spec.version,
        "passed": len(runs[0].with_outcome("passed")),
        "skipped": len(runs[0].with_outcome("skipped")),
        "seconds": round(max(r.duration_s for r in runs), 2),
    }


def _interleaved(candidates: list[tuple[str, Site]], rng: random.Random) -> list[tuple[str, Site]]:
    """``candidates`` shuffled, then taken one kind at a time in :data:`KINDS` order."""
    by_kind: dict[str, list[tuple[str, Site]]] = {k: [] for k in KINDS}
    for item in candidates:
        by_kind[item[1].kind].append(item)
    for items in by_kind.values():
        rng.shuffle(items)
    out = []
    while any(by_kind.values()):
        for kind in KINDS:
            if by_kind[kind]:
                out.append(by_kind[kind].pop())
    return out


def _judge(run: TestRun, baseline: dict[str, Any], spec: RepoSpec) -> tuple[str, ...] | None:
    """The failing tests of a mutated run if it is a valid bug (see the module docstring)."""
    failed = run.with_outcome("failed")
    if run.timed_out or run.problem or run.with_outcome("error") or not failed:
        return None
    if any(t.split("::")[0] in spec.unstable for t in failed):
        return None
    if len(failed) > MAX_FAILING:
        return None
    if len(failed) + len(run.with_outcome("passed")) != baseline["passed"]:
        return None  # a test went missing or turned into a skip
    return tuple(failed)


def build_repo(
    spec: RepoSpec, count: int, seed: int = 0, log: Callable[[str], Any] = print
) -> tuple[dict[str, Any], list[Bug]]:
    """Validate up to ``count`` bugs of one repository (see the module docstring).

    Returns:
        ``(baseline, bugs)``: the pristine suite's counts and the bugs, in validation order.

    Raises:
        EnvUnavailableError: the repository is not fetched.
        RuntimeError: its pristine suite fails or is flaky.
    """
    runner = _Runner(spec)
    try:
        baseline = _baseline(runner)
        limit = max(20.0, 10 * baseline["seconds"])
        texts = {
            f: (runner.root / f).read_text(encoding="utf-8")
            for f in source_files(spec, runner.root)
        }
        candidates = [(f, s) for f, text in texts.items() for s in sites(text)]
        rng, bugs, per_function, tried = random.Random(f"{seed}-{spec.name}"), [], {}, 0
        for path, site in _interleaved(candidates, rng):
            if len(bugs) >= count:
                break
            if per_function.get((path, site.qualname), 0) >= 2:
                continue
            mutation = mutate(texts[path], site)
            if mutation is None:
                continue
            tried += 1
            run = runner.run({path: apply_mutation(texts[path], mutation)}, limit)
            failing = _judge(run, baseline, spec)
            if failing is None:
                continue
            again = runner.run({path: apply_mutation(texts[path], mutation)}, limit)
            if _judge(again, baseline, spec) != failing:
                continue  # the bug's failures depend on chance (e.g. a random cache's choices)
            messages = {t: run.tests[t][1][:1500] for t in failing[:_MESSAGES]}
            bugs.append(
                Bug(f"{spec.name}-{len(bugs):03d}", spec.name, path, mutation, failing, messages)
            )
            per_function[(path, site.qualname)] = per_function.get((path, site.qualname), 0) + 1
        log(f"{spec.key}: {len(bugs)} bugs from {tried} mutations ({len(candidates)} sites)")
        return baseline, bugs
    finally:
        runner.close()


def build_catalogue(
    per_repo: int = 36, seed: int = 0, repos: Iterable[RepoSpec] = REPOS, log: Callable = print
) -> dict[str, Any]:
    """Validate bugs in every repository and return the catalogue's JSON object (bugs in a
    ``seed``-shuffled order).

    Raises:
        EnvUnavailableError, RuntimeError: as :func:`build_repo`.
    """
    baselines, bugs = {}, []
    for spec in repos:
        baselines[spec.name], found = build_repo(spec, per_repo, seed, log)
        bugs += found
    random.Random(seed).shuffle(bugs)
    return {
        "about": "swe-repo-v0 bugs: one AST mutation each, validated against the repository's "
        "own pytest suite in the sandbox (python -m agentic_rl.envs.swe_repo.catalogue)",
        "seed": seed,
        "max_failing": MAX_FAILING,
        "repos": baselines,
        "bugs": [b.to_json() for b in bugs],
    }


def verify_bug(bug: Bug, runner: Any = None) -> str:
    """Re-run ``bug``: "" when exactly its recorded tests fail, else what differs.

    Args:
        runner: a ``_Runner`` of the bug's repository to reuse (one is made and closed if None).

    Raises:
        EnvUnavailableError: the repository is not fetched.
    """
    own = runner is None
    runner = runner or _Runner(get_repo(bug.repo))
    try:
        text = (runner.root / bug.file).read_text(encoding="utf-8")
        try:
            mutated = apply_mutation(text, bug.mutation)
        except ValueError as exc:
            return f"{bug.id}: {exc}"
        run = runner.run({bug.file: mutated}, 60.0)
        failed = tuple(run.with_outcome("failed"))
        if run.timed_out or run.problem or run.with_outcome("error"):
            return f"{bug.id}: the run did not complete ({run.problem or 'timeout or error'})"
        if set(failed) != set(bug.failing):
            return f"{bug.id}: failing tests {sorted(failed)[:5]} differ from {sorted(bug.failing)[:5]}"
        return ""
    finally:
        if own:
            runner.close()


def verify_catalogue(bugs: list[Bug], log: Callable = print) -> list[str]:
    """Re-run ``bugs`` (and each repository's pristine suite); the problems found (none: [])."""
    problems = []
    for spec in REPOS:
        mine = [b for b in bugs if b.repo == spec.name]
        if not mine:
            continue
        runner = _Runner(spec)
        try:
            if _baseline(runner)["passed"] != repo_tests(spec.name)["passed"]:
                problems.append(f"{spec.key}: the pristine suite's size changed")
            problems += [p for p in (verify_bug(b, runner) for b in mine) if p]
        finally:
            runner.close()
        log(f"{spec.key}: {len(mine)} bugs checked")
    return problems


def write_catalogue(data: dict[str, Any], path: Path = CATALOGUE_PATH) -> None:
    """Write :func:`build_catalogue`'s object to ``path``, one bug per line (readable diffs)."""
    data = dict(data)
    rows = ",\n".join(json.dumps(b, sort_keys=True) for b in data.pop("bugs"))
    head = json.dumps(data, sort_keys=True)[:-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{head}, "bugs": [\n{rows}\n]}}\n', encoding="utf-8")
