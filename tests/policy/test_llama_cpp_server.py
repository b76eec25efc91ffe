"""The OpenAI-compatible backend against a real llama.cpp server (llama-cpp-python's
``python -m llama_cpp.server``) serving the shipped SmolLM2 GGUF on 127.0.0.1.

llama-cpp-python has no wheel for this platform and compiles from source (≈ 30 min on 2 cores),
so it is not in the ``test`` extra: ``.ci/run`` installs it. Without it these tests skip.

What llama.cpp's server offers and what it does not: chat completions (with ``tools=``) work;
``/v1/completions`` takes text prompts only (no token-id prompt) and reports sampled tokens as
text, so token-in/token-out training rollouts cannot use it: such requests must come back as
failed trajectories with a clear reason, never as a crash or a zero reward.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python[server] is not installed (.ci/run installs it)"
)
pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")

from agentic_rl.envs import make  # noqa: E402
from agentic_rl.policy.model_loading import default_gguf_path  # noqa: E402
from agentic_rl.policy.openai_compat import OpenAICompatPolicy, make_client, mark_failed_requests  # noqa: E402
from agentic_rl.rollout import RolloutConfig, run_episodes  # noqa: E402
from agentic_rl.rollout.chat_completions import run_chat_episodes  # noqa: E402
from agentic_rl.types import StopReason  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    port = _free_port()
    # stderr to a file, not a pipe: the server logs every refused request, and a full pipe would block it
    log_path = tmp_path_factory.mktemp("llama-server") / "stderr.log"
    log_file = log_path.open("w")
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(default_gguf_path()),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
        "--verbose",
        "False",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama.cpp server exited: {log_path.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("llama.cpp server did not start within 120 s")
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
    log_file.close()


def test_chat_completions_with_tools_run_calculator_episodes(server_url):
    client = make_client(server_url, timeout_s=120, max_retries=1)
    envs = [make("calculator-v0") for _ in range(2)]
    trajs = run_chat_episodes(
        client,
        "smollm2",
        envs,
        [0, 1],
        ["a", "b"],
        max_turns=2,
        max_tokens=256,
        temperature=0.0,
        policy_version=0,
    )
    for t in trajs:
        assert not t.failed, t.failure
        # a reply the server cut at max_tokens ends the episode (MAX_NEW_TOKENS); 256 leaves room to finish
        assert t.stop_reason in (StopReason.TERMINATED, StopReason.MAX_TURNS), [
            m.content for m in t.messages[2:]
        ]
        assert (
            t.messages[2].role == "assistant" and t.messages[2].content.strip()
        )  # the model answered
        assert t.turns and t.policy_version == 0
        scored = envs[0].rubric().apply(t)  # rubric runs on text-only trajectories
        assert scored.reward is not None and "correct_answer" in scored.reward_components


def test_token_in_token_out_is_refused_as_failed_trajectories(server_url, chat):
    client = make_client(server_url, timeout_s=60, max_retries=0)
    policy = OpenAICompatPolicy(client, "smollm2", chat.eos_token_id)
    envs = [make("calculator-v0") for _ in range(2)]
    trajs = run_episodes(
        policy, chat, envs, [0, 1], ["a", "a"], RolloutConfig(max_turns=2, max_new_tokens=8)
    )
    trajs = mark_failed_requests(trajs, policy.failures)
    for t in trajs:
        assert t.failed and t.num_generated_tokens == 0
        assert (
            "inference request failed" in t.failure and "validation" in t.failure
        )  # its 500: ids refused
