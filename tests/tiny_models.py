"""Tiny random models built from a config, for tests (no download, seconds on CPU)."""

from __future__ import annotations


def save_random_llama(tokenizer, out, **sizes):
    """Save a randomly initialised (seed 0) float32 Llama with the tied embeddings and the
    special tokens of ``tokenizer``, plus the tokenizer, to ``out``; ``sizes`` override the
    tiny defaults (hidden 32, 2 layers, 4 heads, 2 KV heads). Returns ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    dims = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        **{**dims, **sizes},
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
