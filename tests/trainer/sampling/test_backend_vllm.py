"""``agentic-rl train`` through ``rollout.backend = "vllm"``: the trainer starts a real vLLM CPU
server (``.venv-vllm``) on a small random Llama, rolls out through it, syncs the full weights
after every RL step and stops the server at the end, leaving no process.

The model has head size 64 (vLLM's CPU attention does not take the head size 8 of the suite's
tiny Llama). Without ``.venv-vllm`` (or ``$AGENTIC_RL_VLLM_PYTHON``) the module skips.
"""

from __future__ import annotations

import math

import pytest

from agentic_rl.policy.vllm_server import vllm_unavailable_reason
from tests.tiny_models import save_random_llama

_SKIP = vllm_unavailable_reason()

pytestmark = [
    pytest.mark.skipif(bool(_SKIP), reason=f"vLLM CPU server unavailable: {_SKIP}"),
    pytest.mark.slow,
]
pytest.importorskip("openai", reason="the optional extra 'openai' is not installed")


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory, tokenizer):
    # head size 64: the smallest vLLM's CPU attention accepts
    return save_random_llama(
        tokenizer, tmp_path_factory.mktemp("small-llama"), hidden_size=128,
        intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip


def test_two_step_training_run_through_a_vllm_server(small_model_dir, tmp_path, monkeypatch):
    from agentic_rl.config import load_config
    from agentic_rl.policy.vllm_server import group_members, port_in_use
    from agentic_rl.trainer.recipe import train
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from agentic_rl.trainer.sampling import backends
    from agentic_rl.trajectories import TrajectoryStore
    from tests.recipe_settings import TWO_RL_STEPS

    built = []
    make = backends.make_backend

    def recording(*args, **kwargs):
        backend = make(*args, **kwargs)
        built.append(backend)
        return backend

    monkeypatch.setattr("agentic_rl.trainer.run.make_backend", recording)
    config = load_config(
        None,
        [
            f"model.path='{small_model_dir}'",
            "model.num_threads=1",
            *TWO_RL_STEPS,
            "tracking.tensorboard=false",
            f"output_dir='{tmp_path}'",
            "rollout.max_new_tokens=16",
            "rollout.backend='vllm'",
            "loss.tis_cap=2.0",
        ],
    )
    run_dir = train(config)
    (backend,) = built
    assert backend.name == "vllm" and backend.version == 2
    rl = [r for r in MetricsLog(run_dir / "metrics.jsonl").rows() if r.get("phase") == "rl"]
    assert [r["rl_step"] for r in rl] == [1, 2]
    for r in rl:
        assert r["perf/weight_sync_s"] > 0.0 and r["rollout/failed"] == 0.0, r
        assert r["rollout/staleness_max"] == 0.0  # synced after every step
        # vLLM float32 against the trainer: a small mismatch (no token's ratio anywhere near 2)
        assert math.isfinite(r["train/mismatch_kl"]) and r["train/mismatch_kl"] < 1e-2, r
        assert r["train/tis_capped_fraction"] == 0.0
        print(
            f"\nstep {r['rl_step']}: weight sync {r['perf/weight_sync_s']:.2f} s, "
            f"mismatch_kl {r['train/mismatch_kl']:.2e}, logprob_diff {r['train/logprob_diff']:.2e}"
        )
    versions = {
        (rec["rl_step"], rec["policy_version"])
        for rec in TrajectoryStore(run_dir / "trajectories").read(phase="rl")
    }
    assert versions == {(1, 0), (2, 1)}
    server = backend.server
    assert not server.running and not port_in_use(server.port)
    assert group_members(server.proc.pid) == []
