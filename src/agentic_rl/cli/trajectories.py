"""Command line for trajectories and evaluation: ``replay``, ``view``, ``export``, ``eval``, ``compare``.

:mod:`agentic_rl.cli.main` registers these subcommands with :func:`add_subcommands`; each ``_cmd_*`` wires the
pure pieces (store, replay, viewer, export, eval metrics) to the env registry, the model
loader and the trainer's scoring. User errors raise :class:`~agentic_rl.errors.AgenticRLError`
subclasses, which ``cli.main`` prints as one line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from agentic_rl.errors import AgenticRLError, ModelNotFoundError, RunDirError

# -- shared helpers ----------------------------------------------------------------------


def _run_config(run_dir: Path):
    from agentic_rl.config import load_config

    path = run_dir / "config.toml"
    if not path.is_file():
        raise RunDirError(f"no config.toml in {run_dir} (is it a run directory?)")
    return load_config(path)


def _find_record(run_dir: Path, trajectory: str) -> dict[str, Any]:
    """The record whose id is ``trajectory`` (or starts with it, when unique)."""
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
    from agentic_rl.policy.model_loading import load_model, load_tokenizer, resolve_model_dir
    from agentic_rl.trainer.checkpoint import load_weights

    config = _run_config(path.parent.parent)
    base = resolve_model_dir(config.model.path)
    model = load_model(base, device=device)
    if config.model.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=config.model.lora_rank,
                lora_alpha=config.model.lora_alpha,
                lora_dropout=config.model.lora_dropout,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            ),
        )
    weights = {k: v.to(device) for k, v in load_weights(path / "trainable.safetensors").items()}
    result = model.load_state_dict(weights, strict=False)
    if result.unexpected_keys:
        raise ModelNotFoundError(
            f"checkpoint {path} does not fit the run's model: "
            f"unexpected {result.unexpected_keys[:3]}"
        )
    return model.eval(), load_tokenizer(base)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
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


# -- replay ------------------------------------------------------------------------------


def _cmd_replay(args) -> int:
    run_dir = Path(args.run_dir)
    if args.trajectory is None:
        return _replay_many(run_dir, args)
    record = _find_record(run_dir, args.trajectory)
    out = _replay_record(run_dir, record, args.rescore)
    if args.logprobs:
        from agentic_rl.trajectories import trajectory_from_record

        out["logprobs"] = _drift(run_dir, trajectory_from_record(record), args.logprobs)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_replay(out)
    return 0 if out["first_divergent_turn"] is None else 1


def _replay_record(run_dir: Path, record: dict[str, Any], rescore_it: bool) -> dict[str, Any]:
    """Replay one stored record in a fresh env built from its env id, seed and kwargs; the
    replay's report as plain data (plus ``rescore`` when asked)."""
    from agentic_rl.envs import accepts, make
    from agentic_rl.trajectories import trajectory_from_record
    from agentic_rl.trajectories.replay import replay, rescore

    traj = trajectory_from_record(record)
    kwargs = dict(
        record["env_kwargs"]
        if record.get("env_kwargs") is not None
        else _run_config(run_dir).env.kwargs
    )
    if accepts(traj.env_id, "audit_path"):
        kwargs["audit_path"] = None  # a replay must not write into the run's audit log
    env = make(traj.env_id, **kwargs)
    try:
        result = replay(traj, env)
        out: dict[str, Any] = {
            "trajectory_id": traj.trajectory_id,
            "env_id": traj.env_id,
            "seed": traj.seed,
            "phase": record.get("phase"),
            "step": record.get("step"),
            "turns": len(traj.turns),
            "turns_replayed": result.turns_replayed,
            "first_divergent_turn": result.first_divergent_turn,
            "divergences": [d.__dict__ for d in result.divergences],
        }
        if rescore_it:
            weights = _run_config(run_dir).reward if (run_dir / "config.toml").is_file() else None
            rubric = env.rubric(weights) if weights is not None else env.rubric()
            r = rescore(traj, rubric)
            out["rescore"] = {
                "reward_recorded": r.reward_recorded,
                "reward_now": r.reward_now,
                "components": r.components,
                "changed": list(r.changed),
                "failure": r.failure,
            }
    finally:
        env.close()
    return out


