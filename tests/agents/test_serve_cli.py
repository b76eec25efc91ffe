"""``agentic-rl serve-policy`` as a process: unrecorded calls, a recorded rollout, --record."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import openai

from agentic_rl.trajectories import TrajectoryStore


def test_serve_policy_serves_and_records_a_rewarded_rollout(tiny_model_dir, tmp_path):
    store = tmp_path / "served"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "agentic_rl.cli", "serve-policy", "--model", str(tiny_model_dir)]
    cmd += ["--port", "0", "--max-new-tokens", "8", "--record", str(store)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        origin = re.search(r"at (http://[\d.]+:\d+)/v1", line).group(1)
        client = openai.OpenAI(base_url=f"{origin}/v1", api_key="x", max_retries=0)
        assert client.models.list().data[0].id == str(tiny_model_dir)
        messages = [{"role": "user", "content": "hello"}]
        plain = client.chat.completions.create(model="m", messages=messages, max_tokens=4)
        assert plain.usage.completion_tokens <= 4
        scoped = openai.OpenAI(base_url=f"{origin}/rollouts/abc/v1", api_key="x", max_retries=0)
        reply = scoped.chat.completions.create(model="m", messages=messages, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length")
        posted = httpx.post(f"{origin}/rollouts/abc/reward", json={"reward": 0.5})
        assert posted.json()["reward"] == 0.5
        assert httpx.get(f"{origin}/rollouts/abc").status_code == 404  # ended by its reward
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    [record] = list(TrajectoryStore(store).read())
    assert record["trajectory_id"] == "abc" and record["reward"] == 0.5
    assert record["sampling"] is None and sum(record["loss_mask"]) >= 1
