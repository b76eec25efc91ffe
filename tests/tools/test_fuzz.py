"""Seeded, time-bounded fuzz of the tool-call path: parser -> ToolExecutor -> rollout engine (issue 19).

Generated tool-call texts and tool outputs hold lone surrogates (raw and as ``"\\ud800"`` escapes),
NUL, JSON escapes, huge numbers, deep nesting, unclosed and stray tags, duplicated keys and
special tokens (``<|im_end|>``, ``<|endoftext|>``...): 5,000 parser cases, 4,500 executor cases
(3,000 messages, 1,500 raw tool outputs) and 400 engine episodes of up to 3 fuzzed replies each,
with fuzzed tool outputs in half of them. The claim: 0 crashes, no case over 1 s. Time is CPU time
of this process (``time.process_time``), so a machine busy with other work does not fail the test.

A case that fails prints its seed: ``_case_text(random.Random(seed))`` rebuilds it.
"""

from __future__ import annotations

import gc
import json
import random
import time
from typing import Any

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.base import Env
from agentic_rl.policy.scripted import ScriptedPolicy
from agentic_rl.rewards import RewardWeights, Rubric
from agentic_rl.rollout import RolloutConfig, run_episodes
from agentic_rl.tools import calculator, execute_tool_calls, parse_tool_calls, tool
from agentic_rl.tools.definition.parser import in_call_order
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.trajectories.serialize import trajectory_to_record
from agentic_rl.trajectories.store import TrajectoryStore
from agentic_rl.types import Message, Observation, ToolCall, ToolCallError, valid_text

SEED = 19
MAX_CASE_CPU_S = 1.0
SPECIAL = [
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<file_sep>",
    "<repo_name>",
    "<|im_start|>system\n",
]
ATOMS = [
    "\ud800",
    "\udfff",
    "\ud83d",
    "\x00",
    "\\u0000",
    "\\ud800",
    "\\udfff\\ud800",
    "\\ud83d\\ude00",
    "\\u00e9",
    "\u2028",
    "\ufeff",
    "\ufffe",
    "\\",
    "\\\\",
    '"',
    '\\"',
    "}",
    "{",
    "]",
    "[",
    ",",
    ":",
    "\n",
    "\t",
    " ",
    "é",
    "💥",
    "<tool_call>",
    "</tool_call>",
    "<tool_call",
    "tool_call>",
    "null",
    "true",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999999",
    "-0",
    "0x1F",
    "9" * 5000,
    "1" * 4301,
    "0." + "0" * 1000 + "1",
    '"name"',
    '"arguments"',
    '"parameters"',
    '"calculator"',
    '"emit"',
    "```json",
    *SPECIAL,
]
NAMES = ["calculator", "emit", "nope", "", "calculator\\ud800", "emit ", "a" * 100]


def _string(rng: random.Random) -> str:
    """A JSON string literal whose content is fuzz."""
    parts = rng.choices(ATOMS + ["abc", "2+2", "6*7", "x"], k=rng.randint(0, 6))
    body = "".join(
        p.replace("\\", "\\\\").replace('"', '\\"') if rng.random() < 0.5 else p for p in parts
    )
    return f'"{body}"'


def _value(rng: random.Random, depth: int = 0) -> str:
    """JSON-ish text of a value: mostly valid, sometimes broken."""
    roll = rng.random()
    if depth > 3 or roll < 0.35:
        return rng.choice(
            [
                _string(rng),
                str(rng.randint(-(10**6), 10**6)),
                "9" * rng.choice([10, 4300, 4301, 6000]),
                "1e400",
                "-1.5e-400",
                "true",
                "null",
                "NaN",
                rng.choice(ATOMS),
            ]
        )
    if roll < 0.55:
        return (
            "["
            + ", ".join(_value(rng, depth + 1) for _ in range(rng.randint(0, 4)))
            + rng.choice(["]", "]", ""])
        )
    if roll < 0.6:
        n = rng.choice([50, 900, 1100, 5000])
        return rng.choice(["[" * n + "]" * n, '{"a": ' * n + "1" + "}" * n, "[" * n])
    keys = [
        rng.choice(['"expression"', '"text"', '"seed"', '"x"', _string(rng)])
        for _ in range(rng.randint(0, 4))
    ]
    return (
        "{"
        + ", ".join(f"{k}: {_value(rng, depth + 1)}" for k in keys)
        + rng.choice(["}", "}", "", "}}"])
    )


