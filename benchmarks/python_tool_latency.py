"""Latency of a trivial ``python`` tool call: warm sandboxed interpreter vs a cold process.

Both paths run ``x = 1 + 1`` N times in the same run:

- warm: :class:`agentic_rl.tools.sandbox.episode.EpisodeSandbox` keeps one interpreter alive inside
  the bwrap sandbox (or ``--backend unsafe_local``); a call is one JSON-line round trip;
- cold: ``subprocess.run([sys.executable, "-c", "x = 1 + 1"])`` per call, with no sandbox
  (a lower bound for any start-a-process-per-call design).

Prints p50/p99 per path and the cold/warm ratio (target: warm at least 10x faster at p50).
Usage: ``python benchmarks/python_tool_latency.py [--calls 200] [--backend bwrap]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, SandboxUnavailableError
from agentic_rl.tools.sandbox.episode import EpisodeSandbox


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> None:
    """Run both paths and print the table. Raises SandboxUnavailableError without bwrap."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cold-calls", type=int, default=50)
    parser.add_argument("--backend", default="bwrap", choices=["bwrap", "unsafe_local"])
    args = parser.parse_args()

    warm: list[float] = []
    with EpisodeSandbox(SandboxConfig(backend=args.backend)) as box:
        start = time.perf_counter()
        box.run_python("x = 1 + 1")  # first call starts the sandbox
        startup = time.perf_counter() - start
        for _ in range(args.calls):
            t = time.perf_counter()
            result = box.run_python("x = 1 + 1")
            warm.append(time.perf_counter() - t)
            assert result.ok, result
    cold: list[float] = []
    for _ in range(args.cold_calls):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "x = 1 + 1"], check=True)
        cold.append(time.perf_counter() - t)

    print(f"sandbox start-up (first call, {args.backend}): {startup * 1e3:.1f} ms")
    print(f"{'path':<32}{'calls':>7}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for name, xs in (
        (f"warm sandboxed ({args.backend})", warm),
        ("cold subprocess per call", cold),
    ):
        print(
            f"{name:<32}{len(xs):>7}{_percentile(xs, 50) * 1e3:>10.3f}"
            f"{_percentile(xs, 99) * 1e3:>10.3f}{statistics.mean(xs) * 1e3:>10.3f}"
        )
    ratio = _percentile(cold, 50) / _percentile(warm, 50)
    print(f"p50 ratio cold/warm: {ratio:.0f}x (target >= 10x): {'OK' if ratio >= 10 else 'MISSED'}")


if __name__ == "__main__":
    try:
        main()
    except SandboxUnavailableError as exc:  # no bubblewrap here: say so, no traceback
        sys.exit(f"error: {exc} (--backend unsafe_local times the interpreter without the sandbox)")
