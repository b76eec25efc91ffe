"""The real repositories of ``swe-repo-v0``: pinned PyPI source distributions and their test suites.

Each repository is a small, pure-Python project whose sdist on PyPI ships its own test suite,
which passes offline here in about a second (measured in the sandbox; ``benchmarks/swe_repo_step.py``).
The sdists are fetched **at install time**, never at run time, by version and checked against
a SHA-256 pin::

    python -m agentic_rl.envs.swe_repo fetch   # fetch all (pip download), verify, unpack
    python -m agentic_rl.envs.swe_repo check   # say which are present

``pip download --no-deps --no-binary :all: NAME==VERSION`` does the download (so pip's own
index, mirror and certificate settings apply), the archive's SHA-256 must equal the pin, and
it is unpacked (members checked to stay inside the target) into the user cache,
``$AGENTIC_RL_CACHE/swe-repo`` (else ``$XDG_CACHE_HOME/agentic-rl/swe-repo`` or
``~/.cache/agentic-rl/swe-repo``), one folder ``NAME-VERSION`` per repository. Without it the
env and its tests say how to fetch (:class:`~agentic_rl.errors.EnvUnavailableError`).

Per repository, :class:`RepoSpec` says where the library code lives (what bugs are injected
into, and what the grader takes from the agent's workspace), where the tests are, and the
files that make up the test harness (tests, ``conftest.py``, pytest configuration), which the
grader always takes from the pristine copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agentic_rl.errors import EnvUnavailableError

__all__ = [
    "HARNESS_NAMES",
    "REPOS",
    "RepoSpec",
    "cache_root",
    "fetch",
    "get_repo",
    "repo_dir",
]

#: file names that are part of the test harness wherever they are (pytest configuration and
#: start-up hooks): never graded from the agent's copy, and editing one is a risk event
HARNESS_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "setup.py",
        "sitecustomize.py",
        "usercustomize.py",
    }
)


@dataclass(frozen=True)
class RepoSpec:
    """One pinned repository.

    Attributes:
        name: the PyPI project name.
        version: the pinned version.
        sdist: the sdist's file name on PyPI.
        sha256: SHA-256 of that file.
        source: library paths relative to the repository root (folders or ``.py`` files); bugs
            are injected into their Python files and the grader takes them from the agent.
        tests: test paths relative to the root (folders or files): what the suite runs.
        pythonpath: folder put first on ``PYTHONPATH`` for the tests (``"src"`` for a src
            layout; ``""``: the root, which ``python -m pytest`` puts first anyway).
        size: ``"small"``, ``"medium"`` or ``"large"`` (library lines; the levels use it).
        unstable: test files whose test ids differ between machines (parameters ordered by a
            set holding ``None``, whose hash is its address in Python 3.11); a bug that fails
            one of their tests is not kept.
    """

    name: str
    version: str
    sdist: str
    sha256: str
    source: tuple[str, ...]
    tests: tuple[str, ...]
    pythonpath: str = ""
    size: str = "small"
    unstable: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``NAME-VERSION``, the folder name in the cache."""
        return f"{self.name}-{self.version}"

    def is_source(self, path: str) -> bool:
        """True for a library Python file (under :attr:`source`, not a test or harness file)."""
        p = PurePosixPath(path)
        if p.suffix != ".py" or self.is_harness(path):
            return False
        return any(p == PurePosixPath(s) or PurePosixPath(s) in p.parents for s in self.source)

    def is_harness(self, path: str) -> bool:
        """True for a test file or folder content, or a harness file (:data:`HARNESS_NAMES`,
        ``*.pth``) anywhere."""
        p = PurePosixPath(path)
        if p.name in HARNESS_NAMES or p.suffix == ".pth":
            return True
        return any(p == PurePosixPath(t) or PurePosixPath(t) in p.parents for t in self.tests)