def _replay_many(run_dir: Path, args) -> int:
    """``replay RUN_DIR [filters]``: replay every matching trajectory (first ``--limit``), print
    each divergent one and a summary; exit status 1 when any diverged."""
    from agentic_rl.trajectories import open_run_store

    if args.logprobs:
        raise AgenticRLError(
            "replay --logprobs needs --trajectory ID (it scores one trajectory under a model)"
        )
    if args.limit < 0:
        raise AgenticRLError(f"--limit must be >= 0, got {args.limit}")
    records = list(open_run_store(run_dir).read(**_filters(args)))
    if args.limit:
        records = records[: args.limit]
    if not records:
        raise RunDirError(f"no trajectory in {run_dir} matches the filters")
    results = [_replay_record(run_dir, record, args.rescore) for record in records]
    diverged = [r for r in results if r["first_divergent_turn"] is not None]
    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "trajectories": len(results),
        "diverged": len(diverged),
        "turns": sum(r["turns"] for r in results),
        "turns_replayed": sum(r["turns_replayed"] for r in results),
        "divergences_by_kind": _count(d["what"] for r in diverged for d in r["divergences"]),
        "divergent_trajectory_ids": [r["trajectory_id"] for r in diverged],
    }
    if args.rescore:
        summary["rewards_changed"] = sum("total" in r["rescore"]["changed"] for r in results)
    if args.json:
        print(json.dumps({**summary, "results": results}, ensure_ascii=False))
    else:
        _print_replay_summary(summary, diverged)
    return 1 if diverged else 0


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _print_replay_summary(summary: dict[str, Any], diverged: list[dict[str, Any]]) -> None:
    for r in diverged:
        turn = r["first_divergent_turn"]
        where = "the reset observation" if turn == -1 else f"turn {turn}"
        kinds = ", ".join(d["what"] for d in r["divergences"])
        print(
            f"DIVERGED {r['trajectory_id']} ({r['env_id']}, seed {r['seed']}, {r['phase']} step {r['step']}): "
            f"{where}: {kinds}"
        )
    kinds = ", ".join(f"{k} {n}" for k, n in summary["divergences_by_kind"].items())
    print(
        f"replayed {summary['trajectories']} trajectories ({summary['turns_replayed']} of {summary['turns']} "
        f"turns): {summary['diverged']} diverged" + (f" ({kinds})" if kinds else "")
    )
    if "rewards_changed" in summary:
        print(f"rescored with the current rubric: {summary['rewards_changed']} rewards changed")


def _drift(run_dir: Path, traj, checkpoint: str) -> dict[str, Any]:
    import torch

    from agentic_rl.trainer.scoring import pack, score
    from agentic_rl.trajectories.replay import logprob_drift

    temperature = (
        _run_config(run_dir).rollout.temperature if (run_dir / "config.toml").is_file() else 1.0
    )
    model, _tok = load_model_spec(checkpoint)
    with torch.no_grad():
        new = score(model.eval(), pack([traj]), temperature=temperature)[0]
    d = logprob_drift(traj, [float(x) for x in new])
    return {
        "checkpoint": checkpoint,
        "temperature": temperature,
        "num_tokens": d.num_tokens,
        "mean_abs": d.mean_abs,
        "max_abs": d.max_abs,
        "mean_diff": d.mean_diff,
    }


