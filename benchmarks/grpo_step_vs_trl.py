"""GRPO step time: agentic-rl vs TRL's GRPOTrainer, same model, same config, same run.

Both sides train SmolLM2-135M-Instruct (fp32 weights from the shipped GGUF, full fine-tuning,
AdamW) on CPU with: 1 prompt x 4 completions per optimizer step (G = 4), at most
``--max-completion`` tokens per completion, T = 1.0, lr 1e-6, no KL term (TRL's default
beta = 0). Each side runs in its own subprocess, one after the other (never concurrently), and
reports seconds per optimizer step (median, first step excluded), the completion tokens it
sampled per step, and peak RSS.

Completion lengths: at T = 1 a completion ends whenever the model samples end-of-turn, so with
4 completions per step the step time swings with what each side happened to sample (on one
run: 2.2-9.3 s for agentic-rl, 5.3-12.8 s for TRL). In ``single`` mode both sides therefore
sample exactly ``--max-completion`` tokens per completion by default (``--fixed-length``):
TRL through ``generation_kwargs={"min_new_tokens": ...}`` (``generate`` masks end-of-turn
until then), agentic-rl by giving the sampler no end-of-turn id. ``--no-fixed-length`` compares
free-running lengths instead. ``tools`` mode always runs free (a tool call ends at end-of-turn).

Modes (``--mode``):

* ``single``: one turn; "What is a * b? Reply with just the number."; reward: 1 if the product
  appears in the reply, else 0.1 x the share of its characters that are digits
  (:func:`product_score`, the same function on both sides). The partial credit makes the 4
  rewards of a group differ, so every step has non-zero advantages and both sides really
  update. (With a 0/1 reward most groups are all-wrong: agentic-rl then skips the update, as
  groups without signal carry no gradient, while TRL still runs forward and backward; such
  steps would compare a rollout against a rollout plus an update.) TRL: ``GRPOTrainer`` with
  a reward function. agentic-rl: the recipe's ``rl_step`` on an equivalent one-turn env
  registered by this script.
* ``tools``: multi-turn with a calculator tool, up to 2 tool-call rounds + the answer. TRL:
  ``GRPOTrainer(tools=[calculator])`` (its multi-turn tool loop; the tokenizer gets TRL's
  Qwen2.5 ChatML template, which TRL's tool parser recognises and which uses SmolLM2's special
  tokens), after 12 SFT steps (batch 4) on the call format so tool turns really happen.
  agentic-rl: ``calculator-v0`` (``direct`` level), ``max_turns = 3``, after its own warm-up
  (12 steps of batch 4 on oracle demonstrations).

Allocator (``--allocator``): the ``agentic-rl`` command runs its process under mimalloc
(:mod:`agentic_rl.allocator`), TRL runs under glibc's ``malloc``. ``shipped`` (default) compares
the two as they come; ``system`` and ``mimalloc`` put both sides under the same allocator.

``--sampler-dtypes float32 bfloat16`` also times agentic-rl with a bfloat16 sampling copy
(``model.sampler_dtype``; the update's importance ratio corrects the sampler/trainer mismatch),
one of the speed levers the issue allows; TRL samples with its float32 model either way.

The TRL side needs the ``bench`` extra (``pip install -e '.[bench]'``, i.e. ``trl``); without it
the script times agentic-rl alone and says why. ``--model DIR`` runs both sides on another model
(the test suite's smoke run uses a tiny random Llama).
Usage: ``python benchmarks/grpo_step_vs_trl.py --mode single --steps 5 [--sampler-dtypes float32 bfloat16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from agentic_rl.allocator import ENV_SWITCH, active_allocator, allocator_env

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

G = 4
LR = 1e-6


def _tasks(n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(2, 19), rng.randint(2, 19)) for _ in range(n)]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------- TRL
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The arithmetic expression to evaluate, for example "12 * 7".

    Returns:
        The value of the expression.
    """
    from agentic_rl.tools.definition.calculator import evaluate_arithmetic

    return str(evaluate_arithmetic(expression))


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "\n".join(str(m.get("content") or "") for m in completion)


