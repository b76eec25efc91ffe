"""Named models (``model.path = "gemma3-270m"``, issue 35): chunk packages located, assembled,
hash-checked and converted once; a missing package is one error naming the pip command; Gemma 3's
chat template (supplied: the base model's GGUF has none) is Gemma's published format and renders a
multi-turn tool episode span by span exactly as the whole conversation, token for token.

The template tests take the Gemma 3 270M tokenizer from the GGUF header of the first chunk package
(tests/chat_families.py, ``make test-assets``); the resolution test needs the four chunk packages
(``make install-models``). Each skips with that reason where they are missing.
"""

from __future__ import annotations

import copy
import hashlib

import pytest

from agentic_rl.errors import ModelNotFoundError
from agentic_rl.policy.chat_template import TemplateChatFormat, make_chat_format
from agentic_rl.policy.model_loading import cache_dir, resolve_model_dir
from agentic_rl.policy.named_models import (
    GEMMA3_270M,
    GEMMA3_CHAT_TEMPLATE,
    NAMED_MODELS,
    NamedModel,
    chunk_paths,
    named_checkpoint,
)
from agentic_rl.types import Message, StopReason
from tests.chat_families import family_tokenizer, sdist_template
from tests.policy.test_chat_template import REPLIES, _check_contexts_and_sampled_ids, _episode


def _gemma3_tokenizer():
    """Gemma 3 270M's tokenizer (GGUF header of the first chunk) with the supplied template."""
    try:
        tok = copy.deepcopy(family_tokenizer("gemma", cache_dir() / "test-tokenizers"))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    tok.chat_template = GEMMA3_CHAT_TEMPLATE
    return tok


CONVERSATION = [
    {"role": "user", "content": "  What is 6 * 7?\n"},
    {"role": "assistant", "content": "```tool_code\ncalculator(expression='6 * 7')\n```"},
    {"role": "user", "content": "```tool_output\n42\n```"},
    {"role": "assistant", "content": "It is 42."},
    {"role": "user", "content": "Thanks."},
]


@pytest.mark.parametrize("turns", [1, 2, 5])
def test_the_gemma3_template_is_gemma_s_published_format(turns):
    tok = _gemma3_tokenizer()
    try:  # Gemma's format, as llama.cpp ships it (Gemma 2's template)
        gemma2 = sdist_template("google-gemma-2-2b-it.jinja")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    messages = CONVERSATION[:turns]
    for generation in (False, True):
        ours = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
        theirs = tok.apply_chat_template(
            messages, chat_template=gemma2, tokenize=False, add_generation_prompt=generation
        )
        assert ours == theirs
    # Gemma 3 takes a system message as the first paragraph of the first user turn (the user's
    # text trimmed, the system text not)
    system = [{"role": "system", "content": "Be brief."}, *messages]
    first = "Be brief.\n\n" + messages[0]["content"].strip()
    folded = [{"role": "user", "content": first}, *messages[1:]]
    assert tok.apply_chat_template(system, tokenize=False) == tok.apply_chat_template(
        folded, chat_template=gemma2, tokenize=False
    )
    assert tok.apply_chat_template(system, tokenize=False).startswith(
        "<bos><start_of_turn>user\nBe brief.\n\nWhat is 6 * 7?<end_of_turn>\n"
    )


