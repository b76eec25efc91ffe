"""Model resolution: user errors become ModelNotFoundError naming the path; HF dirs pass through."""

from __future__ import annotations

import pytest

from agentic_rl.errors import AgenticRLError, ModelNotFoundError
from agentic_rl.policy.model_loading import cache_dir, load_tokenizer, resolve_model_dir


def test_nonexistent_path(tmp_path):
    missing = tmp_path / "nope" / "model"
    with pytest.raises(ModelNotFoundError, match="model path not found") as exc_info:
        resolve_model_dir(str(missing))
    assert str(missing) in str(exc_info.value)
    assert isinstance(exc_info.value, AgenticRLError)


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no config.json") as exc_info:
        resolve_model_dir(str(tmp_path))
    assert str(tmp_path) in str(exc_info.value)


@pytest.mark.parametrize("name", ["model.bin", "model.safetensors", "model"])
def test_file_that_is_not_gguf(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"\0" * 16)
    with pytest.raises(ModelNotFoundError, match="not a .gguf file") as exc_info:
        resolve_model_dir(str(path))
    assert str(path) in str(exc_info.value)


def test_hf_directory_is_returned_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_dir(str(tmp_path)) == tmp_path


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert resolve_model_dir("~/m") == tmp_path / "m"


def test_cache_dir_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("AGENTIC_RL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "agentic-rl"


def test_default_model_resolves_to_a_converted_checkpoint(model_dir):
    assert (model_dir / "config.json").is_file() and (model_dir / "model.safetensors").is_file()
    assert resolve_model_dir("default") == model_dir  # converted once, then cached


def test_tokenizer_has_chatml_and_padding(tokenizer):
    assert tokenizer.pad_token_id is not None
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") != tokenizer.unk_token_id


def test_tiny_model_dir_loads(tiny_model_dir):
    assert resolve_model_dir(str(tiny_model_dir)) == tiny_model_dir
    assert load_tokenizer(tiny_model_dir).pad_token_id is not None


def test_truncated_safetensors_is_a_model_error(tokenizer, tmp_path):
    """A checkpoint cut short (a killed copy, a full disk) names the directory, not a Rust trace."""
    from agentic_rl.policy.model_loading import load_model
    from tests.tiny_models import save_random_llama

    save_random_llama(tokenizer, tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelNotFoundError, match="holds no loadable causal LM") as exc_info:
        load_model(tmp_path)
    assert str(tmp_path) in str(exc_info.value)