def _print_replay(out: dict[str, Any]) -> None:
    turn = out["first_divergent_turn"]
    print(
        f"trajectory {out['trajectory_id']} ({out['env_id']}, seed {out['seed']}): "
        f"replayed {out['turns_replayed']} of {out['turns']} turns"
    )
    if turn is None:
        print("0 divergences: every observation, reward and end flag matches the recording")
    else:
        where = "the reset observation" if turn == -1 else f"turn {turn}"
        print(f"first divergence at {where}:")
        for d in out["divergences"]:
            print(f"  {d['what']}: recorded {json.dumps(d['recorded'], ensure_ascii=False)[:300]}")
            print(
                f"  {' ' * len(d['what'])}  replayed {json.dumps(d['replayed'], ensure_ascii=False)[:300]}"
            )
    if "rescore" in out:
        r = out["rescore"]
        rows = [[n, a, b] for n, (a, b) in r["components"].items()] + [
            ["total", r["reward_recorded"], r["reward_now"]]
        ]
        _table("rescore (recorded vs current rubric)", ["component", "recorded", "now"], rows)
        print("changed: " + (", ".join(r["changed"]) or "nothing"))
    if "logprobs" in out:
        lp = out["logprobs"]
        print(
            f"policy drift under {lp['checkpoint']}: mean |Δlogprob| {lp['mean_abs']:.4g}, "
            f"max {lp['max_abs']:.4g}, mean Δ {lp['mean_diff']:.4g} over {lp['num_tokens']} sampled tokens"
        )


# -- view / export -----------------------------------------------------------------------


def _filters(args) -> dict[str, Any]:
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


def _decoder(run_dir: Path):
    """Token id -> text with the run's tokenizer (None when it cannot be loaded)."""
    from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir

    try:
        folder = run_dir / "final_model"
        tok = load_tokenizer(
            folder
            if (folder / "config.json").is_file()
            else resolve_model_dir(_run_config(run_dir).model.path)
        )
    except (AgenticRLError, OSError, ValueError):
        return None
    return lambda i: tok.decode([i])


def _cmd_view(args) -> int:
    from agentic_rl.trajectories import open_run_store
    from agentic_rl.trajectories.viewer import serve, write_view

    run_dir = Path(args.run_dir)
    records = list(open_run_store(run_dir).read(**_filters(args)))
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
    from agentic_rl.trajectories.export import export_records

    try:
        path = export_records(
            open_run_store(Path(args.run_dir)).read(**_filters(args)),
            args.out,
            only_success=args.only_success,
        )
    except ValueError as exc:
        raise RunDirError(str(exc)) from None
    import pyarrow.parquet as pq

    print(f"wrote {path} ({pq.ParquetFile(path).metadata.num_rows} trajectories)")
    return 0


def _add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--phase", choices=("warmup", "rl", "eval"), help="only this phase")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--env", help="only this env id")
    p.add_argument("--stop-reason", help="only this stop reason (terminated, max_turns, ...)")
    p.add_argument("--min-reward", type=float, help="reward >= this")
    p.add_argument("--max-reward", type=float, help="reward <= this")


# -- eval / compare ----------------------------------------------------------------------


