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


#: the transformers config class of each family of tests/chat_families.py
_FAMILY_CONFIGS = {
    "qwen2.5": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "llama3": "LlamaConfig",
    "gemma": "Gemma3TextConfig",
    "deepseek-r1": "Qwen2Config",
}


def save_random_family_model(tokenizer, out, family: str):
    """Save a randomly initialised (seed 0) float32 model of ``family``'s architecture (Qwen2,
    Qwen3, Llama, Gemma 3 text) at the tiny sizes of :func:`save_random_llama`, with
    ``tokenizer`` (and its chat template), to ``out``. Returns ``out``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    config_class = getattr(transformers, _FAMILY_CONFIGS[family])
    extra = {"head_dim": 8} if family in ("qwen3", "gemma") else {}
    cfg = config_class(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id
        if tokenizer.pad_token_id is not None
        else tokenizer.eos_token_id,
        **extra,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
