"""``agentic-rl view`` and ``agentic-rl export``, and :func:`add_subcommands`, which registers the
commands that read recorded trajectories (``replay``, ``view``, ``export``, ``compare``).

:mod:`agentic_rl.cli.main` calls :func:`add_subcommands`; ``replay`` lives in
:mod:`agentic_rl.cli.replay`, ``eval`` and ``compare`` in :mod:`agentic_rl.cli.evaluation`, the
shared helpers in :mod:`agentic_rl.cli.common`. User errors raise
:class:`~agentic_rl.errors.AgenticRLError` subclasses, which ``cli.main`` prints as one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentic_rl.cli.common import add_filter_args, load_model_spec, record_filters, run_config
from agentic_rl.cli.evaluation import add_compare_parser, run_evaluation
from agentic_rl.cli.replay import add_replay_parser
from agentic_rl.errors import AgenticRLError, RunDirError

# load_model_spec and run_evaluation are re-exported: they were first defined here
__all__ = ["add_subcommands", "load_model_spec", "run_evaluation"]


def _decoder(run_dir: Path):
    """Token id -> text with the run's tokenizer (None when it cannot be loaded)."""
    from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir

    try:
        folder = run_dir / "final_model"
        tok = load_tokenizer(
            folder
            if (folder / "config.json").is_file()
            else resolve_model_dir(run_config(run_dir).model.path)
        )
    except (AgenticRLError, OSError, ValueError):
        return None
    return lambda i: tok.decode([i])


def _cmd_view(args) -> int:
    from agentic_rl.trajectories import open_run_store
    from agentic_rl.trajectories.viewer import serve, write_view

    run_dir = Path(args.run_dir)
    records = list(open_run_store(run_dir).read(**record_filters(args)))
    if args.limit:
        records = records[-args.limit :]
    out = Path(args.out) if args.out else run_dir / "view.html"
    write_view(
        out,
        records,
        None if args.no_tokens else _decoder(run_dir),
        title=f"{run_dir.name}: trajectories",
    )
    print(f"wrote {out} ({len(records)} trajectories)")
    if args.serve is not None:
        serve(out, args.serve)
    return 0


def _cmd_export(args) -> int:
    from agentic_rl.trajectories import open_run_store
    from agentic_rl.trajectories.export import (
        DEFAULT_PHASES,
        PHASES,
        export_records,
        select_records,
    )

    phases = args.phase or DEFAULT_PHASES
    filters = {k: v for k, v in record_filters(args).items() if k != "phase"}
    chosen = select_records(
        open_run_store(Path(args.run_dir)).read(**filters),
        phases=phases,
        only_success=args.only_success,
    )
    left = ", ".join(f"{phase} {n}" for phase, n in sorted(chosen.left_out.items()))
    try:
        path = export_records(chosen.rows, args.out)
    except ValueError as exc:
        hint = f" of phase {','.join(phases)}; other phases match: {left}" if left else ""
        raise RunDirError(
            f"{exc}{' (--only-success)' if args.only_success else ''}{hint}"
        ) from None
    kept = ", ".join(f"{phase} {n}" for phase, n in sorted(chosen.kept.items()))
    guided = f", of which {chosen.guided} oracle-guided" if chosen.guided else ""
    print(f"wrote {path} ({len(chosen.rows)} trajectories: {kept}{guided})")
    if left:
        print(f"left out: {left} (--phase {','.join(PHASES)} includes every phase)")
    return 0


def _phases(text: str) -> tuple[str, ...]:
    """``--phase rl,warmup``: a comma-separated list of phases (argparse type)."""
    from agentic_rl.trajectories.export import PHASES

    phases = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    wrong = [p for p in phases if p not in PHASES]
    if wrong or not phases:
        raise argparse.ArgumentTypeError(
            f"phases are a comma-separated list of {', '.join(PHASES)}, got {text!r}"
        )
    return phases


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register ``replay``, ``view``, ``export`` and ``compare`` on the ``agentic-rl`` parser."""
    add_replay_parser(sub)
    p = sub.add_parser("view", help="write a self-contained HTML viewer of a run's trajectories")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", help="HTML file (default RUN_DIR/view.html)")
    p.add_argument(
        "--serve", type=int, metavar="PORT", help="then serve it on http://127.0.0.1:PORT/"
    )
    p.add_argument(
        "--limit", type=int, default=2000, help="newest N matching trajectories (0 = all)"
    )
    p.add_argument(
        "--no-tokens", action="store_true", help="show token ids instead of decoding them"
    )
    add_filter_args(p)
    p.set_defaults(fn=_cmd_view)
    p = sub.add_parser(
        "export", help="export trajectories as a HF-datasets Parquet dataset (SFT / offline RL)"
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", required=True, help="output dataset folder")
    p.add_argument(
        "--only-success", action="store_true", help="only trajectories whose outcome reached 1"
    )
    p.add_argument(
        "--phase",
        type=_phases,
        metavar="PHASES",
        help="comma-separated phases to export: rl (the RL rollouts, default), warmup (the env "
        "oracle's demonstrations), eval (the held-out evaluation: not for training)",
    )
    add_filter_args(p, phase=False)
    p.set_defaults(fn=_cmd_export)
    add_compare_parser(sub)
