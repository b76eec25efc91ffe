"""Running a repository's pytest suite inside an episode sandbox, with a per-test report.

The tests run as ``python -m pytest`` in a subprocess of the sandbox's interpreter (bubblewrap:
no network, a private ``/tmp``, resource limits; :mod:`agentic_rl.tools.sandbox.bwrap`), in
``/workspace`` (the repository root), with:

- ``-p no:cacheprovider -o addopts=`` (no cache files; the projects' coverage options need
  plugins that are not installed), ``--color=no -q -rfE --tb=short``;
- ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (only pytest itself, whatever else the interpreter's
  environment holds), the repository's ``pythonpath`` first on ``PYTHONPATH``;
- a small report plugin (written to the sandbox's ``/tmp`` before every run) that records each
  test's outcome and its failure message (pytest's ``reprcrash`` line) as JSON;
- address-space randomisation off (``setarch -R``, where util-linux has it): some suites
  order parameters by ``hash(None)``, an address in Python 3.11, and would name their tests
  differently in every run;
- a wall-clock limit: the whole process group is killed after ``timeout_s``.

What the report does not protect against: the library code under test runs in the pytest
process, so code that patches pytest or the report plugin can forge results. The env
(:mod:`agentic_rl.envs.swe_repo.env`) grades from a pristine copy of the tests and flags source
changes that reach for the test machinery (:data:`SUSPICIOUS`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from agentic_rl.tools.sandbox.episode import EpisodeSandbox

__all__ = ["PYTEST_ARGS", "SUSPICIOUS", "TestRun", "run_pytest"]

#: options of every run (see the module docstring)
PYTEST_ARGS = (
    "-p",
    "no:cacheprovider",
    "-o",
    "addopts=",
    "--color=no",
    "-q",
    "-rfE",
    "--tb=short",
)

_PLUGIN = """
import json, os

_OUT = os.environ["AGENTIC_RL_SWE_REPORT"]
_RESULTS = {}


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(report.longrepr or "")[-1500:]


def pytest_runtest_logreport(report):
    node = report.nodeid
    if report.failed:
        if _RESULTS.get(node, ["", ""])[0] != "failed":
            _RESULTS[node] = ["failed", _message(report)]
    elif report.skipped:
        _RESULTS.setdefault(node, ["skipped", ""])
    elif report.when == "call":
        _RESULTS.setdefault(node, ["passed", ""])


def pytest_collectreport(report):
    if report.failed:
        _RESULTS[report.nodeid or "<collection>"] = ["error", _message(report)]


def pytest_sessionfinish(session, exitstatus):
    with open(_OUT, "w") as f:
        json.dump({"exitstatus": int(exitstatus), "tests": _RESULTS}, f)
"""

_RUNNER = """
import json as _j, os as _o, shutil as _sh, signal as _s, subprocess as _sp, sys as _y, time as _t
_o.makedirs("/tmp/agentic_swe", exist_ok=True)
with open("/tmp/agentic_swe/agentic_swe_report.py", "w") as _f:
    _f.write({plugin!r})
try:
    _o.unlink("/tmp/agentic_swe/report.json")
except FileNotFoundError:
    pass
_env = dict(_o.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", COLUMNS="160",
            AGENTIC_RL_SWE_REPORT="/tmp/agentic_swe/report.json",
            PYTHONPATH={pythonpath!r} + "/tmp/agentic_swe")
_t0 = _t.monotonic()
_aslr = ["setarch", "-R"] if _sh.which("setarch") else []
_p = _sp.Popen([*_aslr, _y.executable, "-m", "pytest", *{args!r}], cwd="/workspace", env=_env,
               stdout=_sp.PIPE, stderr=_sp.STDOUT, start_new_session=True)
try:
    _out, _late = _p.communicate(timeout={timeout!r})[0], False
except _sp.TimeoutExpired:
    _o.killpg(_p.pid, _s.SIGKILL)
    _out, _late = _p.communicate()[0], True
try:
    with open("/tmp/agentic_swe/report.json") as _f:
        _rep = _j.load(_f)
except (OSError, ValueError):
    _rep = None
_j.dumps([_p.returncode, _out.decode("utf-8", "replace")[-60000:], _rep, _late,
          _t.monotonic() - _t0])
"""


@dataclass(frozen=True)
class TestRun:
    """The outcome of one pytest run.

    Attributes:
        returncode: pytest's exit status (0 all passed, 1 some failed, 2 interrupted, 4 usage
            error, 5 no tests collected; negative: killed by a signal).
        output: pytest's console output (stdout and stderr), its last 60,000 characters.
        tests: ``{node id: (outcome, message)}``, outcome ``passed``, ``failed``, ``skipped`` or
            ``error`` (a collection error, keyed by the file); empty when no report came back.
        timed_out: the run passed its time limit and was killed.
        duration_s: wall-clock seconds inside the sandbox.
        problem: why the run gave no report (the sandbox failed, the interpreter died), else "".
    """

    returncode: int | None
    output: str
    tests: dict[str, tuple[str, str]] = field(default_factory=dict)
    timed_out: bool = False
    duration_s: float = 0.0
    problem: str = ""

    def with_outcome(self, outcome: str) -> dict[str, str]:
        """``{node id: message}`` of the tests with ``outcome``, in run order. Never raises."""
        return {k: m for k, (o, m) in self.tests.items() if o == outcome}

    @property
    def reported(self) -> bool:
        """True when the plugin's report came back (the session reached its end)."""
        return bool(self.tests) or (self.returncode == 0 and not self.problem)


def run_pytest(
    box: EpisodeSandbox, targets: list[str], pythonpath: str = "", timeout_s: float = 60.0
) -> TestRun:
    """Run pytest on ``targets`` (paths or node ids; [] = the configured test paths) in ``box``.

    Args:
        box: the sandbox whose workspace holds the repository.
        targets: pytest arguments after the fixed options (:data:`PYTEST_ARGS`); callers make
            sure none is an option.
        pythonpath: folder relative to the repository root put first on ``PYTHONPATH``.
        timeout_s: wall-clock limit of the pytest process (the sandbox's own call limit must be
            longer).

    Returns:
        A :class:`TestRun`; a sandbox call that died gives one with ``problem`` set.

    Raises:
        SandboxUnavailableError, SandboxError: the sandbox cannot start.
    """
    path = f"/workspace/{pythonpath}:" if pythonpath else ""
    code = _RUNNER.format(
        plugin=_PLUGIN,
        pythonpath=path,
        args=[*PYTEST_ARGS, "-p", "agentic_swe_report", *targets],
        timeout=float(timeout_s),
    )
    result = box.run_python(code)
    if result.value is None:
        why = result.stderr.strip()[-500:] or result.render()[-500:]
        return TestRun(None, "", problem=f"the test run did not finish: {why}")
    returncode, output, report, late, seconds = json.loads(ast.literal_eval(result.value))
    tests = {k: (v[0], v[1]) for k, v in ((report or {}).get("tests") or {}).items()}
    return TestRun(returncode, output, tests, bool(late), float(seconds))


#: references to the test machinery or process exits in library code (a heuristic guard, since
#: library code runs inside the test process; :mod:`agentic_rl.envs.swe_repo.grading` uses it)
SUSPICIOUS = re.compile(
    r"\b(?:_?pytest|sys\.modules|atexit|os\._exit|sys\.exit|SystemExit|builtins|"
    r"agentic_swe_report|AGENTIC_RL_SWE_REPORT|sys\._getframe|inspect\.stack)\b"
)
