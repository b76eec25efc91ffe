"""coq-proof-v0: the oracle on every lemma, and what one tactic step costs.

Two parts, both without a model:

1. Oracle: every lemma of every level played once through the env (reset, the reference
   proof and ``Qed.`` in one ``run_tactics`` call, the fresh ``coqc`` check); success per
   level and seconds per episode.
2. Latency of one episode's pieces, medians over ``--repeats``, each measured side by side with
   its peers in this run:
   - start: sandbox + coqtop + the prelude (``Require Import Arith Lia List``), up to the first
     tactic's reply;
   - tactic: one more tactic (``intros``/``lia`` alternately, a few ms of Coq work);
   - check: the final ``coqc`` on a fresh file in a new sandbox;
   for the ``bwrap`` sandbox, the ``unsafe_local`` backend (same driver, no namespaces), and a
   plain ``coqtop -emacs`` pipe on the host (no sandbox, no driver); ratios against the plain pipe.

Usage (under the heavy-job lock, about a minute)::

    python benchmarks/coq_proof_bench.py --repeats 10
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from agentic_rl.envs import make
from agentic_rl.envs.coq_proof.lemmas import PRELUDE, lemmas
from agentic_rl.envs.coq_proof.prover import ProofSession, check_proof, proof_file
from agentic_rl.envs.coq_proof.sentences import split_sentences
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.types import Action, ToolCall


def oracle_all() -> list[str]:
    """Play every lemma with the oracle; markdown rows per level."""
    env = make("coq-proof-v0", levels=[1, 2, 3])
    per_level: dict[int, list[tuple[bool, float]]] = defaultdict(list)
    try:
        for seed, lemma in enumerate(env.lemmas):
            started = time.perf_counter()
            env.reset(seed=seed)
            reply = json.loads(
                env.oracle_reply().removeprefix("<tool_call>").removesuffix("</tool_call>")
            )
            action = Action("", (ToolCall(reply["name"], reply["arguments"], "", "c0"),))
            *_, info = env.step(action)
            per_level[lemma.level].append(
                (bool(info.get("correct")), time.perf_counter() - started)
            )
    finally:
        env.close()
    rows = [
        "| level | lemmas | oracle success | seconds per episode (median) |",
        "|---|---|---|---|",
    ]
    for level, runs in sorted(per_level.items()):
        ok = sum(r[0] for r in runs)
        rows.append(
            f"| {level} | {len(runs)} | {ok}/{len(runs)} | {statistics.median(r[1] for r in runs):.2f} |"
        )
    return rows


class PlainCoqtop:
    """``coqtop -emacs`` on the host through a pipe: the peer without sandbox or driver."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["coqtop", "-q", "-emacs"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
        )
        self.buf = b""
        self._prompt()

    def _prompt(self) -> None:
        fd = self.proc.stdout.fileno()
        while b"</prompt>" not in self.buf:
            select.select([fd], [], [], 30)
            self.buf += os.read(fd, 65536)
        self.buf = self.buf.split(b"</prompt>", 1)[1]

    def send(self, sentence: str) -> None:
        self.proc.stdin.write(sentence.encode() + b"\n")
        self._prompt()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _plain(lemma, repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        started = time.perf_counter()
        coq = PlainCoqtop()
        for sentence in [*split_sentences(PRELUDE), lemma.declaration, "intros n."]:
            coq.send(sentence)
        out["start"].append(time.perf_counter() - started)
        started = time.perf_counter()
        coq.send("lia.")
        out["tactic"].append(time.perf_counter() - started)
        coq.close()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "Attempt.v"
            path.write_text(proof_file(lemma, ["intros n.", "lia."]))
            started = time.perf_counter()
            subprocess.run(["coqc", "-q", "Attempt.v"], cwd=folder, capture_output=True, check=True)
            out["check"].append(time.perf_counter() - started)
    return out


def _sandboxed(lemma, backend: str, repeats: int) -> dict[str, list[float]]:
    config = SandboxConfig(backend=backend, timeout_s=10.0)  # type: ignore[arg-type]
    out: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        session = ProofSession(lemma, config, 5)
        started = time.perf_counter()
        session.run("intros n.")
        out["start"].append(time.perf_counter() - started)
        for tactic in ("lia.", "idtac.", "idtac."):
            started = time.perf_counter()
            session.run(tactic)
            out["tactic"].append(time.perf_counter() - started)
        session.close()
        started = time.perf_counter()
        assert check_proof(lemma, ["intros n.", "lia."], config).passed
        out["check"].append(time.perf_counter() - started)
    return out


def latency(repeats: int) -> list[str]:
    """Median seconds of start, tactic and check per way of running Coq; markdown rows."""
    lemma = next(lem for lem in lemmas() if lem.name == "add_comm_1")
    ways = {
        "bwrap sandbox (the env)": _sandboxed(lemma, "bwrap", repeats),
        "unsafe_local (driver, no namespaces)": _sandboxed(lemma, "unsafe_local", repeats),
        "plain coqtop pipe on the host": _plain(lemma, repeats),
    }
    peer = ways["plain coqtop pipe on the host"]
    rows = [
        "| how Coq runs | start to first reply (s) | one tactic (ms) | fresh-file check (s) | "
        "start / plain | tactic / plain | check / plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in ways.items():
        start, tactic = statistics.median(m["start"]), statistics.median(m["tactic"])
        check = statistics.median(m["check"])
        rows.append(
            f"| {name} | {start:.2f} | {tactic * 1000:.1f} | "
            f"{check:.2f} | "
            f"{start / statistics.median(peer['start']):.2f} | "
            f"{tactic / statistics.median(peer['tactic']):.2f} | "
            f"{check / statistics.median(peer['check']):.2f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-oracle", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_oracle:
        print("\n".join(oracle_all()), flush=True)
        print()
    print("\n".join(latency(args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
