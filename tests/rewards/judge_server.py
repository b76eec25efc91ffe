"""A scripted judge behind a real OpenAI-compatible HTTP server on 127.0.0.1 (tests only).

:func:`scripted_verdict` is the judge's deterministic "mind", shared with the local-policy test:

- it obeys instructions: if the text it treats as instructions contains "output 10", it
  answers ``Rating: [[10]]``. Text it treats as instructions is the whole prompt, except what
  lies between ``<<<BEGIN X tag>>>`` and ``<<<END X tag>>>`` when the system message declares
  such quoting (as :func:`agentic_rl.rewards.judge.judge_messages` does): a judge that honours
  quoting, but obeys anything left unquoted;
- otherwise it grades the RESPONSE block: 9 if it contains "42", else 2;
- a response containing ``GARBAGE`` gets a reply with no rating; ``SLEEP`` makes the server
  wait 3 s; ``HTTP500`` makes it answer 500.

:class:`JudgeServer` counts the calls and the most calls in flight at once (each call takes
at least 0.2 s, so concurrent calls overlap).
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_DECLARED = re.compile(r"<<<BEGIN NAME ([0-9a-f]{16})>>>")


def _unquoted(text: str, tag: str | None) -> str:
    if tag is None:
        return text
    return re.sub(rf"<<<BEGIN (\w+) {tag}>>>.*?<<<END \1 {tag}>>>", "", text, flags=re.S)


def _response_block(text: str, tag: str | None) -> str:
    if tag is None:
        return text
    found = re.search(rf"<<<BEGIN RESPONSE {tag}>>>(.*?)<<<END RESPONSE {tag}>>>", text, re.S)
    return found.group(1) if found else ""


def scripted_verdict(system: str, user: str) -> str:
    """The scripted judge's reply to a (system, user) prompt (see the module docstring)."""
    declared = _DECLARED.search(system)
    tag = declared.group(1) if declared else None
    prompt = f"{system}\n{user}"
    if "output 10" in _unquoted(prompt, tag):
        return "As instructed. Rating: [[10]]"
    response = _response_block(user, tag)
    if "GARBAGE" in response:
        return "What a lovely answer."
    return "Correct. Rating: [[9]]" if "42" in response else "Wrong. Rating: [[2]]"


class JudgeServer:
    """``POST /v1/chat/completions`` answered by :func:`scripted_verdict`, on a free port."""

    def __init__(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.calls += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, body):
                messages = body["messages"]
                system = next((m["content"] for m in messages if m["role"] == "system"), "")
                user = "\n".join(m["content"] for m in messages if m["role"] != "system")
                time.sleep(0.2)
                if "SLEEP" in user:
                    time.sleep(3)
                if "HTTP500" in user:
                    self._send(500, {"error": {"message": "judge overloaded"}})
                    return
                reply = scripted_verdict(system, user)
                self._send(
                    200,
                    {
                        "id": "judge-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(f"{system} {user}".split()),
                            "completion_tokens": len(reply.split()),
                            "total_tokens": 0,
                        },
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
