"""Command line: ``agentic-rl train | eval | envs | audit | replay | view | export | compare |
serve-policy``.

Under ``torchrun --nproc-per-node W -m agentic_rl.cli train …`` the W processes train data-parallel
(:mod:`agentic_rl.trainer.parallel.scale_out`); rank 0 alone prints progress and writes the run directory.

Errors caused by user input (a wrong config key, an unknown env id, a missing model path or
run directory) print one line ``error: …`` naming the culprit and exit with status 2. A command
whose standard output is closed by its reader (``agentic-rl envs | head``) stops quietly with
status 141 (:mod:`agentic_rl.cli.pipes`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from agentic_rl.cli.doctor import add_doctor_parser
from agentic_rl.cli.envs_list import cmd_envs
from agentic_rl.cli.evaluation import add_eval_arguments, cmd_eval
from agentic_rl.cli.pipes import quiet_closed_stdout, stdout_closed
from agentic_rl.cli.serve import add_agent_argument, add_serve_parser, agent_overrides
from agentic_rl.cli.trajectories import add_subcommands
from agentic_rl.errors import AgenticRLError


def _quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


class _RichProgress:
    """Progress bars for the recipe's phases (one bar per phase)."""

    def __init__(self, console, start=None):
        """``start(run_dir) -> str``: the line logged when the run directory exists (phase
        ``start``, :func:`~agentic_rl.trainer.records.run_dir.start_line`)."""
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = console
        self.bars = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[phase]:<7}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self.tasks: dict[str, int] = {}
        self.start = start

    def __enter__(self):
        self.bars.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bars.__exit__(*exc)

    def __call__(self, phase: str, done: int, total: int, message: str) -> None:
        if phase == "start":  # the first line: the run directory (NAME-2 when NAME was taken)
            if self.start is not None:
                self.console.log(self.start(Path(message)), markup=False)
            return
        if phase == "eval":
            if done == total:
                self.console.log(f"[green]eval[/green] {message}")
            else:
                self.console.log(f"[cyan]eval[/cyan] {message} …")
            return
        if phase not in self.tasks:
            self.tasks[phase] = self.bars.add_task(message, total=total, phase=phase)
        self.bars.update(self.tasks[phase], completed=done, total=total, description=message)


def _summary_table(run_dir: Path, console) -> None:
    from rich.table import Table

    summary = json.loads((run_dir / "summary.json").read_text())
    by_column = summary["success_by_level"]  # a mixture: each env's success instead of levels
    envs = summary.get("envs") or {}
    if envs:
        by_column = {t: {e: envs[e]["success"].get(t) for e in envs} for t in summary["success"]}
    levels = list(envs) or sorted({lv for row in by_column.values() for lv in row})
    table = Table(title="Held-out success (greedy)")
    table.add_column("model")
    table.add_column("overall", justify="right")
    for lv in levels:
        table.add_column(lv, justify="right")
    names = {"base": "base model", "warmup": "after warm-up", "final": "after RL"}
    for tag, overall in summary["success"].items():
        by_level = by_column.get(tag, {})
        cells = [f"{by_level[lv]:.0%}" if by_level.get(lv) is not None else "-" for lv in levels]
        table.add_row(names.get(tag, tag), f"{overall:.0%}", *cells)
    console.print(table)
    comps = Table(title="Reward components after RL (held-out means)")
    comps.add_column("component")
    comps.add_column("value", justify="right")
    for name, value in summary["final_reward_components"].items():
        comps.add_row(name, f"{value:.4g}")
    console.print(comps)
    times = summary["timings_seconds"]
    console.print(
        "time: " + ", ".join(f"{k.replace('_seconds', '')} {v:.0f}s" for k, v in times.items())
    )
    console.print(f"run directory: [bold]{run_dir}[/bold]")
    console.print(f"report: [bold]{run_dir / 'report.html'}[/bold]")