def test_gemma3_270m_renders_a_multi_turn_tool_episode_token_for_token():
    tok = _gemma3_tokenizer()
    chat = make_chat_format(tok, "gemma3-270m")  # checked once: the probe episode, span by span
    assert isinstance(chat, TemplateChatFormat)
    traits = (chat.tool_format.name, chat.end_of_turn, chat.system_role, chat.tool_role)
    assert traits == ("gemma", "<end_of_turn>", True, False)
    assert chat.reasoning_markers is None and not chat.tools_block
    # a real episode: two tool rounds (one call, then two), user feedback, a final answer
    traj, log, env = _episode(chat, REPLIES)
    assert traj.stop_reason == StopReason.TERMINATED and len(traj.turns) == 4
    assert [calls for calls, _ in env.seen] == [["calculator"], ["calculator"] * 2, [], []]
    # before every reply the fed context is apply_chat_template of the conversation so far, token
    # for token; the trained ids are the sampled ids; one stream (no context rebuild)
    _check_contexts_and_sampled_ids(tok, chat, traj, log)
    assert traj.segment_starts == (0,)
    first_reply = traj.messages[2]
    assert first_reply.role == "assistant"
    assert first_reply.content.startswith("```tool_code\ncalculator(expression=")
    # tool results are user turns of tool_output blocks; the task's special-token text stays text
    prompt = chat.decode(log[-1][0].context_ids)
    assert "<start_of_turn>user\n```tool_output\n400\n```\n\n```tool_output\n50.0\n```" in prompt
    assert prompt.count("<start_of_turn>") == 4 + 3 + 1  # user turns, replies, the next header
    assert chat.encode(prompt)[0] == tok.bos_token_id


def _fake_packages(tmp_path, monkeypatch, contents: list[bytes]) -> tuple[tuple[str, str], ...]:
    """Installable-looking packages ``fakechunk0..N`` (on sys.path) holding ``data/c`` each."""
    for i, data in enumerate(contents):
        folder = tmp_path / "site" / f"fakechunk{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "data" / "c").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return tuple((f"fakechunk{i}", "data/c") for i in range(len(contents)))


