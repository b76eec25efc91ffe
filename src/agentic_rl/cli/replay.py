"""``agentic-rl replay``: re-run recorded trajectories' actions in fresh envs.

``replay RUN_DIR [filters]`` replays every matching trajectory and reports divergences;
``--trajectory ID`` replays one (``--rescore`` scores it again with the current rubric,
``--logprobs CHECKPOINT`` measures policy drift); ``--trajectory ID --to-turn K`` rolls the
episode back to turn ``K`` (:func:`agentic_rl.rollout.rollback.rollback`) and prints or writes the
cut trajectory.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentic_rl.cli.common import (
    add_filter_args,
    find_record,
    load_model_spec,
    print_table,
    record_filters,
    run_config,
)
from agentic_rl.errors import AgenticRLError, RunDirError


def cmd_replay(args) -> int:
    """``agentic-rl replay``: replay one trajectory, every matching one, or roll one back.

    Returns:
        the exit status: 1 when a replay diverged (or a rollback's replay did not match), else 0.

    Raises:
        AgenticRLError: options that do not go together (e.g. ``--to-turn`` without
            ``--trajectory``), a ``--to-turn`` outside ``0..turns``.
        RunDirError: no such run, trajectory, or no trajectory matching the filters.
    """
    run_dir = Path(args.run_dir)
    if args.to_turn is None and args.out is not None:
        raise AgenticRLError("replay --out FILE writes the cut trajectory of --to-turn K")
    if args.to_turn is not None:
        return _cmd_rollback(run_dir, args)
    if args.trajectory is None:
        return _replay_many(run_dir, args)
    record = find_record(run_dir, args.trajectory)
    out = replay_record(run_dir, record, args.rescore)
    if args.logprobs:
        from agentic_rl.trajectories import trajectory_from_record

        out["logprobs"] = _drift(run_dir, trajectory_from_record(record), args.logprobs)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_replay(out)
    return 0 if out["first_divergent_turn"] is None else 1


def fresh_env(run_dir: Path, record: dict[str, Any]):
    """A new env for a stored record: its env id and kwargs (the run's ``env.kwargs`` when the
    record has none), with no audit log (a replay must not write into the run's).

    Raises:
        RunDirError: the record has no kwargs and ``run_dir`` no ``config.toml``.
        AgenticRLError: unknown env id (as :func:`agentic_rl.envs.make`).
    """
    from agentic_rl.envs import make

    kwargs = dict(
        record["env_kwargs"]
        if record.get("env_kwargs") is not None
        else run_config(run_dir).env.kwargs
    )
    kwargs.pop("audit_path", None)  # no context either: the env's default audits nothing
    return make(record["env_id"], **kwargs)


def replay_record(run_dir: Path, record: dict[str, Any], rescore_it: bool) -> dict[str, Any]:
    """Replay one stored record in a fresh env built from its env id, seed and kwargs; the
    replay's report as plain data (plus ``rescore`` when asked)."""
    from agentic_rl.trajectories import trajectory_from_record
    from agentic_rl.trajectories.replay import replay, rescore

    traj = trajectory_from_record(record)
    head = {
        "trajectory_id": traj.trajectory_id,
        "env_id": traj.env_id,
        "seed": traj.seed,
        "phase": record.get("phase"),
        "step": record.get("step"),
        "turns": len(traj.turns),
    }
    if traj.env_id.startswith("agent:"):  # [agent] runs: the environment is the agent program
        return {
            **head,
            "turns_replayed": 0,
            "first_divergent_turn": None,
            "divergences": [],
            "not_replayable": "recorded from an agent program through the policy server: its "
            "environment is that program, which replay cannot re-run (--logprobs still works)",
        }
    env = fresh_env(run_dir, record)
    try:
        result = replay(traj, env)
        out: dict[str, Any] = {
            **head,
            "turns_replayed": result.turns_replayed,
            "first_divergent_turn": result.first_divergent_turn,
            "divergences": [d.__dict__ for d in result.divergences],
        }
        if rescore_it:
            weights = run_config(run_dir).reward if (run_dir / "config.toml").is_file() else None
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
    records = list(open_run_store(run_dir).read(**record_filters(args)))
    if args.limit:
        records = records[: args.limit]
    if not records:
        raise RunDirError(f"no trajectory in {run_dir} matches the filters")
    results = [replay_record(run_dir, record, args.rescore) for record in records]
    diverged = [r for r in results if r["first_divergent_turn"] is not None]
    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "trajectories": len(results),
        "diverged": len(diverged),
        "turns": sum(r["turns"] for r in results),
        "turns_replayed": sum(r["turns_replayed"] for r in results),
        "divergences_by_kind": _count(d["what"] for r in diverged for d in r["divergences"]),
        "divergent_trajectory_ids": [r["trajectory_id"] for r in diverged],
        "not_replayable": sum("not_replayable" in r for r in results),
    }
    if args.rescore:
        summary["rewards_changed"] = sum(
            "total" in r.get("rescore", {}).get("changed", ()) for r in results
        )
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
    if summary["not_replayable"]:
        print(
            f"{summary['not_replayable']} agent-program trajectories are not replayable (not run)"
        )


def _drift(run_dir: Path, traj, checkpoint: str) -> dict[str, Any]:
    import torch

    from agentic_rl.trainer.learning.scoring import pack, score
    from agentic_rl.trajectories.replay import logprob_drift

    temperature = (
        run_config(run_dir).rollout.temperature if (run_dir / "config.toml").is_file() else 1.0
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
    if "not_replayable" in out:
        print(f"not replayed: {out['not_replayable']}")
    elif turn is None:
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
        print_table("rescore (recorded vs current rubric)", ["component", "recorded", "now"], rows)
        print("changed: " + (", ".join(r["changed"]) or "nothing"))
    if "logprobs" in out:
        lp = out["logprobs"]
        print(
            f"policy drift under {lp['checkpoint']}: mean |Δlogprob| {lp['mean_abs']:.4g}, "
            f"max {lp['max_abs']:.4g}, mean Δ {lp['mean_diff']:.4g} over {lp['num_tokens']} sampled tokens"
        )


# -- replay --to-turn K: roll an episode back ------------------------------------------------


def rollback_record(run_dir: Path, record: dict[str, Any], k: int) -> dict[str, Any]:
    """Roll a stored trajectory back to turn ``k`` in a fresh env (see
    :func:`agentic_rl.rollout.rollback.rollback`): reset with its seed, step the recorded actions
    of turns ``0 .. k-1`` and check each observation and reward against the recording.

    Returns:
        plain data: ``trajectory_id``, ``env_id``, ``seed``, ``turns`` (recorded),
        ``to_turn`` (= ``k``), ``mismatch`` (None, or the first difference the replay met: the
        env did not reach the recorded state) and, when it matched, ``trajectory``: the cut
        trajectory as a record (:func:`~agentic_rl.trajectories.trajectory_to_record`; reward
        unset: it must be scored again).

    Raises:
        AgenticRLError: ``k`` is outside ``0 .. turns``.
        RunDirError: the stored trajectory's tokens or messages do not match its turns.
    """
    from agentic_rl.rollout.rollback import ReplayMismatchError, rollback
    from agentic_rl.trajectories import trajectory_from_record, trajectory_to_record

    traj = trajectory_from_record(record)
    n = len(traj.turns)
    if isinstance(k, bool) or not 0 <= k <= n:
        raise AgenticRLError(
            f"--to-turn must be in 0..{n} (trajectory {traj.trajectory_id} has {n} turns), got {k}"
        )
    out: dict[str, Any] = {
        "trajectory_id": traj.trajectory_id,
        "env_id": traj.env_id,
        "seed": traj.seed,
        "turns": n,
        "to_turn": k,
        "mismatch": None,
    }
    env = fresh_env(run_dir, record)
    try:
        cut = rollback(env, traj, k)
    except ReplayMismatchError as exc:
        out["mismatch"] = str(exc)
        return out
    except ValueError as exc:
        raise RunDirError(f"trajectory {traj.trajectory_id}: {exc}") from None
    finally:
        env.close()
    out["trajectory"] = trajectory_to_record(cut)
    return out


def _cmd_rollback(run_dir: Path, args) -> int:
    if args.trajectory is None:
        raise AgenticRLError("replay --to-turn K needs --trajectory ID (it cuts one trajectory)")
    if args.rescore or args.logprobs:
        raise AgenticRLError("replay --to-turn does not go with --rescore or --logprobs")
    out = rollback_record(run_dir, find_record(run_dir, args.trajectory), args.to_turn)
    if args.out is not None and out["mismatch"] is None:
        Path(args.out).write_text(json.dumps(out["trajectory"], ensure_ascii=False) + "\n")
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_rollback(out, args.out)
    return 1 if out["mismatch"] is not None else 0


def _print_rollback(out: dict[str, Any], path: str | None) -> None:
    head = f"trajectory {out['trajectory_id']} ({out['env_id']}, seed {out['seed']})"
    if out["mismatch"] is not None:
        print(
            f"REPLAY MISMATCH: {head}: rolling back to turn {out['to_turn']} of {out['turns']} "
            f"failed; the env did not reproduce the recording: {out['mismatch']}"
        )
        return
    cut = out["trajectory"]
    print(
        f"{head}: rolled back to turn {out['to_turn']} of {out['turns']}: replayed "
        f"{out['to_turn']} recorded actions, every observation and reward matched"
    )
    print(
        f"cut trajectory: {len(cut['turns'])} turns, {len(cut['messages'])} messages, "
        f"{len(cut['token_ids'])} tokens (reward unset: score it again)"
    )
    last = cut["messages"][-1] if cut["messages"] else None
    if last is not None:
        print(
            f"last message ({last['role']}): {json.dumps(last['content'], ensure_ascii=False)[:300]}"
        )
    if path is not None:
        print(f"wrote {path}")


def add_replay_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``replay RUN_DIR [--trajectory ID [--to-turn K [--out FILE]]] [filters] ...``."""
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
    add_filter_args(p)
    p.add_argument(
        "--rescore", action="store_true", help="recompute the reward with the current rubric"
    )
    p.add_argument(
        "--logprobs",
        metavar="CHECKPOINT",
        help="recompute logprobs under a model/checkpoint (policy drift)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--to-turn",
        type=int,
        metavar="K",
        help="with --trajectory: roll the episode back to turn K (replay the recorded actions of "
        "turns 0..K-1 in a fresh env, checking each observation and reward) and print the cut "
        "trajectory; exit 1 on a replay mismatch",
    )
    p.add_argument(
        "--out", metavar="FILE", help="with --to-turn: write the cut trajectory (JSON record)"
    )
    p.set_defaults(fn=cmd_replay)
