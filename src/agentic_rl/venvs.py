"""Where the side virtualenvs' interpreters are (``.venv-vllm``, ``.venv-verifiers``).

vLLM and verifiers cannot share the project's environment (their pins clash with it), so
``make install-vllm`` / ``make install-verifiers`` build them their own virtualenvs in the
project root, and the trainer runs their ``bin/python``. An interpreter the trainer runs (as
root, on many machines) must come from a place the user chose, never from a directory someone
else can write to: the lookup order is

1. the path given explicitly (a keyword argument, e.g. ``env.kwargs.python`` of a verifiers env);
2. the environment variable (``AGENTIC_RL_VLLM_PYTHON``, ``AGENTIC_RL_VERIFIERS_PYTHON``);
3. ``<project root>/<venv>/bin/python``, where the project root is the source checkout this
   package runs from (:func:`project_root`: the folder holding ``pyproject.toml`` and the
   ``Makefile`` next to ``src/agentic_rl``), i.e. where the Makefile builds the virtualenv.

Nothing else is searched: not the working directory and not its parents (a ``.venv-vllm``
planted in ``/tmp`` or a shared parent would otherwise be executed by whoever trains below it),
and not the parents of an installed package (``site-packages``' parents are not a project). An
installed package (a wheel) has no project root: point the environment variable at the
interpreter.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["project_root", "venv_python"]

_PACKAGE = Path(__file__).resolve().parent


def project_root(package: Path = _PACKAGE) -> Path | None:
    """The source checkout that holds ``package`` (``<root>/src/agentic_rl``): ``<root>`` when it
    has the project's ``pyproject.toml`` and ``Makefile``; None for an installed package. Never
    raises."""
    src = package.parent
    root = src.parent
    if src.name != "src" or not (root / "pyproject.toml").is_file():
        return None
    return root if (root / "Makefile").is_file() else None


def venv_python(
    explicit: str | os.PathLike | None, env_var: str, venv: str, *, package: Path = _PACKAGE
) -> tuple[Path | None, str]:
    """The interpreter of a side virtualenv (order in the module docstring), and where it was
    looked for.

    Args:
        explicit: a path the caller was given (None or "": not given).
        env_var: the environment variable that names the interpreter.
        venv: the virtualenv's folder name in the project root (``.venv-vllm``).
        package: the package folder whose project root is searched (tests use another).

    Returns:
        ``(path, "")`` when found; ``(None, why)`` with what was looked for otherwise. An
        explicit or environment path is returned as given when it is a file (the caller's
        choice), never replaced by the project's.
    """
    chosen = explicit or os.environ.get(env_var) or None
    if chosen is not None:
        path = Path(chosen).expanduser()
        source = "given" if explicit else f"${env_var}"
        return (path, "") if path.is_file() else (None, f"{path} ({source}) is not a file")
    root = project_root(package)
    if root is None:
        return None, f"${env_var} is not set and no project checkout holds {venv}"
    candidate = root / venv / "bin" / "python"
    if candidate.is_file():
        return candidate, ""
    return None, f"no {candidate} and ${env_var} is not set"
