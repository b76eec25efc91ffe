"""A self-contained HTML viewer of stored trajectories (``agentic-rl view RUN_DIR``).

:func:`build_view` turns records into one HTML file: a filterable list (env, phase, step,
reward range, stop reason, id) and, for the selected trajectory, the conversation with tool
calls and results (and the screenshots an env put in ``info["screenshot_png"]``, a base64 PNG, on
reset or on a turn), the reward components, and the token stream coloured by loss mask or by
advantage (hover a token for its id, mask, logprob and advantage), with a marker where the
context was rebuilt (``segment_starts``: each segment is trained as its own sequence). Everything (CSS, JS,
data) is inline: the file opens from disk with no network. :func:`serve` shows it on
localhost with the standard library's HTTP server, which serves that one page and nothing else
of the directory it sits in.

Token text comes from a ``decode_token(id) -> str`` callable (the CLI passes the run's
tokenizer); each distinct id is decoded once into a shared vocabulary table.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentic_rl.trajectories.viewer_page import PAGE


def token_advantages(record: dict[str, Any]) -> list[float] | None:
    """Per-token advantages of a record, length T, or None when none were recorded.

    ``record["advantages"]["token"]`` when present; otherwise the scalar ``advantage``
    broadcast to the sampled tokens (``loss_mask`` 1) with 0.0 elsewhere.
    """
    adv = (record.get("advantages") or {}).get("token")
    if adv is not None:
        return [float(a) for a in adv]
    scalar = record.get("advantage")
    if scalar is None:
        return None
    return [float(scalar) if m else 0.0 for m in record["loss_mask"]]


def _prompt(record: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for m in record["messages"]:
        if m["role"] == "assistant":
            break
        out.append(m)
    return out


def _view_item(record: dict[str, Any]) -> dict[str, Any]:
    turns = []
    for t in record["turns"]:
        obs = t["observation"]
        turns.append(
            {
                "index": t["index"],
                "text": t["action"]["text"],
                "tool_calls": [
                    {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}
                    for c in t["action"]["tool_calls"]
                ],
                "tool_call_errors": [
                    {"message": e["message"]} for e in t["action"]["tool_call_errors"]
                ],
                "tool_results": t["tool_results"],
                "observation": None if obs is None else obs["messages"],
                "reward": t["reward"],
                "screenshot": (t.get("info") or {}).get("screenshot_png"),
            }
        )
    return {
        "trajectory_id": record["trajectory_id"],
        "env_id": record["env_id"],
        "seed": record["seed"],
        "phase": record.get("phase"),
        "step": record.get("step"),
        "policy_version": record.get("policy_version"),
        "reward": record["reward"],
        "advantage": record.get("advantage"),
        "stop_reason": record["stop_reason"],
        "reward_components": record["reward_components"],
        "prompt": _prompt(record),
        "screenshot": (record.get("info") or {}).get("screenshot_png"),
        "turns": turns,
        "token_ids": record["token_ids"],
        "loss_mask": record["loss_mask"],
        "logprobs": [round(x, 5) for x in record["logprobs"]],
        "token_advantages": token_advantages(record),
        "segment_starts": list(record.get("segment_starts") or [0]),
    }


def build_view(
    records: Iterable[dict[str, Any]],
    decode_token: Callable[[int], str] | None = None,
    *,
    title: str = "trajectories",
) -> str:
    """The viewer page for ``records`` (from ``TrajectoryStore.read``), as one HTML string.

    Args:
        records: trajectory records, in the order to list them.
        decode_token: maps a token id to its text; None shows ids as ``⟨id⟩``.
        title: the page title (escaped).
    """
    items = [_view_item(r) for r in records]
    vocab: dict[int, str] = {}
    if decode_token is not None:
        for item in items:
            for i in item["token_ids"]:
                if i not in vocab:
                    vocab[i] = decode_token(i)
    data = json.dumps({"trajectories": items, "vocab": vocab}, ensure_ascii=False, allow_nan=False)
    data = data.replace("<", "\\u003c")  # nothing inside can close the <script> element
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", data)


def write_view(
    path: str | Path,
    records: Iterable[dict[str, Any]],
    decode_token: Callable[[int], str] | None = None,
    *,
    title: str = "trajectories",
) -> Path:
    """Write :func:`build_view`'s page to ``path`` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_view(records, decode_token, title=title), encoding="utf-8")
    return path


def viewer_server(path: str | Path, port: int, *, host: str = "127.0.0.1"):
    """An HTTP server (not yet serving) that serves the viewer page at ``path`` and nothing else.

    ``GET``/``HEAD`` of ``/`` or ``/<page name>`` (a query string is ignored) answers the page,
    read from disk at each request; every other path is 404, so the rest of the run directory
    the page usually sits in (checkpoints, ``audit.jsonl``, ``config.toml``, trajectories) is
    never served. The page is self-contained (CSS, JS and data inline), so it has no other
    assets. Other methods get 501 (the standard library's answer).

    Args:
        path: the page :func:`write_view` wrote. port: 0 picks a free port
            (``server.server_address[1]``). host: the interface (default loopback only).

    Raises:
        OSError: the port is taken or not allowed.
    """
    import http.server
    import urllib.parse

    page = Path(path)
    routes = {"/", "/" + urllib.parse.quote(page.name)}

    class ViewerHandler(http.server.BaseHTTPRequestHandler):
        def _answer(self, body: bool) -> None:
            if urllib.parse.urlsplit(self.path).path not in routes:
                self.send_error(404, "only the trajectory viewer is served here")
                return
            data = page.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self) -> None:  # the name http.server dispatches GET to
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return http.server.ThreadingHTTPServer((host, port), ViewerHandler)


def serve(path: str | Path, port: int, *, host: str = "127.0.0.1") -> None:
    """Serve the viewer page at ``path`` on ``http://host:port/`` until interrupted (blocks);
    only the page is served (:func:`viewer_server`).

    Raises:
        OSError: the port is taken or not allowed.
    """
    path = Path(path)
    with viewer_server(path, port, host=host) as server:
        print(
            f"serving http://{host}:{server.server_address[1]}/ (only {path.name}; Ctrl-C stops)",
            flush=True,
        )
        server.serve_forever()
