"""``agentic-rl doctor``: what this machine can run, and what to install for the rest.

One line per check, each naming what it enables: the accelerator torch sees, the bubblewrap
sandbox (Python and code tools), Chromium and ChromeDriver (web envs), Coq (``coq-proof-v0``),
the MCP client (MCP tool servers), the vLLM and verifiers virtualenvs, and the free disk where a
run writes (checkpoints of the default model are ~0.5 GB each). Every check reuses the probe the
feature itself runs, so the verdict is the feature's own. Nothing is installed, downloaded or
converted; the command takes a few seconds (the sandbox probe starts one ``bwrap``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Check", "add_doctor_parser", "cmd_doctor", "run_checks"]

#: below this many GiB free, the disk check fails (a run's checkpoints and a test run's scratch)
MIN_FREE_GIB = 5.0


@dataclass(frozen=True)
class Check:
    """One verdict of :func:`run_checks`.

    Attributes:
        name: what was checked (``sandbox``, ``browser``, ...).
        ok: whether it is usable here.
        detail: what was found when ok, else why not and what to install.
        enables: what needs it.
    """

    name: str
    ok: bool
    detail: str
    enables: str


def _accelerator() -> tuple[bool, str]:
    import torch

    if torch.cuda.is_available():
        names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
        return (
            True,
            f"torch {torch.__version__}, {torch.cuda.device_count()} CUDA device(s): {', '.join(names)}",
        )
    return False, f"torch {torch.__version__} sees no CUDA device; training runs on the CPU"


def _sandbox() -> tuple[bool, str]:
    from agentic_rl.tools.sandbox.bwrap import bwrap_unavailable_reason

    reason = bwrap_unavailable_reason()
    return reason is None, reason or f"bubblewrap at {shutil.which('bwrap')}"


def _browser() -> tuple[bool, str]:
    from agentic_rl.tools.browser.launch import BrowserUnavailableError, find_browser

    try:
        chromium, driver = find_browser()
    except BrowserUnavailableError as exc:
        return False, str(exc)
    return True, f"{chromium}, {driver}"


def _coq() -> tuple[bool, str]:
    from agentic_rl.envs.coq_proof.prover import coq_problem

    problem = coq_problem()
    return problem is None, problem or f"coqtop at {shutil.which('coqtop')}"


def _mcp() -> tuple[bool, str]:
    from agentic_rl.tools.mcp import mcp_unavailable_reason

    reason = mcp_unavailable_reason()
    return reason is None, reason or "fastmcp is installed"


def _vllm() -> tuple[bool, str]:
    from agentic_rl.policy.vllm_server import find_vllm_python, vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    return not reason, reason or f"vLLM in {find_vllm_python()}"


def _verifiers() -> tuple[bool, str]:
    from agentic_rl.envs.adapters.verifiers_client import find_verifiers_python
    from agentic_rl.errors import AgenticRLError

    try:
        return True, f"verifiers in {find_verifiers_python()}"
    except AgenticRLError as exc:
        return False, str(exc)


def _disk(where: Path) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        folder = where.resolve()
        while not folder.exists():  # a run directory not made yet: the disk it will be on
            folder = folder.parent
        places = {str(folder), tempfile.gettempdir()}
        free = {p: shutil.disk_usage(p).free / 2**30 for p in sorted(places)}
        text = ", ".join(f"{gib:.1f} GiB free at {p}" for p, gib in free.items())
        if min(free.values()) < MIN_FREE_GIB:
            return False, f"{text}; under {MIN_FREE_GIB:g} GiB a run's checkpoints may not fit"
        return True, text

    return check


def run_checks(where: Path = Path(".")) -> list[Check]:
    """Every check, in a fixed order; ``where``: the folder runs write to (its disk is checked).

    A probe that raises (a broken install) fails its own check with the error's text, never the
    command. Never raises.
    """
    probes: list[tuple[str, Callable[[], tuple[bool, str]], str]] = [
        ("accelerator", _accelerator, "GPU training (optional: every command runs on the CPU)"),
        (
            "sandbox",
            _sandbox,
            "the python, code and proof tools of math-python-v0, code-repair-v0, swe-repo-v0, coq-proof-v0, rg/*",
        ),
        ("browser", _browser, "web envs and browser tools: web-shop-v0, miniwob/*"),
        ("coq", _coq, "coq-proof-v0 (with the sandbox)"),
        ("mcp", _mcp, "MCP tool servers (the [tools.mcp] config table)"),
        ("vllm", _vllm, "rollout.backend = 'vllm' (make install-vllm)"),
        ("verifiers", _verifiers, "verifiers/<taskset>-v0 (make install-verifiers)"),
        ("disk", _disk(where), "run directories, checkpoints, the test suite's scratch"),
    ]
    out = []
    for name, probe, enables in probes:
        try:
            ok, detail = probe()
        except Exception as exc:  # noqa: BLE001 - a broken install is a failed check, not a crash
            ok, detail = False, f"the probe raised {type(exc).__name__}: {exc}"
        out.append(Check(name, ok, detail, enables))
    return out


def cmd_doctor(args) -> int:
    """Print the checks (``--json``: one JSON list of :class:`Check` dicts). Exit code 0, or 1
    with ``--strict`` when a check other than the accelerator failed."""
    checks = run_checks(Path(args.output_dir))
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        for c in checks:
            print(f"{'ok' if c.ok else 'missing':<8} {c.name:<12} {c.detail}")
            print(f"{'':<8} {'':<12} needed by: {c.enables}")
    failed = [c for c in checks if not c.ok and c.name != "accelerator"]
    return 1 if args.strict and failed else 0


def add_doctor_parser(sub) -> None:
    """Add ``doctor`` to the ``agentic-rl`` subcommands (``sub``: argparse's subparsers)."""
    p = sub.add_parser(
        "doctor", help="what this machine can run (sandbox, browser, Coq, MCP, vLLM, GPU, disk)"
    )
    p.add_argument("--json", action="store_true", help="print the checks as one JSON list")
    p.add_argument("--strict", action="store_true", help="exit 1 when a check (not the GPU) fails")
    p.add_argument(
        "--output-dir",
        default=".",
        metavar="DIR",
        help="where runs will write (its disk is checked)",
    )
    p.set_defaults(fn=cmd_doctor)
