"""``agentic-rl serve-policy``: an OpenAI-compatible server that records what every call sampled.

``agentic-rl serve-policy --model MODEL --port 8000`` serves a model (``default``, a HF folder,
a ``.gguf`` file, a run directory or a run checkpoint) with the routes of
:mod:`agentic_rl.agents.server`: ``/v1/chat/completions`` answers without recording;
``/rollouts/<id>/v1`` records every call of rollout ``<id>`` (opened on its first call) into one
token-in/token-out trajectory, which a ``POST /rollouts/<id>/reward`` ends and, with ``--record
DIR``, appends to a trajectory store there (``agentic-rl view DIR`` shows it). Runs until
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading

from agentic_rl.errors import AgenticRLError

__all__ = ["add_agent_argument", "add_serve_parser", "agent_overrides", "cmd_serve"]

log = logging.getLogger(__name__)


def cmd_serve(args) -> int:
    """Load the model, serve it until interrupted; returns the exit status.

    Raises:
        AgenticRLError: bad budgets, an unloadable model or chat template, a taken port.
    """
    if args.max_new_tokens < 1 or args.max_total_tokens < 2 or args.max_batch < 1:
        raise AgenticRLError(
            "--max-new-tokens and --max-batch must be >= 1, --max-total-tokens >= 2"
        )
    from agentic_rl.agents.recorder import Budget
    from agentic_rl.agents.server import PolicyServer
    from agentic_rl.cli.common import load_model_spec
    from agentic_rl.config import ModelConfig
    from agentic_rl.policy.chat_template import chat_for_model
    from agentic_rl.policy.fast import make_policy_from_config

    model, tokenizer = load_model_spec(args.model)
    model_cfg = ModelConfig(path=args.model, sampler=args.sampler, max_batch=args.max_batch)
    chat = chat_for_model(tokenizer, model_cfg)
    policy = make_policy_from_config(model, model_cfg, chat.eos_token_id, tokenizer.pad_token_id)
    on_finish, store = None, None
    if args.record:
        from agentic_rl.trajectories import TrajectoryStore, trajectory_to_record

        store = TrajectoryStore(args.record)
        lock = threading.Lock()

        def on_finish(trajectory) -> None:
            with lock:
                store.append([trajectory_to_record(trajectory, phase="served")])

    server = PolicyServer(
        policy,
        chat,
        Budget(args.max_new_tokens, args.max_total_tokens),
        model_name=args.served_model_name or str(args.model),
        auto_open=True,
        serve_unscoped=True,
        host=args.host,
        port=args.port,
        on_finish=on_finish,
    )
    try:
        server.start()
    except OSError as exc:
        server.close()
        msg = f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        raise AgenticRLError(msg) from None
    where = f"{server.base_url} (rollouts: {server.origin}/rollouts/<id>/v1)"
    print(f"serving {args.model} at {where}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def add_serve_parser(sub) -> None:
    """Add ``serve-policy`` to the ``agentic-rl`` subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "serve-policy",
        help="serve a model as an OpenAI-compatible endpoint that records token-in/token-out "
        "trajectories per rollout (/rollouts/<id>/v1)",
    )
    p.add_argument("--model", default="default", help="model, run directory or checkpoint")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    p.add_argument("--served-model-name", help="the id /v1/models lists (default: --model)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="most tokens per reply")
    p.add_argument(
        "--max-total-tokens", type=int, default=4096, help="most tokens of one rollout's context"
    )
    p.add_argument("--max-batch", type=int, default=64, help="most rows decoded together")
    p.add_argument("--sampler", choices=("fast", "hf"), default="fast")
    p.add_argument("--record", metavar="DIR", help="append each rewarded rollout to a store here")
    p.set_defaults(fn=cmd_serve)


def add_agent_argument(p: argparse.ArgumentParser) -> None:
    """``train --agent MODULE:FUNCTION`` (``agent.function``)."""
    p.add_argument(
        "--agent",
        metavar="MODULE:FUNCTION",
        help="train an existing agent: the function agent(task, base_url) that calls the "
        "policy through an OpenAI-compatible client (agent.function; see docs/agents.md)",
    )


def agent_overrides(args, resume) -> list[str]:
    """The ``--set`` item of ``train --agent`` (none without it).

    Raises:
        AgenticRLError: ``--agent`` with ``--resume`` (the run's config.toml names its agent).
    """
    if getattr(args, "agent", None) is None:
        return []
    if resume is not None:
        raise AgenticRLError(
            "--resume continues a run with its own config.toml; --agent cannot be combined with it"
        )
    return [f"agent.function={json.dumps(args.agent)}"]