def env_overrides(env_id: str, sets: list[str]) -> list[str]:
    """``--set`` items that ``train --env ID`` puts before the user's own (later items win).

    Sets ``env.id``; for an env other than the default one also its recipe defaults
    (:func:`~agentic_rl.config.env_recipe.env_recipe_defaults`: ``name`` (``<id>-grpo``),
    ``warmup.env_kwargs`` (default ``{}``: the default warm-up level belongs to calculator-v0)
    and the env's ``recipe_overrides``, e.g. a larger ``rollout.max_new_tokens`` for envs whose
    oracle writes code), unless the user sets a key. They replace the config file's values; an
    ``env.id`` given in the file or by ``--set`` gets the same defaults for the keys left unset.

    Raises:
        UnknownEnvError: the id is not registered.
    """
    from agentic_rl.config.env_recipe import env_recipe_defaults

    out = [f"env.id={json.dumps(env_id)}"]
    wanted = env_recipe_defaults(env_id)
    user_keys = {s.split("=", 1)[0].strip() for s in sets}

    def inline(value) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k} = {inline(v)}" for k, v in value.items()) + "}"
        return json.dumps(value)

    out += [
        f"{key}={inline(value)}"
        for key, value in wanted.items()
        if not any(k == key or k.startswith(key + ".") for k in user_keys)
    ]
    return out + sets


_env_overrides = env_overrides  # the name benchmarks/compare_credit.py imports


def _cmd_train(args) -> int:
    from rich.console import Console

    from agentic_rl.config import load_config
    from agentic_rl.trainer.recipe import train

    console = Console()
    resume = Path(args.resume) if args.resume else None
    if resume is not None and not resume.is_dir():
        raise AgenticRLError(f"run directory not found: {resume}")
    if resume is not None and (args.config or args.set or args.model):
        raise AgenticRLError(
            "--resume continues a run with its own config.toml; --config/--set/--model cannot be "
            "combined with it"
        )
    sets = env_overrides(args.env, args.set) if args.env else args.set
    if resume is not None and args.env:
        raise AgenticRLError(
            "--resume continues a run with its own config.toml; --env cannot be combined with it"
        )
    sets = sets + scale_overrides(args) + backend_overrides(args) + model_overrides(args)
    sets = sets + agent_overrides(args, resume)  # --agent: agent.function
    if resume is not None and (args.rollout_backend is not None or args.base_url is not None):
        raise AgenticRLError(
            "--resume continues a run with its own config.toml ([rollout] included); "
            "--rollout-backend/--base-url cannot be combined with it"
        )
    if resume is not None and any(
        x is not None for x in (args.num_env_workers, args.ray_address, args.num_generation_workers)
    ):
        raise AgenticRLError(
            "--resume continues a run with its own config.toml ([scale] included); "
            "--num-env-workers/--num-generation-workers/--ray-address cannot be combined with it"
        )
    config = None if resume else load_config(args.config, sets)
    if config is not None:
        from agentic_rl.trainer.recipe import validate

        validate(config)  # wrong env id / kwargs / model path: one error line before any output
    if int(os.environ.get("RANK", "0")) > 0:  # torchrun: ranks > 0 train silently, rank 0 reports
        train(config, resume=resume)
        return 0

    def start(run_dir: Path) -> str:
        from agentic_rl.cli.common import run_config
        from agentic_rl.policy.device import placement_of
        from agentic_rl.trainer.records.run_dir import start_line

        cfg = config or run_config(run_dir)
        device = placement_of(cfg.model).summary_line()
        return start_line(cfg, run_dir, resumed=resume is not None, device=device)

    with _RichProgress(console, start) as progress:
        run_dir = train(config, resume=resume, progress=progress)
    _summary_table(run_dir, console)
    return 0


def scale_overrides(args) -> list[str]:
    """``--set`` items of ``train --num-env-workers N --num-generation-workers M --ray-address
    ADDR`` (``[scale]`` keys)."""
    out = []
    if args.num_env_workers is not None:
        out.append(f"scale.num_env_workers={args.num_env_workers}")
    if getattr(args, "num_generation_workers", None) is not None:
        out.append(f"scale.num_generation_workers={args.num_generation_workers}")
    if args.ray_address is not None:
        out.append(f"scale.ray_address={json.dumps(args.ray_address)}")
    return out


