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
    kwargs, rollout = _eval_env(config, env_id)
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


def _eval_env(config, env_id: str) -> tuple[dict[str, Any], Any]:
    """The constructor kwargs and ``[rollout]`` budgets ``env_id`` is evaluated with: the
    training recipe's (minus its audit log) for the config's env, its entry's for an env of a
    mixture config, none and the config's budgets for another env."""
    kwargs: dict[str, Any] = {}
    if env_id == config.env.id:
        kwargs = dict(config.env.kwargs)
        if config.tools.permissions:  # (imported only then: the trainer's module loads torch)
            from agentic_rl.trainer.recipe import permission_kwargs

            kwargs = {**permission_kwargs(config), **kwargs}
    rollout = config.rollout
    entry = next((e for e in config.env.mix if e.id == env_id), None)
    if entry is not None:  # one env of a mixture config: its kwargs and budgets
        from agentic_rl.trainer.sampling.mixture import env_slots, slot_base_kwargs

        slot = next(s for s in env_slots(config) if s.id == env_id)
        kwargs, rollout = slot_base_kwargs(config, slot), slot.rollout
    return kwargs, rollout


def hosted_client(base_url: str, api_key_env: str, model: str | None) -> tuple[Any, str]:
    """An ``openai.OpenAI`` client of the server at ``base_url`` and the model to ask for.

    Args:
        base_url: the server's OpenAI API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: name of the environment variable holding the API key ("" = no key).
        model: the served model's name; None = the first model the server lists.

    Raises:
        AgenticRLError: ``api_key_env`` names an unset variable, the server cannot be reached
            (or its ``GET /models`` fails) and no ``model`` was named, or it lists no model.
        ImportError: the ``openai`` client is missing (extra ``openai``).
    """
    import os

    import openai

    from agentic_rl.policy.openai_compat import make_client

    if api_key_env and api_key_env not in os.environ:
        raise AgenticRLError(f"--api-key-env: environment variable {api_key_env!r} is not set")
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    client = make_client(base_url, api_key=key or "EMPTY", timeout_s=300.0)
    try:
        models = [m.id for m in client.with_options(max_retries=0, timeout=30.0).models.list()]
    except openai.APIStatusError as exc:  # it answered: a provider without GET /models
        if model:
            return client, model
        raise AgenticRLError(
            f"--base-url {base_url}: cannot list its models (HTTP {exc.status_code}); "
            "name the model with --model"
        ) from None
    except openai.OpenAIError as exc:  # connection refused, DNS, timeout
        raise AgenticRLError(
            f"--base-url {base_url}: cannot reach the server ({type(exc).__name__}: {exc})"
        ) from None
    if not model and not models:
        raise AgenticRLError(f"--base-url {base_url}: the server lists no model; use --model")
    return client, model or models[0]


def run_hosted_evaluation(
    config, client: Any, model: str, env_id: str, episodes: int, k: int, concurrency: int
) -> tuple[dict[str, Any], list]:
    """Evaluate a model served behind an OpenAI-compatible chat API (``client``) on ``episodes``
    held-out tasks of ``env_id``, as :func:`run_evaluation` does a local one.

    Each turn sends the conversation and the env's tools to ``POST /chat/completions``
    (:mod:`agentic_rl.rollout.chat_completions`: text messages, no token ids), within the
    ``[rollout]`` budgets ``max_turns`` and ``max_new_tokens`` (the env's entry's for a mixture
    config); ``k == 1`` asks for greedy replies (temperature 0), ``k > 1`` samples ``k`` per task
    at ``rollout.temperature``. Up to ``concurrency`` episodes are in flight.

    Returns:
        ``(report, trajectories)``, the report in :func:`run_evaluation`'s format.

    Raises:
        AgenticRLError: every episode failed (the first failure is named: a wrong model name,
            a rejected key, a server error).
    """
    from agentic_rl.envs import make
    from agentic_rl.rollout.chat_completions import run_chat_episodes
    from agentic_rl.trainer.evaluation.metrics import eval_report

    seeds = [config.eval.seed_start + i for i in range(episodes) for _ in range(k)]
    kwargs, rollout = _eval_env(config, env_id)
    envs = [make(env_id, **kwargs) for _ in seeds]
    started = time.perf_counter()
    try:
        batch = run_chat_episodes(
            client,
            model,
            envs,
            seeds,
            [f"eval-{s}" for s in seeds],
            max_concurrency=concurrency,
            max_turns=rollout.max_turns,
            max_tokens=rollout.max_new_tokens,
            temperature=0.0 if k == 1 else rollout.temperature,
        )
        trajectories = envs[0].rubric(config.reward).apply_batch(batch)
    finally:
        for env in envs:
            env.close()
    if all(t.failed for t in trajectories):
        raise AgenticRLError(f"all {len(trajectories)} episodes failed: {trajectories[0].failure}")
    report = eval_report(trajectories, k=k, wall_seconds=time.perf_counter() - started)
    return {"model": model, "env_id": env_id, "k": k, **report}, trajectories


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
    if not args.base_url and (args.api_key_env is not None or args.concurrency is not None):
        raise AgenticRLError("--api-key-env and --concurrency are options of --base-url")
    concurrency = 8 if args.concurrency is None else args.concurrency
    if args.k < 1 or (args.episodes is not None and args.episodes < 1) or concurrency < 1:
        raise AgenticRLError("--k, --episodes and --concurrency must be >= 1")
    episodes = args.episodes or config.eval.size
    if args.base_url:  # a hosted model: chat completions, nothing loaded here
        key_env = config.rollout.api_key_env if args.api_key_env is None else args.api_key_env
        client, model = hosted_client(args.base_url, key_env, args.model)
        report, _ = run_hosted_evaluation(
            config, client, model, env_id, episodes, args.k, concurrency
        )
    else:
        model = args.model or config.model.path
        report, _ = run_evaluation(config, model, env_id, episodes, args.k)
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
    """The extra ``eval`` options: ``--env``, ``--episodes``, ``--k``, ``--out``, ``--json``,
    and those of a hosted model: ``--base-url``, ``--api-key-env``, ``--concurrency``."""
    p.add_argument("--env", help="env id (default: env.id of the config)")
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="evaluate the model served by this OpenAI-compatible chat API instead of a local "
        "one, e.g. http://127.0.0.1:8000/v1 (vLLM, llama.cpp, a provider); --model names the "
        "served model (default: the first the server lists)",
    )
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key of --base-url "
        "(default: rollout.api_key_env of the config; none: no key)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="most episodes in flight against --base-url (default 8)",
    )
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