def _final_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    texts = [str(m.get("content") or "") for m in completion if m.get("role") == "assistant"]
    return texts[-1] if texts else ""


def product_score(text: str, answer: int) -> float:
    """1 if ``answer`` appears in ``text``, else 0.1 x the share of characters that are digits."""
    if str(answer) in text.replace(",", ""):
        return 1.0
    return 0.1 * sum(ch.isdigit() for ch in text) / max(len(text), 1)


def product_reward(completions, answer, **kwargs):
    return [product_score(_completion_text(c), a) for c, a in zip(completions, answer)]


def final_answer_reward(completions, answer, **kwargs):
    return [float(str(a) in _final_text(c).replace(",", "")) for c, a in zip(completions, answer)]


def _trl_sft_warmup(model, tok, steps: int) -> None:
    """12 plain SFT steps (batch 4) on user -> tool call -> tool -> answer conversations."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side, tok.padding_side = tok.padding_side, "right"
    model.train()
    rng = random.Random(1)
    for _ in range(steps):
        texts = []
        for _ in range(4):
            a, b = rng.randint(2, 19), rng.randint(2, 19)
            call = {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}},
            }
            msgs = [
                {
                    "role": "user",
                    "content": f"What is {a} * {b}? Use the calculator tool, then state the result.",
                },
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "calculator", "content": str(a * b)},
                {"role": "assistant", "content": f"The result is {a * b}."},
            ]
            texts.append(tok.apply_chat_template(msgs, tools=[calculator], tokenize=False))
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        model(**enc, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    tok.padding_side = side


def trl_missing() -> str | None:
    """Why the TRL side cannot run here (``trl`` not installed), or None."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        return "trl is not installed: pip install -e '.[bench]' (`make test` installs it)"
    return None


