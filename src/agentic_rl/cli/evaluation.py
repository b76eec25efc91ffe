"""``agentic-rl eval`` and ``agentic-rl compare``: held-out evaluation of a model and the
comparison of two runs' (or two reports') final evaluations."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from agentic_rl.cli.common import load_model_spec, print_table
from agentic_rl.errors import AgenticRLError, RunDirError


def run_evaluation(
    config, model_spec: str, env_id: str, episodes: int, k: int
) -> tuple[dict[str, Any], list]:
    """Evaluate ``model_spec`` on ``episodes`` held-out tasks of ``env_id`` (seeds ``eval.seed_start …``).

    ``k == 1``: one greedy episode per task (the training recipe's held-out evaluation).
    ``k > 1``: ``k`` sampled episodes per task at ``rollout.temperature``, for unbiased pass@k.
    An env of a mixture config (``[[env.mix]]``) runs with its entry's kwargs and budgets.

    Returns:
        ``(report, trajectories)`` with the report of
        :func:`~agentic_rl.trainer.evaluation.metrics.eval_report` plus ``model``, ``env_id``, ``k``.
    """
    from agentic_rl.envs import make
    from agentic_rl.policy.chat_template import chat_for_model
    from agentic_rl.policy.device import placement_of
    from agentic_rl.policy.fast import make_policy_from_config
    from agentic_rl.rollout import run_episodes
    from agentic_rl.trainer.evaluation.metrics import eval_report

    # on the config's device ([model] device: auto = CUDA when there), like the training run
    model, tok = load_model_spec(model_spec, device=placement_of(config.model).device)
    chat = chat_for_model(tok, config.model, model_spec)
    policy = make_policy_from_config(model, config.model, chat.eos_token_id, tok.pad_token_id)
    seeds = [config.eval.seed_start + i for i in range(episodes) for _ in range(k)]
    from agentic_rl.trainer.recipe import permission_kwargs

    # the training recipe's eval kwargs (minus its audit log) when evaluating the config's env
    kwargs = {**permission_kwargs(config), **config.env.kwargs} if env_id == config.env.id else {}
    rollout = config.rollout
    entry = next((e for e in config.env.mix if e.id == env_id), None)
    if entry is not None:  # one env of a mixture config: its kwargs and budgets
        from agentic_rl.trainer.sampling.mixture import env_slots, slot_base_kwargs

        slot = next(s for s in env_slots(config) if s.id == env_id)
        kwargs, rollout = slot_base_kwargs(config, slot), slot.rollout
    started = time.perf_counter()
    trajectories = []
    chunk_size = config.model.max_batch  # more episodes than decode together only cost KV memory
    for start in range(0, len(seeds), chunk_size):
        chunk = seeds[start : start + chunk_size]
        envs = [make(env_id, **kwargs) for _ in chunk]
        rubric = envs[0].rubric(config.reward)
        batch = run_episodes(
            policy, chat, envs, chunk, [f"eval-{s}" for s in chunk], rollout, greedy=k == 1
        )
        trajectories.extend(rubric.apply_batch(batch))
        for env in envs:
            env.close()
        policy.clear_cache()
    report = eval_report(trajectories, k=k, wall_seconds=time.perf_counter() - started)
    return {"model": model_spec, "env_id": env_id, "k": k, **report}, trajectories


def cmd_eval(args) -> int:
    """``agentic-rl eval``: evaluate a model on held-out tasks; print (or write) the report.

    Raises:
        AgenticRLError: ``--k`` or ``--episodes`` below 1, an unknown env id, a bad config.
    """
    from agentic_rl.config import load_config
    from agentic_rl.envs import make

    config = load_config(args.config, args.set)
    if config.env.mix and not args.env:
        ids = ", ".join(e.id for e in config.env.mix)
        raise AgenticRLError(f"the config trains a mixture ({ids}): choose its env with --env ID")
    env_id = args.env or config.env.id
    make(env_id).close()  # unknown id: one error line before the model loads
    if args.k < 1 or (args.episodes is not None and args.episodes < 1):
        raise AgenticRLError("--k and --episodes must be >= 1")
    report, _ = run_evaluation(
        config, args.model or config.model.path, env_id, args.episodes or config.eval.size, args.k
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report))
        return 0
    rows = [[key, value] for key, value in _flat(report).items()]
    print_table(f"eval of {report['model']} on {env_id}", ["metric", "value"], rows)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _flat(report: dict[str, Any]) -> dict[str, Any]:
    from agentic_rl.trainer.evaluation.metrics import compare_reports

    return {key: b for key, _a, b, _d in compare_reports({}, report)}


def _report_of(path: Path) -> dict[str, Any]:
    """An eval report from an ``eval --out`` JSON file, or from a run's final-eval trajectories."""
    from agentic_rl.trainer.evaluation.metrics import eval_report
    from agentic_rl.trajectories import open_run_store

    if path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise RunDirError(f"{path}: not an eval JSON report ({exc})") from None
    store = open_run_store(path)
    trajectories = list(store.read_trajectories(phase="eval", tag="final"))
    if not trajectories:
        raise RunDirError(f"{path}: no final evaluation recorded (did the run finish?)")
    report = eval_report(trajectories)
    summary = path / "summary.json"
    if summary.is_file():
        try:
            report["timings_seconds"] = json.loads(summary.read_text()).get("timings_seconds", {})
        except (ValueError, AttributeError) as exc:
            raise RunDirError(f"{summary}: not a run summary ({exc})") from None
    return report


def cmd_compare(args) -> int:
    """``agentic-rl compare A B``: the metrics of two runs' final evaluations (or two ``eval --out``
    reports) side by side, with B − A.

    Raises:
        RunDirError: a path is neither an eval JSON report nor a run with a final evaluation.
    """
    from agentic_rl.trainer.evaluation.metrics import compare_reports

    a, b = Path(args.run_a), Path(args.run_b)
    rows = compare_reports(_report_of(a), _report_of(b))
    if args.json:
        print(json.dumps([{"metric": m, "a": va, "b": vb, "diff": d} for m, va, vb, d in rows]))
        return 0
    print_table(f"A = {a}   B = {b}", ["metric", "A", "B", "B − A"], [list(r) for r in rows])
    return 0


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The extra ``eval`` options: ``--env``, ``--episodes``, ``--k``, ``--out``, ``--json``."""
    p.add_argument("--env", help="env id (default: env.id of the config)")
    p.add_argument("--episodes", type=int, help="number of held-out tasks (default: eval.size)")
    p.add_argument(
        "--k", type=int, default=1, help="samples per task for pass@k (1 = greedy, as in training)"
    )
    p.add_argument("--out", help="also write the report as JSON to this file")
    p.add_argument(
        "--json", action="store_true", help="print the report as JSON instead of a table"
    )


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compare RUN_A RUN_B [--json]`` on the ``agentic-rl`` parser."""
    p = sub.add_parser(
        "compare", help="compare two runs (final evaluations) or two eval JSON reports"
    )
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_compare)
