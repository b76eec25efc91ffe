"""Tasks of ``swe-repo-v0``: a validated bug, a difficulty level, the issue text and the workspace.

Levels (:data:`LEVELS`) combine the size of the repository with how much the issue gives away:

=========  ======================  ===============================================================
level      repositories            the issue names
=========  ======================  ===============================================================
``easy``   small                   the failing test, its message, the file and the function
``medium`` small and medium        the failing test and its message
``hard``   all                     the message and how many tests fail (no test id, no file)
=========  ======================  ===============================================================

``reset(seed)`` plays level ``levels[seed % L]`` and bug ``pool[(seed // L) % N]`` of that
level's pool (the catalogue's bugs of its repositories, in the catalogue's shuffled order,
filtered by ``repos`` and ``split``). ``split="test"`` keeps every fifth bug of the catalogue
(index % 5 == 4), ``"train"`` the others, ``"all"`` every bug: so a run can hold bugs out.

The workspace is the repository with the bug, committed as the only commit of a git repository
(author ``agentic-rl``, a fixed date, so ``git diff`` shows the agent's changes and nothing
else), built on the host in a private folder once per bug and cached in memory.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from agentic_rl.envs.swe_repo.catalogue import Bug, load_catalogue
from agentic_rl.envs.swe_repo.mutations import apply_mutation
from agentic_rl.envs.swe_repo.repos import RepoSpec, get_repo, repo_dir
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.tools.sandbox.snapshot import WorkspaceImage

__all__ = [
    "LEVELS",
    "SPLITS",
    "Task",
    "buggy_files",
    "describe",
    "make_task",
    "task_pools",
    "workspace_image",
]

#: level -> repository sizes it draws from
LEVELS: dict[str, tuple[str, ...]] = {
    "easy": ("small",),
    "medium": ("small", "medium"),
    "hard": ("small", "medium", "large"),
}
SPLITS = ("all", "train", "test")
_MESSAGE_LINES, _MESSAGE_CHARS = 8, 500


@dataclass(frozen=True)
class Task:
    """One episode's task: the bug, its level and repository, and the issue shown."""

    bug: Bug
    level: str
    spec: RepoSpec
    issue: str


def _message(bug: Bug) -> str:
    text = next(iter(bug.messages.values()), "") or "(no message)"
    lines = text.strip().splitlines()[:_MESSAGE_LINES]
    return "\n".join(f"    {line}" for line in lines)[:_MESSAGE_CHARS]


def describe(bug: Bug, spec: RepoSpec, level: str) -> str:
    """The issue text of ``bug`` at ``level`` (see the module docstring). Never raises for a
    known level."""
    head = (
        f"Repository: {spec.name} {spec.version}, in your working directory "
        "(a git repository with one commit)."
    )
    others = len(bug.failing) - 1
    more = f" ({others} more test{'s' * (others != 1)} fail too.)" if others else ""
    tail = "Fix the bug in the library code (do not edit the tests), then call submit."
    if level == "hard":
        count = len(bug.failing)
        issue = (
            f"Issue: users report this error, and {count} test{'s' * (count != 1)} of the "
            f"suite fail{'s' * (count == 1)}:\n\n{_message(bug)}"
        )
        return f"{head}\n\n{issue}\n\n{tail}"
    test = bug.failing[0]
    issue = f"Issue: the test `{test}` fails:{more}\n\n{_message(bug)}"
    if level == "easy":
        where = f"The bug is in `{bug.file}`, in the function `{bug.mutation.function}`."
        return f"{head}\n\n{issue}\n\n{where} {tail}"
    return f"{head}\n\n{issue}\n\n{tail}"


def task_pools(
    levels: tuple[str, ...], repos: tuple[str, ...] | None = None, split: str = "all"
) -> dict[str, list[Bug]]:
    """``{level: bugs}`` for ``levels`` (see the module docstring).

    Raises:
        ValueError: an unknown level, repository or split, or a level whose pool is empty.
        EnvUnavailableError: a repository of a pool is not fetched.
    """
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown or not levels:
        raise ValueError(f"levels must be a non-empty subset of {list(LEVELS)}; got {list(levels)}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    wanted = None if repos is None else {get_repo(r).name for r in repos}
    bugs = load_catalogue()
    if split != "all":
        bugs = [b for i, b in enumerate(bugs) if (i % 5 == 4) == (split == "test")]
    pools = {}
    for level in levels:
        pool = [
            b
            for b in bugs
            if get_repo(b.repo).size in LEVELS[level] and (wanted is None or b.repo in wanted)
        ]
        if not pool:
            raise ValueError(f"level {level!r} has no bug in repositories {sorted(wanted or [])}")
        for name in sorted({b.repo for b in pool}):
            repo_dir(get_repo(name))  # EnvUnavailableError now, not at the first reset
        pools[level] = pool
    return pools


def make_task(seed: int, levels: tuple[str, ...], pools: dict[str, list[Bug]]) -> Task:
    """The task of ``seed`` (see the module docstring). Never raises for valid pools."""
    level = levels[seed % len(levels)]
    pool = pools[level]
    bug = pool[(seed // len(levels)) % len(pool)]
    spec = get_repo(bug.repo)
    return Task(bug, level, spec, describe(bug, spec, level))


_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox"}


@lru_cache(maxsize=64)
def buggy_files(bug: Bug) -> dict[str, bytes]:
    """``{path: bytes}`` of the repository with ``bug`` applied (no git data).

    Raises:
        EnvUnavailableError: the repository is not fetched, or its file no longer takes the
            mutation (a different version in the cache).
    """
    root = repo_dir(get_repo(bug.repo))
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    try:
        text = files[bug.file].decode("utf-8")
        files[bug.file] = apply_mutation(text, bug.mutation).encode("utf-8")
    except (KeyError, ValueError) as exc:
        raise EnvUnavailableError(
            f"swe-repo-v0: {bug.id} does not apply to the cached {bug.repo} ({exc}); "
            "re-fetch the repository"
        ) from None
    return files


_GIT_ENV = {
    "GIT_AUTHOR_NAME": "agentic-rl",
    "GIT_AUTHOR_EMAIL": "agentic-rl@localhost",
    "GIT_COMMITTER_NAME": "agentic-rl",
    "GIT_COMMITTER_EMAIL": "agentic-rl@localhost",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


@lru_cache(maxsize=16)
def workspace_image(bug: Bug) -> WorkspaceImage:
    """The episode's first workspace: :func:`buggy_files` committed in a fresh git repository.

    Raises:
        EnvUnavailableError: git is missing, or as :func:`buggy_files`.
    """
    files = buggy_files(bug)
    with tempfile.TemporaryDirectory(prefix="agentic-rl-swe-") as tmp:
        root = Path(tmp)
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        env = {**os.environ, **_GIT_ENV}
        commands = [
            ["git", "init", "-q", "--template=", "-b", "main"],
            ["git", "add", "-A"],
            ["git", "commit", "-q", "-m", f"{bug.repo} {get_repo(bug.repo).version}"],
        ]
        try:
            for cmd in commands:
                subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True)
        except FileNotFoundError:
            raise EnvUnavailableError("swe-repo-v0 needs git (apt-get install git)") from None
        (root / ".git" / "info").mkdir(exist_ok=True)
        (root / ".git" / "info" / "exclude").write_text("__pycache__/\n*.pyc\n.pytest_cache/\n")
        return WorkspaceImage.capture(root)
