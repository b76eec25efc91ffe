"""Make the tiny random Llama end its turns (its real end-of-turn id has probability ~1/49,152).

A reply cut by ``max_new_tokens`` ends its episode (``StopReason.MAX_NEW_TOKENS``, the env is not
stepped), so tests that need the env to answer a random model's replies give its ``lm_head`` a
bias toward ``<|im_end|>``. The bias is a real parameter of the model, so every forward pass
(HFPolicy, FastPolicy's fused decoder, the trainer's scoring) sees the same distribution.
"""

from __future__ import annotations

import torch


def bias_toward_eos(model, eos_token_id: int, logit: float = 12.0):
    """Add ``logit`` to the end-of-turn logit of ``model`` (in place; returns it).

    With the tiny model's near-zero logits over 49,152 ids, p(eos) = e^b / (e^b + 49,151):
    b = 12 gives 0.77 (a reply longer than 6 tokens has probability 0.23^6 ≈ 1.5e-4 and other
    tokens still carry context-dependent logprobs); b = 20 gives 0.9999 (every reply is just the
    end-of-turn token).
    """
    bias = torch.zeros(model.lm_head.out_features, dtype=model.lm_head.weight.dtype)
    bias[eos_token_id] = logit
    model.lm_head.bias = torch.nn.Parameter(bias, requires_grad=False)
    return model