def test_chunks_are_assembled_hash_checked_and_converted_once(tmp_path, monkeypatch, tokenizer):
    from tests.tiny_models import save_random_llama

    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))
    parts = [b"GGUF" + b"a" * 3000, b"b" * 5000, b"c" * 7]
    chunks = _fake_packages(tmp_path, monkeypatch, parts)
    whole = b"".join(parts)
    model = NamedModel(
        "fake", "a fake", ("fake-part==1",), chunks, hashlib.sha256(whole).hexdigest()
    )
    seen = []

    def convert(gguf, out, template):  # stands in for transformers' GGUF loader
        seen.append((gguf.read_bytes(), template))
        save_random_llama(tokenizer, out)

    target = named_checkpoint(model, convert)
    assert seen == [(whole, None)] and (target / "model.safetensors").is_file()
    assert named_checkpoint(model, convert) == target and len(seen) == 1  # cached
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no GGUF left over

    wrong = NamedModel("fake2", "a fake", ("fake-part==1",), chunks, "0" * 64)
    with pytest.raises(ModelNotFoundError, match=r"SHA-256 .* not the pinned .*--force-reinstall"):
        named_checkpoint(wrong, convert)
    assert len(seen) == 1 and sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_missing_package_is_one_error_line_naming_the_pip_command(monkeypatch, capsys):
    from agentic_rl.cli import main

    missing = NamedModel(
        "tiny-missing",
        "a model whose packages are absent",
        ("tiny-missing-part1==1.0", "tiny-missing-part2==1.0"),
        (("tiny_missing_part1", "data/x"), ("tiny_missing_part2", "data/y")),
        "0" * 64,
    )
    with pytest.raises(ModelNotFoundError) as info:
        chunk_paths(missing)
    assert "tiny-missing-part1 is missing" in str(info.value)
    monkeypatch.setitem(NAMED_MODELS, "tiny-missing", missing)
    rc = main(["eval", "--model", "tiny-missing", "--episodes", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: model 'tiny-missing' (a model whose packages are absent)")
    assert err[0].endswith(
        "run `pip install --no-deps tiny-missing-part1==1.0 tiny-missing-part2==1.0`"
    )


def test_gemma3_270m_resolves_to_a_gemma3_checkpoint_with_its_template_and_generates():
    try:
        chunk_paths(GEMMA3_270M)
    except ModelNotFoundError as exc:
        pytest.skip(f"{exc} (make install-models)")
    import torch

    from agentic_rl.policy.model_loading import load_model, load_tokenizer

    model_dir = resolve_model_dir("gemma3-270m")  # converted once per machine into the cache
    assert model_dir.name.startswith("gemma3-270m-") and model_dir.parent == cache_dir() / "models"
    tok = load_tokenizer(model_dir)
    assert tok.chat_template == GEMMA3_CHAT_TEMPLATE
    model = load_model(model_dir)
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size) == ("gemma3_text", 18, 640)
    assert cfg.vocab_size == len(tok) == 262144
    chat = make_chat_format(tok, "gemma3-270m")
    assert chat.tool_format.name == "gemma"
    # the de-quantized base model continues a sequence (greedy): the weights and architecture hold
    ids = chat.encode("<bos>Monday, Tuesday, Wednesday, Thursday,")
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert chat.decode(out[0, len(ids) :].tolist()).startswith(" Friday")
    prompt = chat.render_prompt([Message("user", "Hi")])
    assert prompt == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_a_two_step_rl_run_in_gemma3_270m_s_format(tmp_path):
    """The trainer on a tiny random Gemma 3 with gemma3-270m's tokenizer and supplied template:
    the system prompt folded by the template itself (Gemma 2's, in the per-family smoke run, has
    no system role), tool_code demonstrations, RL steps."""
    import math

    from agentic_rl.config import load_config
    from agentic_rl.trainer.recipe import train
    from agentic_rl.trainer.records.run_dir import MetricsLog
    from agentic_rl.trajectories import TrajectoryStore
    from tests.recipe_settings import TWO_STEP_SMOKE
    from tests.tiny_models import save_random_family_model

    model = save_random_family_model(_gemma3_tokenizer(), tmp_path / "model", "gemma")
    config = load_config(
        None,
        [
            f"model.path='{model}'",
            *TWO_STEP_SMOKE,
            "rollout.max_new_tokens=24",
            "optim.skip_zero_advantage=false",  # random weights: no informative group
            f"output_dir='{tmp_path / 'runs'}'",
        ],
    )
    run_dir = train(config)
    rows = MetricsLog(run_dir / "metrics.jsonl").rows()
    assert [r["rl_step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in rows if "train/loss" in r)
    demos = list(TrajectoryStore(run_dir / "trajectories").read_trajectories(phase="warmup"))
    assert demos and all(t.reward_components["correct_answer"] == 1.0 for t in demos)
    for demo in demos:
        assert demo.messages[2].content.startswith("```tool_code\ncalculator(expression=")
        assert [c.name for c in demo.turns[0].action.tool_calls] == ["calculator"]
        assert demo.turns[0].token_ids[0] == 2  # <bos>, once, from the template
        assert demo.turns[0].token_ids.count(2) == 1


def test_a_named_models_recipe_fills_only_what_the_command_line_leaves_open():
    """``train --model gemma3-270m`` gets the model's measured learning rate (the default 3e-5
    collapses it after one RL step, docs/training_runs.md); ``--set optim.lr`` still wins, and
    ``--set model.path=gemma3-270m`` gets the recipe too; other models get none."""
    from argparse import Namespace

    from agentic_rl.cli.main import model_overrides
    from agentic_rl.errors import AgenticRLError

    assert model_overrides(Namespace(model="gemma3-270m", set=[])) == [
        'model.path="gemma3-270m"',
        "optim.lr=3e-6",
    ]
    assert model_overrides(Namespace(model="gemma3-270m", set=["optim.lr=1e-5"])) == [
        'model.path="gemma3-270m"'
    ]
    assert model_overrides(Namespace(model=None, set=["model.path='gemma3-270m'"])) == [
        "optim.lr=3e-6"
    ]
    assert model_overrides(Namespace(model="default", set=[])) == ['model.path="default"']
    assert model_overrides(Namespace(model=None, set=[])) == []
    with pytest.raises(AgenticRLError, match="both name the model"):
        model_overrides(Namespace(model="default", set=["model.path=x"]))