def model_overrides(args) -> list[str]:
    """``--set`` items of ``train --model PATH`` (``model.path``), and a named model's recipe
    (:attr:`~agentic_rl.policy.named_models.NamedModel.recipe`, e.g. gemma3-270m's learning
    rate) for the keys ``--set`` does not give, whether ``--model`` or ``--set model.path``
    names it.

    Raises:
        AgenticRLError: ``--set model.path=…`` names a model too.
    """
    from agentic_rl.policy.named_models import NAMED_MODELS

    def key(item: str) -> str:
        return item.split("=", 1)[0].strip()

    given = {key(s): s.split("=", 1)[-1].strip().strip("'\"") for s in args.set}
    out = []
    if args.model is not None:
        if "model.path" in given:
            raise AgenticRLError(
                "--model and --set model.path both name the model; give one of them"
            )
        out.append(f"model.path={json.dumps(args.model)}")
    named = NAMED_MODELS.get(args.model if args.model is not None else given.get("model.path", ""))
    if named is not None:
        out += [item for item in named.recipe if key(item) not in given]
    return out


def backend_overrides(args) -> list[str]:
    """``--set`` items of ``train --rollout-backend B --base-url URL`` (``[rollout]`` keys)."""
    out = []
    if args.rollout_backend is not None:
        out.append(f"rollout.backend={json.dumps(args.rollout_backend)}")
    if args.base_url is not None:
        out.append(f"rollout.base_url={json.dumps(args.base_url)}")
    return out


def _cmd_check_env(args) -> int:
    from agentic_rl.envs.checker import EnvCheckError, check_env

    if args.seeds < 1:
        raise AgenticRLError(f"--seeds must be at least 1, got {args.seeds}")
    if args.max_turns < 1:
        raise AgenticRLError(f"--max-turns must be at least 1, got {args.max_turns}")
    try:
        report = check_env(
            args.env_id,
            seeds=range(args.seed_start, args.seed_start + args.seeds),
            max_turns=args.max_turns,
        )
    except EnvCheckError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(
        f"{report.env_id}: passed {len(report.passed)} checks ({', '.join(report.passed)}) on seeds "
        f"{report.seeds[0]}..{report.seeds[-1]}; oracle success {report.oracle_success:.0%}"
    )
    return 0


def _cmd_audit(args) -> int:
    from agentic_rl.errors import RunDirError
    from agentic_rl.tools.governance.audit import AUDIT_FILENAME, AuditLog

    path = Path(args.run_dir) / AUDIT_FILENAME
    if not path.is_file():
        raise RunDirError(f"no audit log at {path}")
    try:
        records = AuditLog(path).read(
            tool=args.tool, decision=args.decision, trajectory_id=args.trajectory
        )
    except ValueError as exc:
        raise RunDirError(str(exc)) from exc
    if args.json:
        for record in records:
            print(json.dumps(record, ensure_ascii=False))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{path} ({len(records)} records)")
    for column in (
        "time",
        "trajectory",
        "turn",
        "tool",
        "decision",
        "rule",
        "ok",
        "s",
        "bytes",
        "arguments",
    ):
        table.add_column(column, justify="right" if column in ("turn", "s", "bytes") else "left")
    for r in records:
        table.add_row(
            str(r.get("time", ""))[:19],
            str(r.get("trajectory_id", ""))[:12],
            str(r.get("turn", "")),
            str(r.get("tool", "")),
            str(r.get("decision", "")),
            str(r.get("rule", "")),
            str(r.get("ok", "")),
            f"{r.get('duration_s', 0):.3f}",
            str(r.get("output_bytes", "")),
            json.dumps(r.get("arguments"), ensure_ascii=False)[:60],
        )
    Console().print(table)
    return 0


def _add_model_and_env_arguments(p: argparse.ArgumentParser) -> None:
    """``train --model PATH --env ID`` (``model.path``; ``env.id`` and the env's recipe)."""
    p.add_argument(
        "--model",
        metavar="PATH",
        help="model to train: default (SmolLM2-135M-Instruct), gemma3-270m (Gemma 3 270M base; "
        "make install-models), a HF model folder or a .gguf file (model.path)",
    )
    p.add_argument(
        "--env",
        metavar="ID",
        help="train on this env (sets env.id and the env's recipe defaults; see agentic-rl envs)",
    )


