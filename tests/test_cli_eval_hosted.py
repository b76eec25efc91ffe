"""``agentic-rl eval --base-url``: a hosted model behind an OpenAI-compatible chat API, evaluated
on held-out tasks. Real processes: the CLI runs the real ``openai`` client against a chat server
process whose "model" is the env's oracle (tests/chat_oracle_server.py), so the report's
figures come from the server's replies: 1.0 success from the oracle, 0.0 from a server that
answers -1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")

from agentic_rl.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED_START = 1_000_000  # eval.seed_start of the default config


@contextmanager
def oracle_server(*extra: str, log: Path | None = None):
    """A chat server process for calculator-v0's first 3 held-out tasks; yields its base URL."""
    argv = [sys.executable, "-m", "tests.chat_oracle_server", "calculator-v0"]
    argv += ["--seed-start", str(SEED_START), "--seeds", "3", *extra]
    argv += ["--log", str(log)] if log else []
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _cli(*argv: str, key: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORACLE_KEY": key} if key else dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_eval_of_a_hosted_model_reports_what_the_server_answered(tmp_path):
    args = ["eval", "--env", "calculator-v0", "--episodes", "3", "--api-key-env", "ORACLE_KEY"]
    with oracle_server("--key", "s3cret", log=tmp_path / "requests.jsonl") as url:
        good = _cli(*args, "--base-url", url, "--out", str(tmp_path / "a.json"), key="s3cret")
    assert good.returncode == 0, good.stderr
    with oracle_server("--wrong") as url:  # no key needed: none sent (the variable is unset)
        bad = _cli(*args[:-2], "--base-url", url, "--out", str(tmp_path / "b.json"), "--json")
    assert bad.returncode == 0, bad.stderr
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    assert json.loads(bad.stdout) == b  # --json prints the report --out writes
    assert (a["model"], a["env_id"], a["k"], a["episodes"]) == ("oracle-1", "calculator-v0", 1, 3)
    assert a["success"] == 1.0 and b["success"] == 0.0
    requests = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(requests) == 6  # per task: the tool call, then the answer
    assert all(
        r["temperature"] == 0 and r["tools"][0]["function"]["name"] == "calculator"
        for r in requests
    )
    answers = [r for r in requests if r["messages"][-1]["role"] == "tool"]
    assert len(answers) == 3 and all(r["messages"][-2]["tool_calls"] for r in answers)
    compare = _cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    rows = {row["metric"]: row for row in json.loads(compare.stdout)}
    assert rows["success"]["diff"] == -1.0


def _error_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def test_bad_hosted_eval_input_is_one_error_line(capsys, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    base = ["eval", "--env", "calculator-v0", "--episodes", "2"]
    assert "cannot reach the server" in _error_line(capsys, [*base, "--base-url", closed])
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    line = _error_line(capsys, [*base, "--base-url", closed, "--api-key-env", "NO_SUCH_KEY_VAR"])
    assert "'NO_SUCH_KEY_VAR' is not set" in line
    line = _error_line(capsys, ["eval", "--env", "nope-v0", "--base-url", closed])
    assert "nope-v0" in line
    line = _error_line(capsys, [*base, "--concurrency", "4"])  # a local eval: no server
    assert "options of --base-url" in line
    assert "--concurrency must be" in _error_line(
        capsys, [*base, "--base-url", closed, "--concurrency", "0"]
    )
    monkeypatch.setenv("ORACLE_KEY", "wrong")
    with oracle_server("--key", "s3cret") as url:
        keyed = [*base, "--base-url", url, "--api-key-env", "ORACLE_KEY"]
        assert "HTTP 401" in _error_line(capsys, keyed)
        line = _error_line(capsys, [*keyed, "--model", "oracle-1"])
        assert "all 2 episodes failed" in line and "401" in line
        monkeypatch.setenv("ORACLE_KEY", "s3cret")
        line = _error_line(capsys, [*keyed, "--model", "no-such-model"])
        assert "all 2 episodes failed" in line and "404" in line
