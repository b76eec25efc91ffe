"""A minimal OpenAI-compatible HTTP server for tests, on 127.0.0.1 (standard library only).

``/v1/completions`` speaks vLLM's token-in/token-out dialect: the prompt is a list of token ids,
the answer carries ``choices[0].token_ids`` and ``logprobs.tokens`` as ``token_id:N`` with
``token_logprobs``. Tokens are sampled from a real (tiny) causal LM at the request's temperature,
with their log-softmax(logits / T) logprobs: the server side of an importance-ratio check.
``/v1/chat/completions`` answers from a script (a list of reply dicts), so the chat client's
handling of structured tool calls can be checked.

``control`` switches behaviour per test: ``fail_text`` (answer 500 when the decoded prompt
contains it), ``sleep_s`` (delay every answer), ``no_ids`` (answer like llama.cpp: text tokens,
no ids). ``requests`` counts the HTTP requests received; ``chat_requests`` and
``completion_requests`` keep the request bodies.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


class StubServer:
    def __init__(
        self, model=None, tokenizer=None, eos_token_id: int = 2, chat_script=None, seed: int = 0
    ):
        self.model, self.tokenizer, self.eos = model, tokenizer, eos_token_id
        self.chat_script = list(chat_script or [])
        self.control: dict = {}
        self.requests = 0
        self.chat_requests: list[dict] = []
        self.completion_requests: list[dict] = []
        self.generator = torch.Generator().manual_seed(seed)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                time.sleep(server.control.get("sleep_s", 0))
                try:
                    if self.path.endswith("/completions") and "chat" not in self.path:
                        status, answer = server.complete(body)
                    elif self.path.endswith("/chat/completions"):
                        status, answer = server.chat(body)
                    else:
                        status, answer = 404, {"error": {"message": "not found"}}
                except BrokenPipeError:
                    return
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @torch.no_grad()
    def complete(self, body: dict):
        self.completion_requests.append(body)
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(i, int) for i in prompt)):
            return 422, {"error": {"message": "prompt must be token ids"}}
        if self.control.get("fail_text") and self.control["fail_text"] in self.tokenizer.decode(
            prompt
        ):
            return 500, {"error": {"message": "injected failure"}}
        temperature = float(body.get("temperature", 1.0))
        ids, logprobs, finish = list(prompt), [], "length"
        for _ in range(int(body.get("max_tokens", 16))):
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            logp = torch.log_softmax(logits / (temperature or 1.0), -1)
            with self.lock:
                token = (
                    int(logp.argmax())
                    if temperature == 0
                    else int(torch.multinomial(logp.exp(), 1, generator=self.generator))
                )
            ids.append(token)
            logprobs.append(float(logp[token]))
            if token == self.eos:
                finish = "stop"
                break
        out = ids[len(prompt) :]
        logprob_block = {
            "tokens": [f"token_id:{t}" for t in out],
            "token_logprobs": logprobs,
            "text_offset": [0] * len(out),
            "top_logprobs": None,
        }
        choice = {
            "index": 0,
            "text": self.tokenizer.decode(out),
            "finish_reason": finish,
            "logprobs": logprob_block,
            "token_ids": out,
        }
        if self.control.get("no_ids"):
            logprob_block["tokens"] = [self.tokenizer.decode([t]) for t in out]
            del choice["token_ids"]
        return 200, {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(out),
                "total_tokens": len(prompt) + len(out),
            },
        }

    def chat(self, body: dict):
        self.chat_requests.append(body)
        reply = self.chat_script.pop(0) if self.chat_script else {"content": "<answer>0</answer>"}
        message = {"role": "assistant", "content": reply.get("content")}
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"srv_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(reply["tool_calls"])
            ]
        return 200, {
            "id": "chat-1",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.get("finish_reason", "stop"),
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