#: the repositories (sizes by library lines: small < 1,200, medium < 2,000, large above)
REPOS: tuple[RepoSpec, ...] = (
    RepoSpec(
        "inflection",
        "0.5.1",
        "inflection-0.5.1.tar.gz",
        "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ("inflection",),
        ("test_inflection.py",),
    ),
    RepoSpec(
        "parse",
        "1.22.4",
        "parse-1.22.4.tar.gz",
        "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5",
        ("parse",),
        ("tests",),
    ),
    RepoSpec(
        "isodate",
        "0.7.2",
        "isodate-0.7.2.tar.gz",
        "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6",
        ("src/isodate",),
        ("tests",),
        "src",
        "medium",
        ("tests/test_date.py",),
    ),
    RepoSpec(
        "semver",
        "3.1.2",
        "semver-3.1.2.tar.gz",
        "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf",
        ("src/semver",),
        ("tests",),
        "src",
        "medium",
    ),
    RepoSpec(
        "cachetools",
        "8.0.2",
        "cachetools-8.0.2.tar.gz",
        "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
        ("src/cachetools",),
        ("tests",),
        "src",
        "medium",
    ),
    RepoSpec(
        "toolz",
        "1.2.0",
        "toolz-1.2.0.tar.gz",
        "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
        ("toolz",),
        ("toolz/tests",),
        "",
        "large",
    ),
    RepoSpec(
        "tabulate",
        "0.10.0",
        "tabulate-0.10.0.tar.gz",
        "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d",
        ("tabulate",),
        ("test",),
        "",
        "large",
    ),
)


def get_repo(name: str) -> RepoSpec:
    """The spec of repository ``name``.

    Raises:
        ValueError: no such repository (the message lists them).
    """
    for spec in REPOS:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown repository {name!r}; known: {', '.join(r.name for r in REPOS)}")


def cache_root() -> Path:
    """``$AGENTIC_RL_CACHE/swe-repo``, else ``$XDG_CACHE_HOME/agentic-rl/swe-repo`` or
    ``~/.cache/agentic-rl/swe-repo`` (not created). Never raises."""
    if os.environ.get("AGENTIC_RL_CACHE"):
        return Path(os.environ["AGENTIC_RL_CACHE"]) / "swe-repo"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "agentic-rl" / "swe-repo"


FETCH_HINT = "python -m agentic_rl.envs.swe_repo fetch"


def repo_dir(spec: RepoSpec) -> Path:
    """The unpacked repository's folder in the cache.

    Raises:
        EnvUnavailableError: it was not fetched (the message gives the command).
    """
    path = cache_root() / spec.key
    if not _marker(spec).is_file():
        raise EnvUnavailableError(
            f"swe-repo-v0: repository {spec.key} is not fetched; run `{FETCH_HINT}` "
            "(downloads the pinned sdists from PyPI into the user cache)"
        )
    return path


def _marker(spec: RepoSpec) -> Path:
    """The file that says ``spec`` was fetched whole (beside its folder; holds the SHA-256)."""
    return cache_root() / f"{spec.key}.sha256"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _unpack(archive: Path, target: Path) -> None:
    """Unpack the sdist's single top folder's content into ``target``.

    Raises:
        ValueError: a member is a link or device, or would land outside ``target``.
    """
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"{archive.name}: member {m.name!r} is not a file or folder")
        tar.extractall(target, members=members, filter="data")


def fetch(spec: RepoSpec, *, quiet: bool = True) -> Path:
    """Download, verify and unpack ``spec`` into the cache (nothing to do when present).

    Returns:
        The repository folder (:func:`repo_dir`).

    Raises:
        RuntimeError: pip failed (its output is in the message).
        ValueError: the archive's SHA-256 differs from the pin, or it holds links or paths
            leaving the target.
    """
    final = cache_root() / spec.key
    if _marker(spec).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        cmd += ["-d", tmp, f"{spec.name}=={spec.version}"] + (["-q"] if quiet else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        archive = Path(tmp) / spec.sdist
        if done.returncode != 0 or not archive.is_file():
            raise RuntimeError(f"pip download {spec.key} failed:\n{done.stdout}{done.stderr}")
        digest = _sha256(archive)
        if digest != spec.sha256:
            raise ValueError(f"{spec.sdist}: SHA-256 {digest} differs from the pin {spec.sha256}")
        unpacked = Path(tmp) / "unpacked"
        _unpack(archive, unpacked)
        (top,) = list(unpacked.iterdir())
        if final.exists():  # a half-finished earlier fetch
            shutil.rmtree(final)
        top.rename(final)
    _marker(spec).write_text(spec.sha256 + "\n")
    return final


def missing() -> list[RepoSpec]:
    """The repositories not in the cache yet. Never raises."""
    return [r for r in REPOS if not _marker(r).is_file()]