def _add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """``train --rollout-backend B --base-url URL`` (``[rollout] backend``, ``base_url``)."""
    p.add_argument(
        "--rollout-backend",
        choices=("local", "vllm", "openai"),
        help="what samples the RL rollouts (rollout.backend): local (in-process, default), "
        "vllm (a vLLM server started here, weights synced each step) or openai (--base-url)",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible server of --rollout-backend openai, e.g. "
        "http://127.0.0.1:8000/v1 (rollout.base_url; it must return token ids)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``agentic-rl`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agentic-rl", description="Train LLM agents with reinforcement learning."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "train", help="warm-up + RL training run (default config: calculator-v0 with SmolLM2-135M)"
    )
    p.add_argument("--config", help="TOML config file (default: built-in defaults)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. algorithm.steps=5",
    )
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest checkpoint")
    _add_model_and_env_arguments(p)
    p.add_argument(
        "--num-env-workers",
        type=int,
        metavar="N",
        help="run the envs in N Ray actors "
        "(scale.num_env_workers; 0 = in this process; needs the extra 'ray')",
    )
    p.add_argument(
        "--num-generation-workers",
        type=int,
        metavar="N",
        help="sample the RL rollouts in N Ray actors, each with its own copy of the policy "
        "(scale.num_generation_workers; 0 = in this process; needs the extra 'ray')",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster of the env and generation workers: auto, host:port or "
        "ray://host:port (scale.ray_address; default: a private local Ray)",
    )
    _add_backend_arguments(p)
    add_agent_argument(p)  # --agent MODULE:FUNCTION
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser(
        "eval", help="evaluate a model (local, or hosted with --base-url) on the held-out tasks"
    )
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--model",
        help="model to evaluate: a HF folder, .gguf, run directory or run checkpoint "
        "(default: model.path of the config); with --base-url the served model's name",
    )
    add_eval_arguments(p)
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("envs", help="list registered environments")
    p.set_defaults(fn=cmd_envs)
    p = sub.add_parser(
        "check-env", help="check that an env obeys the env contract (exit 1 listing failed checks)"
    )
    p.add_argument("env_id", metavar="ID")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds to check (default 3)")
    p.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    p.add_argument(
        "--max-turns", type=int, default=50, help="most oracle turns per episode (default 50)"
    )
    p.set_defaults(fn=_cmd_check_env)
    p = sub.add_parser("audit", help="list the tool-call audit log of a run (RUN_DIR/audit.jsonl)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--tool", help="only calls of this tool")
    p.add_argument(
        "--decision", choices=("allow", "deny", "error"), help="only calls with this decision"
    )
    p.add_argument("--trajectory", metavar="ID", help="only calls of this trajectory id")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(fn=_cmd_audit)
    add_subcommands(sub)  # replay, view, export, compare
    add_serve_parser(sub)  # serve-policy
    add_doctor_parser(sub)  # doctor
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``agentic-rl`` command; returns the exit status.

    Run as the command (``argv`` None), ``train`` and ``eval`` re-execute themselves once under
    mimalloc (:mod:`agentic_rl.allocator`; ``AGENTIC_RL_ALLOCATOR=system`` keeps glibc's).
    """
    args = build_parser().parse_args(argv)
    if argv is None and args.command in ("train", "eval"):
        from agentic_rl.allocator import reexec_with_allocator

        try:
            reexec_with_allocator()
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    _quiet_libraries()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # libraries that set their own logger to DEBUG
        handler.setLevel(logging.WARNING)  # on import (bm25s) print nothing below WARNING
    try:
        status = args.fn(args)
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
        return status
    except BrokenPipeError:
        if not stdout_closed():  # a socket or a child's pipe: a real error
            raise
        return quiet_closed_stdout()  # no traceback, status 141 (docs of agentic_rl.cli.pipes)
    except AgenticRLError as exc:
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)  # always one line
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
