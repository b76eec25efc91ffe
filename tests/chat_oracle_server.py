"""An OpenAI-compatible chat server whose "model" is an env's own oracle (a real process).

``python -m tests.chat_oracle_server ENV_ID --seed-start S --seeds N [--key K] [--wrong]`` prints
its base URL (``http://127.0.0.1:PORT/v1``) on its first stdout line and serves until killed:

- ``GET /v1/models`` lists one model, ``oracle-1``;
- ``POST /v1/chat/completions`` finds the task by the conversation's first user message (among
  the env's tasks of seeds ``S … S+N-1``), replays the conversation's assistant turns into a
  fresh copy of the env, and answers with the oracle's next reply: a ``<tool_call>`` becomes a
  structured ``tool_calls`` entry (as hosted models answer), anything else the message content.
  ``--wrong`` answers ``<answer>-1</answer>`` to everything; ``--key K`` answers 401 to a request
  without ``Authorization: Bearer K``. ``requests.jsonl`` beside ``--log`` keeps the bodies.

Standard library and the torch-free env side of agentic_rl only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agentic_rl.envs import make
from agentic_rl.tools import parse_tool_calls
from agentic_rl.types import Action


class OracleModel:
    """The env's oracle behind a chat API: the reply to a conversation of one of its tasks."""

    def __init__(self, env_id: str, seeds: range):
        self.env_id = env_id
        self.seed_of: dict[str, int] = {}
        env = make(env_id)
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            self.seed_of[next(m.content for m in obs.messages if m.role == "user")] = seed
        env.close()

    def reply(self, messages: list[dict]) -> dict:
        """The assistant message answering ``messages`` (OpenAI format)."""
        question = next(m["content"] for m in messages if m["role"] == "user")
        env = make(self.env_id)
        try:
            env.reset(seed=self.seed_of[question])
            for turn, m in enumerate(x for x in messages if x["role"] == "assistant"):
                text = m.get("content") or ""
                for call in m.get("tool_calls") or []:
                    fn = call["function"]
                    payload = {"name": fn["name"], "arguments": json.loads(fn["arguments"])}
                    text += f"<tool_call>{json.dumps(payload)}</tool_call>"
                calls, errors = parse_tool_calls(text, turn_index=turn)
                env.step(Action(text, tuple(calls), tuple(errors)))
            text = env.oracle_reply() or ""
        finally:
            env.close()
        if text.startswith("<tool_call>"):
            call = json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            function = {"name": call["name"], "arguments": json.dumps(call["arguments"])}
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "oracle-call", "type": "function", "function": function}],
            }
        return {"role": "assistant", "content": text}


def serve(model: OracleModel, key: str, wrong: bool, log_path: str | None) -> ThreadingHTTPServer:
    """A started server on a free port of 127.0.0.1."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._answer(401, {"error": {"message": "invalid api key", "code": 401}})
                return False
            return True

        def do_GET(self):
            if not self._authorized():
                return
            if self.path.rstrip("/").endswith("/models"):
                model_card = {"id": "oracle-1", "object": "model", "created": 0, "owned_by": "test"}
                return self._answer(200, {"object": "list", "data": [model_card]})
            self._answer(404, {"error": {"message": "not found"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self._authorized():
                return
            if log_path:
                with lock, open(log_path, "a") as f:
                    f.write(json.dumps(body) + "\n")
            if body.get("model") != "oracle-1":
                return self._answer(404, {"error": {"message": f"no model {body.get('model')}"}})
            message = (
                {"role": "assistant", "content": "<answer>-1</answer>"}
                if wrong
                else model.reply(body["messages"])
            )
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            choice = {"index": 0, "message": message, "finish_reason": finish}
            usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            answer = {"id": "chat-1", "object": "chat.completion", "created": 0}
            self._answer(200, {**answer, "model": "oracle-1", "choices": [choice], "usage": usage})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("env_id")
    parser.add_argument("--seed-start", type=int, required=True)
    parser.add_argument("--seeds", type=int, required=True)
    parser.add_argument("--key", default="")
    parser.add_argument("--wrong", action="store_true")
    parser.add_argument("--log")
    args = parser.parse_args()
    model = OracleModel(args.env_id, range(args.seed_start, args.seed_start + args.seeds))
    httpd = serve(model, args.key, args.wrong, args.log)
    print(f"http://127.0.0.1:{httpd.server_address[1]}/v1", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    sys.exit(main())
