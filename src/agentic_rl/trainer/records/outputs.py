"""What a finished training run leaves in its directory: the final model and ``summary.json``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentic_rl.allocator import active_allocator

if TYPE_CHECKING:
    from agentic_rl.trainer.run import Run


def export_model(run: Run) -> None:
    """Save the final model (LoRA adapters merged in) and the tokenizer to ``RUN_DIR/final_model``.

    ``run`` is the recipe's :class:`~agentic_rl.trainer.run.Run` (read only: the merged model is
    written, the run keeps its own).
    """
    model = run.model.merge_and_unload() if hasattr(run.model, "merge_and_unload") else run.model
    out = run.run_dir / "final_model"
    model.save_pretrained(out)
    run.tokenizer.save_pretrained(out)


def _env_summary(by_tag: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    """One mixture env's held-out figures from the eval rows' keys under ``prefix``
    (``eval/<env id>/``): success per tag, per level and the final reward components."""
    return {
        "success": {tag: row.get(f"{prefix}success") for tag, row in by_tag.items()},
        "success_by_level": {
            tag: {
                k.removeprefix(f"{prefix}success/"): v
                for k, v in row.items()
                if k.startswith(f"{prefix}success/")
            }
            for tag, row in by_tag.items()
        },
        "final_reward_components": {
            k.removeprefix(f"{prefix}reward/"): v
            for k, v in by_tag.get("final", {}).items()
            if k.startswith(f"{prefix}reward/")
        },
    }


def write_summary(run: Run, data_parallel: dict[str, Any] | None = None) -> None:
    """Write ``RUN_DIR/summary.json``: held-out success per eval tag (overall and per level), the
    final eval's reward components, the timings (seconds), the memory allocator the process ran
    under (:func:`agentic_rl.allocator.active_allocator`), where the policy trained
    (``placement``: device, its name, precision, sampler dtype), and under torchrun ``data_parallel``
    (``world_size`` and each rank's final-weights SHA-256, all equal). A mixture run adds
    ``envs``: per env id, the same ``success``, ``success_by_level`` and
    ``final_reward_components`` from its ``eval/<env id>/…`` keys."""
    by_tag = {row["tag"]: row for row in run.state.evals}
    summary = {
        "run_dir": str(run.run_dir),
        "success": {tag: row.get("eval/success") for tag, row in by_tag.items()},
        "success_by_level": {
            tag: {k.split("/")[-1]: v for k, v in row.items() if k.startswith("eval/success/")}
            for tag, row in by_tag.items()
        },
        "final_reward_components": {
            k[len("eval/reward/") :]: v
            for k, v in by_tag.get("final", {}).items()
            if k.startswith("eval/reward/")
        },
        "timings_seconds": run.state.timings,
        "allocator": active_allocator(),
        "placement": run.placement.describe(),  # device, GPU name, precision, sampler dtype
    }
    mix = run.config.env.mix
    if mix:
        summary["envs"] = {e.id: _env_summary(by_tag, f"eval/{e.id}/") for e in mix}
    if data_parallel:
        summary["data_parallel"] = data_parallel
    (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