def _call(rng: random.Random) -> str:
    """One ``<tool_call>`` block, good or broken."""
    name = rng.choice(NAMES)
    if name == "calculator" and rng.random() < 0.5:
        args = json.dumps(
            {
                "expression": rng.choice(
                    [
                        "2+2",
                        "6 * 7",
                        "1/0",
                        "2**99999",
                        "(" * 500 + "1" + ")" * 500,
                        "9" * 5000,
                        "1e308*10",
                        "__import__('os')",
                    ]
                )
            }
        )
    elif name == "emit" and rng.random() < 0.6:
        args = json.dumps({"seed": rng.randint(0, 10**9)})
    else:
        args = _value(rng)
    key = rng.choice(['"arguments"', '"arguments"', '"parameters"', '"args"'])
    body = f'{{"name": "{name}", {key}: {args}}}'
    if rng.random() < 0.15:
        body = f'{{"name": "{name}", {key}: {json.dumps(args)}}}'  # double-encoded arguments
    if rng.random() < 0.2:  # mutate: insert, delete or replace characters
        chars = list(body)
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(chars) + 1)
            op = rng.random()
            if op < 0.4:
                chars.insert(i, rng.choice(ATOMS))
            elif op < 0.7 and i < len(chars):
                del chars[i]
            elif i < len(chars):
                chars[i] = rng.choice(ATOMS)
        body = "".join(chars)
    close = rng.choice(
        ["</tool_call>"] * 6 + ["", "</tool_call", " junk </tool_call>", "}</tool_call>"]
    )
    return f"<tool_call>{rng.choice(['', ' ', chr(10)])}{body}{close}"


def _case_text(rng: random.Random) -> str:
    """A model message: calls mixed with prose, fuzz atoms and special tokens."""
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(
            ["<tool_call>", "<tool_call>{", '<tool_call>"x', "<tool_call>[1,"]
        ) * rng.randint(1, 5000)
    if roll < 0.1:
        return "".join(rng.choices(ATOMS, k=rng.randint(1, 60)))
    parts = []
    for _ in range(rng.randint(1, 4)):
        parts.append(
            rng.choice(
                [
                    "",
                    "Let me compute. ",
                    "The answer is <answer>4</answer>. ",
                    rng.choice(SPECIAL),
                    rng.choice(ATOMS),
                ]
            )
        )
        parts.append(_call(rng))
    return "".join(parts)


def _output(seed: int) -> str:
    """A tool output built from ``seed``: surrogates, NUL, special tokens, long runs, fake notices."""
    rng = random.Random(seed)
    pieces = rng.choices(
        ATOMS + ["ok", "Out: 42", "…[truncated 5 chars]", "x" * 3000], k=rng.randint(0, 12)
    )
    return "".join(pieces)


@tool
def emit(seed: int) -> str:
    """Return a fuzzed output.

    Args:
        seed: which output.
    """
    return _output(seed)


TOOLS = {"calculator": calculator, "emit": emit}
POLICY = PermissionPolicy.allow_all({"calculator": "read_only", "emit": "read_only"})


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_encodable(value: Any) -> bool:
    return _encodable(json.dumps(value, ensure_ascii=False, default=str))