def run_evaluation(
    config, model_spec: str, env_id: str, episodes: int, k: int
) -> tuple[dict[str, Any], list]:
    """Evaluate ``model_spec`` on ``episodes`` held-out tasks of ``env_id`` (seeds ``eval.seed_start …``).

    ``k == 1``: one greedy episode per task (the training recipe's held-out evaluation).
    ``k > 1``: ``k`` sampled episodes per task at ``rollout.temperature``, for unbiased pass@k.

    Returns:
        ``(report, trajectories)`` with the report of
        :func:`~agentic_rl.trainer.eval_metrics.eval_report` plus ``model``, ``env_id``, ``k``.
    """
    from agentic_rl.envs import make
    from agentic_rl.policy.chat import ChatFormat
    from agentic_rl.policy.fast import make_policy_from_config
    from agentic_rl.rollout import run_episodes
    from agentic_rl.trainer.eval_metrics import eval_report

    model, tok = load_model_spec(model_spec)
    chat = ChatFormat(tok)
    policy = make_policy_from_config(model, config.model, chat.eos_token_id, tok.pad_token_id)
    seeds = [config.eval.seed_start + i for i in range(episodes) for _ in range(k)]
    from agentic_rl.trainer.recipe import permission_kwargs

    # the training recipe's eval kwargs (minus its audit log) when evaluating the config's env
    kwargs = {**permission_kwargs(config), **config.env.kwargs} if env_id == config.env.id else {}
    started = time.perf_counter()
    trajectories = []
    chunk_size = config.model.max_batch  # more episodes than decode together only cost KV memory
    for start in range(0, len(seeds), chunk_size):
        chunk = seeds[start : start + chunk_size]
        envs = [make(env_id, **kwargs) for _ in chunk]
        rubric = envs[0].rubric(config.reward)
        batch = run_episodes(
            policy, chat, envs, chunk, [f"eval-{s}" for s in chunk], config.rollout, greedy=k == 1
        )
        trajectories.extend(rubric.apply(t) for t in batch)
        for env in envs:
            env.close()
        policy.clear_cache()
    report = eval_report(trajectories, k=k, wall_seconds=time.perf_counter() - started)
    return {"model": model_spec, "env_id": env_id, "k": k, **report}, trajectories


def _cmd_eval(args) -> int:
    from agentic_rl.config import load_config
    from agentic_rl.envs import make

    config = load_config(args.config, args.set)
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
    _table(f"eval of {report['model']} on {env_id}", ["metric", "value"], rows)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _flat(report: dict[str, Any]) -> dict[str, Any]:
    from agentic_rl.trainer.eval_metrics import compare_reports

    return {key: b for key, _a, b, _d in compare_reports({}, report)}


def _report_of(path: Path) -> dict[str, Any]:
    """An eval report from an ``eval --out`` JSON file, or from a run's final-eval trajectories."""
    from agentic_rl.trainer.eval_metrics import eval_report
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


def _cmd_compare(args) -> int:
    from agentic_rl.trainer.eval_metrics import compare_reports

    a, b = Path(args.run_a), Path(args.run_b)
    rows = compare_reports(_report_of(a), _report_of(b))
    if args.json:
        print(json.dumps([{"metric": m, "a": va, "b": vb, "diff": d} for m, va, vb, d in rows]))
        return 0
    _table(f"A = {a}   B = {b}", ["metric", "A", "B", "B − A"], [list(r) for r in rows])
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register ``replay``, ``view``, ``export`` and ``compare`` on the ``agentic-rl`` parser."""
    p = sub.add_parser(
        "replay",
        help="re-run recorded trajectories' actions in fresh envs and report divergences "
        "(one trajectory, or all matching the filters; exit 1 if any diverged)",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--trajectory",
        metavar="ID",
        help="only this trajectory id (or a unique prefix); "
        "default: every trajectory matching the filters",
    )
    p.add_argument("--limit", type=int, default=0, help="first N matching trajectories (0 = all)")
    _add_filter_args(p)
    p.add_argument(
        "--rescore", action="store_true", help="recompute the reward with the current rubric"
    )
    p.add_argument(
        "--logprobs",
        metavar="CHECKPOINT",
        help="recompute logprobs under a model/checkpoint (policy drift)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=_cmd_replay)
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
    _add_filter_args(p)
    p.set_defaults(fn=_cmd_view)
    p = sub.add_parser(
        "export", help="export trajectories as a HF-datasets Parquet dataset (SFT / offline RL)"
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", required=True, help="output dataset folder")
    p.add_argument(
        "--only-success", action="store_true", help="only trajectories whose outcome reached 1"
    )
    _add_filter_args(p)
    p.set_defaults(fn=_cmd_export)
    p = sub.add_parser(
        "compare", help="compare two runs (final evaluations) or two eval JSON reports"
    )
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_compare)


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
