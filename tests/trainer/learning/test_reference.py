"""The KL reference policy: saved at the start of RL, reloaded frozen on resume."""

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from agentic_rl.trainer.learning.reference import REFERENCE_FILE, reference_model, save_reference


def _tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def test_reference_reloads_saved_weights_frozen(tmp_path):
    model = _tiny()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / REFERENCE_FILE
    save_reference(model, path)
    with torch.no_grad():  # RL moves the policy away from its start
        for p in model.parameters():
            p.add_(1.0)
    ref = reference_model(model, path)
    for k, v in ref.state_dict().items():
        assert torch.equal(v, start[k]), k
    assert ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()  # still tied
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert all(p.requires_grad for p in model.parameters())  # the policy itself is untouched
    ids = torch.tensor([[1, 2, 3]])
    assert not torch.allclose(ref(ids).logits, model(ids).logits)


def test_reference_without_a_file_copies_current_weights(tmp_path):
    model = _tiny()
    ref = reference_model(model, tmp_path / "missing.pt")
    for (k, v), w in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(v, w), k
    assert ref.model.embed_tokens.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
