"""Every script in ``benchmarks/`` runs to its result line on tiny sizes, so none can rot unseen.

Each script runs as a user runs it (``python benchmarks/NAME.py ARGS`` in a subprocess) with the
arguments in :data:`SMOKE`: the tiny random Llama of ``tests/tiny_models.py`` instead of
SmolLM2 where the script takes a model, one or two episodes, steps or repeats, a few tokens. The
figures are meaningless at these sizes; what is checked is that the script runs end to end and
prints its result (``expect``). A script in ``benchmarks/`` without an entry fails
:func:`test_every_benchmark_has_a_smoke_entry`: add one line to :data:`SMOKE`.

What a script needs beyond the test extra is named in ``needs`` (:data:`NEEDS`): without it the
smoke run skips with the reason. Optional parts inside a script skip themselves with a printed
reason (TRL's side of ``grpo_step_vs_trl.py``); ``expect`` accepts that line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentic_rl.tools.sandbox.bwrap import bwrap_unavailable_reason

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


@dataclass(frozen=True)
class Smoke:
    """The smoke run of one benchmark script.

    Attributes:
        args: its command-line arguments; ``{model}`` is replaced by the tiny model's directory,
            ``{tmp}`` by a fresh temporary directory.
        expect: a regular expression its output (stdout and stderr) must match: the result line.
        needs: what it needs beyond the test extra, keys of :data:`NEEDS`.
        covered_by: instead of a run here, the test (``path::name``) that already runs the
            script end to end on tiny sizes.
        timeout_s: the most seconds the run may take.
    """

    args: tuple[str, ...] = ()
    expect: str = ""
    needs: tuple[str, ...] = ()
    covered_by: str = ""
    timeout_s: float = 180.0


def _missing_module(name: str, hint: str):
    def reason() -> str | None:
        return None if importlib.util.find_spec(name) else f"{name} is not installed: {hint}"

    return reason


def _coq() -> str | None:
    if shutil.which("coqtop") and shutil.which("coqc"):
        return None
    return "Coq (coqtop, coqc) not installed: apt-get install coq (`make test` does as root)"


def _swe_repos() -> str | None:
    from agentic_rl.envs.swe_repo.repos import missing

    absent = [spec.name for spec in missing()]
    if not absent and shutil.which("git"):
        return None
    return (
        f"swe-repo-v0 needs git and its repositories (missing: {absent}): apt-get install git; "
        "python -m agentic_rl.envs.swe_repo fetch (`make test` does both)"
    )


def _chromium() -> str | None:
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return None
    return "Debian chromium/chromium-driver not installed (`make test` installs them as root)"


#: what a smoke run may need -> why it cannot run here (None: it can)
NEEDS = {
    "bwrap": bwrap_unavailable_reason,
    "chromium": _chromium,
    "coq": _coq,
    "swe": _swe_repos,
    "web": _missing_module("flask", "pip install -e '.[web]'"),
    "miniwob": _missing_module("miniwob", "pip install -e '.[web]'"),
    "ray": _missing_module("ray", "pip install -e '.[ray]'"),
}

#: a tiny recipe for the scripts that train: no base evaluation, 1 task x 2 rollouts, every group
#: kept, 2 warm-up demonstrations (48 tokens: room for the oracle's replies), one held-out task
TINY_RECIPE = (
    "model.path='{model}'",
    "model.num_threads=1",
    "algorithm.tasks_per_step=1",
    "algorithm.group_size=2",
    "sampling.dynamic_sampling=false",
    "sampling.guidance='off'",
    "sampling.task_sampling='sequential'",
    "optim.minibatches=1",
    "rollout.max_new_tokens=48",
    "warmup.num_demos=2",
    "warmup.batch_size=2",
    "eval.base=false",
    "eval.size=1",
)


def _sets(*overrides: str) -> tuple[str, ...]:
    return tuple(arg for item in overrides for arg in ("--set", item))


#: benchmark script -> its smoke run. A new script needs a line here.
SMOKE: dict[str, Smoke] = {
    "async_step.py": Smoke(
        ("--steps", "1", *_sets(*TINY_RECIPE)), r"median step time ratio async / sync: \d"
    ),
    "bf16_mismatch.py": Smoke(
        ("--model", "{model}", "--episodes", "2"), r"mean \|Δ\| \d+x the fp32/fp32 floor"
    ),
    "calculator_exploration.py": Smoke(
        ("--tasks", "1", "--out", "{tmp}", *_sets(*TINY_RECIPE)), r"pass@G \d"
    ),
    "coq_proof_bench.py": Smoke(
        ("--repeats", "1", "--skip-oracle"),
        r"\| plain coqtop pipe on the host \| \d",
        needs=("bwrap", "coq"),
    ),
    "compare_credit.py": Smoke(
        covered_by="tests/benchmarks/test_compare_credit.py::test_compare_credit_tiny"
    ),
    # the vLLM column is off: its server takes a minute to start (tests/policy/test_vllm_server.py)
    "decode_throughput.py": Smoke(
        ("--model", "{model}", "--batches", "1", "--new-tokens", "4", "--repeats", "1")
        + ("--vllm", "off", "--bf16"),
        r"bf16 sampler vs fp32 trainer",
    ),
    "env_baselines.py": Smoke(
        ("--episodes", "1", "--envs", "calculator-v0", "--model", "{model}"),
        r"\| calculator-v0 \| \d+% ",
    ),
    "frozenlake_fixed_sequences.py": Smoke(("--maps", "3", "--horizon", "8"), r"oracle"),
    "game_baselines.py": Smoke(
        ("--episodes", "1", "--envs", "frozenlake-v0", "--model", "{model}")
        + ("--max-new-tokens", "8"),
        r"\| frozenlake-v0 \| \d+% win",
    ),
    # the CPU dry run of the GPU check (tiny shape); on a GPU it runs without --dry-run
    "gpu_check.py": Smoke(
        ("--device", "cpu", "--dry-run", "--out", "{tmp}/gpu_check.json"),
        r"== gpu_check on cpu \(tiny\)",
        timeout_s=240,
    ),
    "grpo_step_vs_trl.py": Smoke(
        ("--steps", "2", "--max-completion", "4", "--model", "{model}"),
        r"agentic-rl / TRL step time = \d|TRL side skipped: trl is not installed",
    ),
    "learning.py": Smoke(
        ("--seeds", "0", "--out", "{tmp}", "--resamples", "100")
        + _sets(*TINY_RECIPE, "algorithm.steps=1"),
        r"mean lift over 1 runs",
    ),
    "mixture_vs_single.py": Smoke(
        covered_by="tests/trainer/sampling/test_mixture.py::test_mixture_vs_single_analysis_runs"
    ),
    "miniwob_baselines.py": Smoke(
        ("--episodes", "1", "--tasks", "click-button", "--max-turns", "2", "--model", "{model}"),
        r"\| miniwob/click-button-v0 \| ",
        needs=("miniwob", "chromium"),
    ),
    "multiturn_cost.py": Smoke(
        ("--model", "{model}", "--episodes", "2", "--turns", "2", "--tokens-per-turn", "4")
        + ("--tool-words", "3", "--repeats", "1"),
        r"multi-turn cost: 8-turn / 1-turn = \d",
    ),
    "optimizer_step.py": Smoke(("--model", "{model}", "--repeats", "1"), r"fused=True"),
    "python_tool_latency.py": Smoke(
        ("--calls", "3", "--cold-calls", "2"), r"p50 ratio cold/warm: \d", needs=("bwrap",)
    ),
    "ray_env_workers.py": Smoke(
        (
            "--episodes",
            "2",
        ),
        r"ratio 2/1 workers: engine \d",
        needs=("ray", "bwrap"),
    ),
    "ray_generation_workers.py": Smoke(
        ("--model", "{model}", "--tasks", "1", "--group", "2", "--max-new-tokens", "4"),
        r"2 workers / 1 worker: \d",
        needs=("ray",),
    ),
    "swe_repo_oracle.py": Smoke(
        ("--repos", "inflection", "--limit", "1"),
        r"oracle: 1/1 resolved",
        needs=("bwrap", "swe"),
    ),
    "swe_repo_step.py": Smoke(
        ("--repos", "inflection", "--repeats", "1"),
        r"\| inflection-[\d.]+ \| \d+ \| [\d.]+ s \|",
        needs=("bwrap", "swe"),
    ),
    "update_step.py": Smoke(
        ("--model", "{model}", "--trajectories", "4", "--repeats", "1")
        + ("--micro-batch-size", "2", "--distinct", "2"),
        r"peak RSS",
    ),
    "web_shop_baselines.py": Smoke(
        ("--episodes", "1", "--max-turns", "4", "--model", "{model}"),
        r"\| model .* \(greedy\) \| \d+% ",
        needs=("web",),
    ),
}


def benchmark_scripts() -> list[str]:
    """The runnable scripts of ``benchmarks/``: those with a ``__main__`` block (the others are
    modules they import)."""
    return sorted(
        p.name for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in p.read_text()
    )


def test_every_benchmark_has_a_smoke_entry():
    missing = [name for name in benchmark_scripts() if name not in SMOKE]
    assert not missing, f"benchmarks without a smoke entry in {__file__}'s SMOKE: {missing}"
    gone = sorted(set(SMOKE) - set(benchmark_scripts()))
    assert not gone, f"SMOKE entries for scripts that no longer exist: {gone}"


@pytest.mark.parametrize("name", benchmark_scripts())
def test_benchmark_smoke(name, tiny_model_dir, tmp_path):
    smoke = SMOKE.get(name)
    if smoke is None:
        pytest.fail(f"{name} has no smoke entry in SMOKE (tests/benchmarks/test_smoke.py)")
    if smoke.covered_by:
        path, _, test = smoke.covered_by.partition("::")
        assert f"def {test}(" in (REPO / path).read_text(), f"{smoke.covered_by} not found"
        return
    for need in smoke.needs:
        reason = NEEDS[need]()
        if reason:
            pytest.skip(f"{name}: {reason}")
    args = [a.format(model=tiny_model_dir, tmp=tmp_path) for a in smoke.args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=smoke.timeout_s,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name} {' '.join(args)} exited {proc.returncode}:\n{out[-4000:]}"
    assert re.search(smoke.expect, out), f"{name}: no match for {smoke.expect!r} in:\n{out[-4000:]}"