def run_trl(
    mode: str, steps: int, max_completion: int, fixed_length: bool, model: str = "default"
) -> dict:
    """TRL GRPOTrainer side; returns seconds and completion tokens per step, and peak RSS."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentic_rl.policy.model_loading import resolve_model_dir

    torch.manual_seed(0)
    model_dir = resolve_model_dir(model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok.padding_side = "left"
    suffix = (
        "Reply with just the number."
        if mode == "single"
        else "Use the calculator tool, then state the result."
    )
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {a} * {b}? {suffix}"}], "answer": a * b}
        for a, b in _tasks(64)
    ]
    kwargs = {}
    if mode == "tools":
        from trl.chat_template_utils import qwen2_5_chat_template

        tok.chat_template = qwen2_5_chat_template
        kwargs["tools"] = [calculator]
        _trl_sft_warmup(model, tok, 12)
        rewards = [final_answer_reward]
    else:
        rewards = [product_reward]

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * G)

    tokens: list[float] = []
    timer = Timer()
    if fixed_length and mode == "single":
        kwargs_gen = {"generation_kwargs": {"min_new_tokens": max_completion}}
    else:
        kwargs_gen = {}
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=G,
        gradient_accumulation_steps=1,
        num_generations=G,
        max_completion_length=max_completion,
        max_tool_calling_iterations=2 if mode == "tools" else None,
        max_steps=steps,
        learning_rate=LR,
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        **kwargs_gen,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[timer],
        **kwargs,
    )
    trainer.train()
    return {"step_s": timer.times, "tokens": tokens, "peak_rss_mb": _peak_rss_mb()}


# ----------------------------------------------------------------------------------- agentic-rl
def _register_product_env() -> None:
    """One-turn product questions, rewarded by :func:`product_score`."""
    from agentic_rl.envs import register
    from agentic_rl.envs.base import Env
    from agentic_rl.rewards import RewardGroup, RewardWeights, Rubric
    from agentic_rl.rewards.rubric import RewardFunction
    from agentic_rl.types import Message, Observation

    class ProductEnv(Env):
        def reset(self, seed=None, options=None):
            self.a, self.b = _tasks(1, seed or 0)[0]
            self.done = False
            return Observation(
                (Message("user", f"What is {self.a} * {self.b}? Reply with just the number."),)
            ), {}

        def step(self, action):
            self.done = True
            return Observation(()), 0.0, True, False, {"answer": self.a * self.b}

        def rubric(self, weights=RewardWeights()):
            def correct(t):
                return product_score(t.turns[-1].action.text, t.turns[-1].info.get("answer"))

            return Rubric([RewardFunction("correct_answer", RewardGroup.OUTCOME, correct)], weights)

    register("bench-product-v0", ProductEnv, "benchmark: one-turn products")


def run_agentic(
    mode: str,
    steps: int,
    max_completion: int,
    fixed_length: bool,
    sampler_dtype: str = "float32",
    model: str = "default",
) -> dict:
    """agentic-rl side: the recipe's set-up (:func:`~agentic_rl.trainer.recipe.setup` and
    :func:`~agentic_rl.trainer.recipe.prepare_rl`: the optimizer; critic and task pool come with setup), warm-up (tools
    mode) and ``rl_step``."""
    from agentic_rl.config import TrainConfig, load_config
    from agentic_rl.trainer.recipe import prepare_rl, rl_step, setup, warmup

    _register_product_env()
    sets = {
        "algorithm.tasks_per_step": 1,
        "algorithm.group_size": G,
        "optim.lr": LR,
        "loss.kl_coef": 0.0,
        "algorithm.steps": steps,
        "rollout.max_new_tokens": max_completion,
        "rollout.temperature": 1.0,
        "eval.base": False,
        "tracking.tensorboard": False,
        "model.sampler_dtype": sampler_dtype,
        "model.path": json.dumps(model),
    }
    if mode == "single":
        sets.update(
            {
                "env.id": "bench-product-v0",
                "rollout.max_turns": 1,
                "warmup.enabled": False,
                "warmup.env_kwargs": "{}",
            }
        )
    else:
        sets.update(
            {
                "env.id": "calculator-v0",
                "env.kwargs": '{levels=["direct"]}',
                "rollout.max_turns": 3,
                "warmup.num_demos": 48,
                "warmup.batch_size": 4,
                "warmup.epochs": 1,
            }
        )
    overrides = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sets.items()]
    config: TrainConfig = load_config(None, overrides=overrides)
    run_dir = tempfile.mkdtemp(prefix="arl-grpo-")
    from pathlib import Path

    run = setup(config, Path(run_dir))
    # as train() does: the optimizer (fused AdamW, as TRL's default adamw_torch_fused), the critic
    # (none for GRPO) and the task pool, before the warm-up
    optimizer = prepare_rl(run)
    if mode == "tools":
        warmup(run, lambda *a: None)
    if fixed_length and mode == "single":
        run.policy.eos_token_id = -1  # an id never sampled: every completion runs to max_completion
    times, tokens, rollouts, updates = [], [], [], []
    for step in range(steps):
        metrics = rl_step(run, step, optimizer, None)
        times.append(metrics["perf/step_time_s"])
        tokens.append(metrics["perf/tokens_per_s"] * metrics["perf/rollout_time_s"])
        rollouts.append(metrics["perf/rollout_time_s"])
        updates.append(metrics["perf/update_time_s"])
    return {
        "step_s": times,
        "tokens": tokens,
        "rollout_s": rollouts,
        "update_s": updates,
        "peak_rss_mb": _peak_rss_mb(),
    }


# ------------------------------------------------------------------------------------------ main
def main() -> None:
    """Run both sides in subprocesses (one at a time) and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["single", "tools"], default="single")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-completion", type=int, default=64)
    parser.add_argument(
        "--fixed-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="single mode: every completion samples exactly --max-completion tokens (default)",
    )
    parser.add_argument(
        "--sampler-dtypes",
        nargs="+",
        choices=["float32", "bfloat16"],
        default=["float32"],
        help="agentic-rl runs once per model.sampler_dtype listed (bfloat16: a bf16 sampling "
        "copy, the importance ratio corrects the mismatch; TRL samples with its fp32 model)",
    )
    parser.add_argument(
        "--allocator",
        choices=["shipped", "system", "mimalloc"],
        default="shipped",
        help="shipped (default): agentic-rl under mimalloc as its command runs, TRL under glibc's "
        "malloc; system or mimalloc: both sides under that allocator",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="default (SmolLM2-135M-Instruct) or a HF model directory, for both sides",
    )
    parser.add_argument("--side", choices=["trl", "agentic-rl"], help=argparse.SUPPRESS)
    parser.add_argument("--sampler-dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        if args.side == "trl":
            result = run_trl(
                args.mode, args.steps, args.max_completion, args.fixed_length, args.model
            )
        else:
            result = run_agentic(
                args.mode,
                args.steps,
                args.max_completion,
                args.fixed_length,
                args.sampler_dtype,
                args.model,
            )
        result["allocator"] = active_allocator()  # what this process really runs under
        print("RESULT " + json.dumps(result))
        return
    results = {}
    no_trl = trl_missing()
    sides = [("agentic-rl", dt) for dt in args.sampler_dtypes] + [("trl", "float32")] * (not no_trl)
    for side, dtype in sides:
        name = side if side == "trl" or dtype == "float32" else f"{side} {dtype}"
        cmd = [
            sys.executable,
            __file__,
            "--side",
            side,
            "--mode",
            args.mode,
            "--steps",
            str(args.steps),
            "--max-completion",
            str(args.max_completion),
            "--sampler-dtype",
            dtype,
            "--model",
            args.model,
            "--fixed-length" if args.fixed_length else "--no-fixed-length",
        ]
        mimalloc = args.allocator == "mimalloc" or (
            args.allocator == "shipped" and side == "agentic-rl"
        )
        env = allocator_env({**os.environ, ENV_SWITCH: "mimalloc" if mimalloc else "system"})
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        results[name] = json.loads(line[len("RESULT ") :])
    fixed = args.fixed_length and args.mode == "single"
    print(
        f"GRPO step, mode={args.mode}: 1 prompt x {G} completions, "
        f"{'exactly' if fixed else '<='} {args.max_completion} tokens, lr {LR}, no KL; "
        f"{args.steps} steps, median without the first"
    )
    print(
        f"{'framework':<19} | {'allocator':<9} | {'s/step':>7} | {'all steps (s)':<40} | {'sampled tokens/step':>19} | "
        f"{'peak RSS MB':>11}"
    )
    med = {}
    for side, r in results.items():
        med[side] = statistics.median(r["step_s"][1:] or r["step_s"])
        steps = ", ".join(f"{t:.1f}" for t in r["step_s"])
        toks = statistics.median(r["tokens"][1:] or r["tokens"]) if r["tokens"] else float("nan")
        print(
            f"{side:<19} | {r['allocator']:<9} | {med[side]:>7.2f} | {steps:<40} | {toks:>19.0f} | "
            f"{r['peak_rss_mb']:>11.0f}"
        )
    for side, r in results.items():
        if side == "trl":
            continue
        skipped = sum(u < 0.05 for u in r["update_s"][1:])
        print(
            f"{side} split (median without the first): "
            f"rollout {statistics.median(r['rollout_s'][1:] or r['rollout_s']):.2f} s, "
            f"update {statistics.median(r['update_s'][1:] or r['update_s']):.2f} s; "
            f"steps without an update (no reward signal): {skipped} of {len(r['update_s'][1:])}"
        )
    if no_trl:
        print(f"TRL side skipped: {no_trl}")
        return
    for side in results:
        if side != "trl":
            print(f"{side} / TRL step time = {med[side] / med['trl']:.2f}x (target <= 0.5)")


if __name__ == "__main__":
    main()
