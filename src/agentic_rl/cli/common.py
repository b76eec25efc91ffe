"""Helpers shared by the trajectory and evaluation subcommands of ``agentic-rl``.

A run directory's config and records, the model loader behind ``--model``/``--logprobs``, the
record filters (``--phase``, ``--step``, ...) and a rich table printer. User errors raise
:class:`~agentic_rl.errors.AgenticRLError` subclasses, which :mod:`agentic_rl.cli.main` prints
as one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentic_rl.errors import ModelNotFoundError, RunDirError


def run_config(run_dir: Path):
    """The resolved config a run wrote into ``run_dir/config.toml``.

    Raises:
        RunDirError: ``run_dir`` has no ``config.toml``.
        ConfigError: the file does not load (as :func:`agentic_rl.config.load_config`).
    """
    from agentic_rl.config import load_run_config

    path = run_dir / "config.toml"
    if not path.is_file():
        raise RunDirError(f"no config.toml in {run_dir} (is it a run directory?)")
    return load_run_config(path)  # also a run written before a key moved


def find_record(run_dir: Path, trajectory: str) -> dict[str, Any]:
    """The stored record whose id is ``trajectory`` (or starts with it, when unique).

    Raises:
        RunDirError: no such trajectory in ``run_dir``, or the prefix matches several.
    """
    from agentic_rl.trajectories import open_run_store

    store = open_run_store(run_dir)
    found = list(store.read(trajectory_id=trajectory))
    if not found:
        ids = store.table().column("trajectory_id").to_pylist()
        matches = [i for i in ids if i.startswith(trajectory)]
        if len(matches) > 1:
            raise RunDirError(
                f"trajectory id prefix {trajectory!r} matches {len(matches)} trajectories"
            )
        found = list(store.read(trajectory_id=matches[0])) if matches else []
    if not found:
        raise RunDirError(f"no trajectory {trajectory!r} in {run_dir}")
    return found[0]


def load_model_spec(spec: str, *, device: str = "cpu"):
    """Load ``(model, tokenizer)`` from a model spec.

    ``spec`` is ``default``, a HF model folder, a ``.gguf`` file, a run directory (its
    ``final_model``), or a run checkpoint folder (``RUN_DIR/checkpoints/step-N``: the run's
    base model with the checkpoint's trainable weights; LoRA adapters are re-attached).

    Raises:
        ModelNotFoundError: nothing loadable at ``spec``; a checkpoint that does not fit its run's model;
            a corrupt weights file.
        RunDirError: a checkpoint file is truncated or corrupt (names it).
    """
    from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir

    path = Path(spec).expanduser()
    if (path / "trainable.safetensors").is_file():
        return _load_checkpoint(path, device)
    if (path / "final_model" / "config.json").is_file():
        path = path / "final_model"
    model_dir = resolve_model_dir(str(path) if path.exists() else spec)
    from safetensors import SafetensorError

    try:
        model = load_model(model_dir, device=device)
    except SafetensorError as exc:  # a truncated or overwritten weights file
        raise ModelNotFoundError(
            f"{model_dir}: corrupt model weights (truncated or overwritten?): {exc}"
        ) from None
    return model, load_tokenizer(model_dir)


def _load_checkpoint(path: Path, device: str):
    from agentic_rl.trainer.records.model_setup import model_from_checkpoint

    return model_from_checkpoint(path, run_config(path.parent.parent).model, device)


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Print ``rows`` as a rich table (floats to 4 significant digits, None as ``-``)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[_fmt(v) for v in row])
    Console().print(table)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def record_filters(args) -> dict[str, Any]:
    """The ``TrajectoryStore.read`` filters given on the command line (see :func:`add_filter_args`)."""
    return {
        k: v
        for k, v in {
            "phase": args.phase,
            "step": args.step,
            "env_id": args.env,
            "stop_reason": args.stop_reason,
            "min_reward": args.min_reward,
            "max_reward": args.max_reward,
        }.items()
        if v is not None
    }


def add_filter_args(p: argparse.ArgumentParser, *, phase: bool = True) -> None:
    """Add the record filters ``--phase --step --env --stop-reason --min-reward --max-reward``
    (without ``--phase`` when ``phase`` is false: the command defines its own)."""
    if phase:
        p.add_argument("--phase", choices=("warmup", "rl", "eval"), help="only this phase")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--env", help="only this env id")
    p.add_argument("--stop-reason", help="only this stop reason (terminated, max_turns, ...)")
    p.add_argument("--min-reward", type=float, help="reward >= this")
    p.add_argument("--max-reward", type=float, help="reward <= this")