def _timed(fn, *args, **kwargs):
    """(result, CPU seconds) of one call, with the cyclic GC paused: in the full suite a gen-2
    collection over the process's objects once put 1.03 s on a 0.02 s case."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time()
        out = fn(*args, **kwargs)
        return out, time.process_time() - start
    finally:
        if enabled:
            gc.enable()


def test_fuzz_parser():
    rng = random.Random(SEED)
    worst = 0.0
    for case in range(5000):
        seed = rng.randrange(2**32)
        text = _case_text(random.Random(seed))
        (calls, errors), seconds = _timed(parse_tool_calls, text, turn_index=case % 7)
        worst = max(worst, seconds)
        assert seconds < MAX_CASE_CPU_S, f"seed {seed}: {seconds:.2f} s"
        assert all(isinstance(c, ToolCall) for c in calls) and all(
            isinstance(e, ToolCallError) for e in errors
        )
        for c in calls:
            assert _encodable(c.name) and _encodable(c.raw) and _json_encodable(c.arguments), (
                f"seed {seed}"
            )
            assert isinstance(c.arguments, dict) and c.name.strip()
        assert all(_encodable(e.raw) and _encodable(e.message) for e in errors), f"seed {seed}"
        order = in_call_order(calls, errors, turn_index=case % 7)
        assert [cid for cid, _ in order] == [
            f"call_{case % 7}_{k}" for k in range(len(calls) + len(errors))
        ]
    print(f"parser: 5000 cases, slowest {worst * 1000:.1f} ms CPU")


def test_fuzz_executor(tmp_path):
    rng = random.Random(SEED + 1)
    audited = ToolExecutor(
        TOOLS, POLICY, AuditLog(tmp_path / "audit.jsonl"), {"run_id": "fuzz"}, max_chars=500
    )
    plain = ToolExecutor(TOOLS, POLICY, max_chars=500)
    worst, records = 0.0, 0
    for case in range(3000):
        seed = rng.randrange(2**32)
        calls, errors = parse_tool_calls(_case_text(random.Random(seed)), turn_index=1)
        # every 10th case audited (one fsync per record: a message of 5,000 bad blocks goes unaudited)
        executor = audited if case % 10 == 0 and len(calls) + len(errors) <= 20 else plain
        report, seconds = _timed(executor.execute, calls, errors, trajectory_id=f"t{case}", turn=1)
        records += len(report.results) if executor is audited else 0
        worst = max(worst, seconds)
        assert seconds < MAX_CASE_CPU_S, f"seed {seed}: {seconds:.2f} s"
        assert len(report.results) == len(calls) + len(errors)
        assert [r.call_id for r in report.results] == [
            f"call_1_{k}" for k in range(len(report.results))
        ]
        assert all(_encodable(r.content) for r in report.results), f"seed {seed}"
        if case % 5 == 0:  # execute_tool_calls gives the same observations
            plain_results = execute_tool_calls(calls, errors, TOOLS, max_chars=500)
            assert [(r.ok, r.content) for r in plain_results] == [
                (r.ok, r.content) for r in report.results
            ]
    # raw tool outputs, straight through the executor
    for case in range(1500):
        call = ToolCall("emit", {"seed": case}, raw="", id="call_0_0")
        report, seconds = _timed(plain.execute, [call], [], trajectory_id="o", turn=0)
        assert seconds < MAX_CASE_CPU_S and _encodable(report.results[0].content), (
            f"output seed {case}"
        )
    assert (
        len(AuditLog(tmp_path / "audit.jsonl").read()) == records
    )  # every audited call has its record
    print(f"executor: 4500 cases, {records} audit records, slowest {worst * 1000:.1f} ms CPU")


class EmitEnv(Env):
    """Every turn's calls run through a ToolExecutor offering ``calculator`` and ``emit``; no calls ends it."""

    env_id = "fuzz-emit-v0"

    def __init__(self):
        self.executor = ToolExecutor(TOOLS, POLICY, max_chars=800)
        self.turn = 0

    def reset(self, seed=None, options=None):
        self.turn = 0
        return Observation(
            (Message("system", "Use the tools."), Message("user", f"Task {seed}."))
        ), {}

    def step(self, action):
        self.turn += 1
        if not (action.tool_calls or action.tool_call_errors):
            return Observation(()), 1.0, True, False, {}
        report = self.executor.execute(
            action.tool_calls, action.tool_call_errors, trajectory_id="e", turn=self.turn - 1
        )
        return (
            Observation(
                tuple(Message("tool", r.content) for r in report.results),
                tool_results=report.results,
            ),
            0.0,
            False,
            False,
            {},
        )

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        return Rubric([], weights)


@pytest.mark.parametrize("env_id", ["calculator-v0", "fuzz-emit-v0"])
def test_fuzz_rollout_engine(chat, env_id, tmp_path):
    """Episodes of fuzzed replies: the batch always finishes, no episode fails, the store takes them all.

    Replies are made valid text first: a real policy's text is decoded from token ids and cannot hold a
    lone surrogate (its escapes, ``"\\ud800"``, it can, and those are fuzzed).
    """
    rng = random.Random(SEED + (2 if env_id == "calculator-v0" else 3))
    config = RolloutConfig(max_turns=3, max_new_tokens=384, max_total_tokens=4096)
    trajectories, worst = [], 0.0
    for batch in range(25):
        envs = [make(env_id) if env_id == "calculator-v0" else EmitEnv() for _ in range(8)]
        texts = {
            (i, turn): valid_text(_case_text(random.Random(rng.randrange(2**32))))
            for i in range(8)
            for turn in range(3)
        }
        policy = ScriptedPolicy(
            chat,
            lambda i, ctx, texts=texts: texts.get((i, ctx.count("<|im_start|>assistant") - 1), ""),
        )
        trajs, seconds = _timed(run_episodes, policy, chat, envs, list(range(8)), ["g"] * 8, config)
        worst = max(worst, seconds / 8)
        assert seconds / 8 < MAX_CASE_CPU_S, f"batch {batch}: {seconds:.2f} s"
        assert len(trajs) == 8 and not [t.failure for t in trajs if t.failed]
        for t in trajs:
            assert (
                len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) <= config.max_total_tokens
            )
            assert all(_encodable(m.content) for m in t.messages)
        trajectories += trajs
    assert TrajectoryStore(tmp_path / "store").append(
        [trajectory_to_record(t) for t in trajectories]
    ) == len(trajectories)
    turns = sum(len(t.turns) for t in trajectories)
    print(
        f"engine ({env_id}): {len(trajectories)} episodes, {turns} turns, slowest {worst * 1000:.1f} ms CPU/episode"
    )
