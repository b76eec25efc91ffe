"""Run the trainer's process under mimalloc instead of glibc's ``malloc``.

Why: an RL step allocates and frees the same large CPU tensors over and over (the update's
``[tokens, 49,152]`` logits, the tied embedding's 113 MB gradient, activations; the sampler's
per-step temporaries). glibc serves blocks above its mmap threshold (at most 32 MB) with a
fresh ``mmap`` and returns them with ``munmap`` on free, so every step pays a page fault per
4 KiB again, and it gives freed heap memory back to the OS. Measured on the GRPO benchmark's
step (``benchmarks/grpo_step_vs_trl.py``: SmolLM2-135M, 4 completions of 64 tokens, 2-core
Xeon): the update took 2.6–4.9 s per step under glibc and 1.6–1.9 s under mimalloc with
purging off; the rollout 4.1–5.0 s and 2.9–3.8 s. gperftools' tcmalloc gave about the same
(update 1.8–2.9 s) but ships only as a Debian package, while mimalloc ships on PyPI
(``cmeel-mimalloc``, MIT). Peak RSS: 3.80 GB against 3.69 GB under glibc.

mimalloc: Leijen, Zorn and de Moura, "Mimalloc: Free List Sharding in Action" (APLAS 2019).
``MIMALLOC_PURGE_DELAY=-1`` keeps freed pages mapped for reuse (the default purges them after
10 ms, which brings the page faults back: measured update 3.7–4.8 s).

A preloaded allocator must be in place before the process starts, so :func:`reexec_with_allocator`
re-executes the current command once with ``LD_PRELOAD`` set; the ``agentic-rl`` command and the
benchmarks call it first thing. ``AGENTIC_RL_ALLOCATOR=system`` turns it off. Linux only; where
the library is missing or cannot be loaded the process keeps glibc's allocator. Children inherit
``LD_PRELOAD``; Chromium does not start under it, so browsers are started without it
(:func:`agentic_rl.tools.browser.launch.browser_environment`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = [
    "ENV_SWITCH",
    "active_allocator",
    "allocator_env",
    "mimalloc_path",
    "reexec_with_allocator",
]

ENV_SWITCH = "AGENTIC_RL_ALLOCATOR"  # "mimalloc" (default) or "system"


def mimalloc_path() -> Path | None:
    """Path of the ``libmimalloc.so`` shipped by ``cmeel-mimalloc``, or None if not installed."""
    for key in ("purelib", "platlib"):
        lib = Path(sysconfig.get_paths()[key]) / "cmeel.prefix" / "lib"
        for name in ("libmimalloc.so.3", "libmimalloc.so"):
            if (lib / name).is_file():
                return lib / name
    return None


def _loads(path: Path) -> bool:
    """True if a child process starts with ``path`` preloaded (a broken library would make the
    dynamic loader print an error and carry on, or abort)."""
    env = {**os.environ, "LD_PRELOAD": str(path)}
    try:
        out = subprocess.run(["/bin/true"], env=env, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and not out.stderr


def allocator_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs a child process under mimalloc (see the module docstring).

    Returns a copy of ``base`` (default ``os.environ``) with the library prepended to
    ``LD_PRELOAD`` and ``MIMALLOC_PURGE_DELAY=-1`` unless the caller set one; unchanged when
    ``AGENTIC_RL_ALLOCATOR=system``, off Linux, when ``LD_PRELOAD`` already holds an allocator
    (a library whose name contains ``malloc``: mimalloc, jemalloc, tcmalloc), or when the
    library is missing or fails to load.

    Raises:
        ValueError: ``AGENTIC_RL_ALLOCATOR`` is set to something other than ``mimalloc`` or ``system``.
    """
    env = dict(os.environ if base is None else base)
    choice = env.get(ENV_SWITCH, "mimalloc").strip().lower() or "mimalloc"
    if choice not in ("mimalloc", "system"):
        raise ValueError(f"{ENV_SWITCH} must be 'mimalloc' or 'system', got {env[ENV_SWITCH]!r}")
    path = mimalloc_path()
    if choice == "system" or not sys.platform.startswith("linux") or path is None:
        return env
    preloaded = env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
    if any("malloc" in Path(lib).name for lib in preloaded if lib):
        return env  # mimalloc already, or an allocator the user chose (jemalloc, tcmalloc)
    if not _loads(path):
        return env
    env["LD_PRELOAD"] = ":".join(p for p in (str(path), env.get("LD_PRELOAD", "")) if p)
    env.setdefault("MIMALLOC_PURGE_DELAY", "-1")
    return env


def active_allocator() -> str:
    """``"mimalloc"`` if this process has mimalloc mapped, else ``"system"`` (read from
    ``/proc/self/maps``; ``"system"`` off Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "mimalloc" if "libmimalloc" in maps else "system"


def reexec_with_allocator() -> None:
    """Re-execute the running command under mimalloc, once; returns only if it does not.

    Call it before anything heavy is imported or started (threads, files): ``os.execve``
    replaces the process image, keeping the PID, the arguments (``sys.orig_argv``) and the
    open standard streams. Returns without doing anything when mimalloc is already active, is
    turned off or unavailable (:func:`allocator_env`), or after a re-exec that did not take.

    Raises:
        ValueError: a bad ``AGENTIC_RL_ALLOCATOR`` value.
    """
    if active_allocator() == "mimalloc":
        return
    env = allocator_env()
    if env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD"):
        return  # off, unavailable, or already preloaded (so the re-executed process stops here)
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *argv[1:]], env)
    except OSError:
        return
