"""``math-python-v0``: multi-step math word problems solved with a sandboxed, stateful Python tool.

Task
    A seeded problem from reasoning-gym (pinned 0.1.25), one of three levels, ``levels[seed %
    3]``: ``gsm_symbolic`` (GSM8K-style word problems built from symbolic templates),
    ``basic_arithmetic`` (3–5 terms of 2–4 digits with + − × ÷ and parentheses) and
    ``chain_sum`` (4–6 terms of 3–5 digits). Numbers are large enough that a 135M model cannot
    compute them in its head.
Observation
    On reset: a system message with the instructions and the ``python`` tool schema (rendered
    into the prompt, because the default model's chat template ignores tools) and a user
    message with the problem. After a tool turn: one ``tool`` message per call (stdout, stderr,
    the value of a final expression, or the error).
Actions
    Replies with ``<tool_call>{"name": "python", "arguments": {"code": "…"}}</tool_call>``
    blocks (any number of turns; variables persist between calls of one episode), then a final
    reply, one without tool calls, holding exactly one number in ``<answer>…</answer>`` (or, if
    it has no answer tag, in exactly one ``\\boxed{…}``).
Tools
    ``python(code)`` in this episode's :class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox`
    (bubblewrap: no network, private PID namespace, resource limits; a fresh interpreter and
    empty workspace per episode), routed through
    :class:`~agentic_rl.tools.sandbox.env_tools.SandboxedTools`, i.e. the
    :class:`~agentic_rl.tools.governance.executor.ToolExecutor`: permission check, audit record, risk events
    for timeouts and limit hits.
Reward (rubric)
    outcome ``correct_answer``: 1 when the final answer is exactly one number and either the
    task's ``score_answer`` gives it 1 or ``math-verify`` finds it equal to the gold answer
    (so ``279``, ``279.0``, ``\\boxed{279}``, ``558/2``, ``\\frac{558}{2}``, ``$279`` all count;
    ``279 or 280``, ``[279, 280]`` and two answer tags score 0; see
    :mod:`agentic_rl.rewards.math_answers`); ``task_score`` (raw ``score_answer``, weight 0);
    ``verifier_errors`` (1 when math-verify itself failed on the answer, weight 0);
    process ``answer_format`` (exactly one number in the answer) and ``tool_call_format``
    (fraction of tool calls that parsed, were allowed and ran; an exception raised by the code
    itself is shown to the model but is not a format error); cost ``tool_calls`` (0.02 per call) and
    ``generated_tokens`` (0.0005 per sampled token); risk ``denied_calls``,
    ``sandbox_limit_hits``, ``outside_workspace_attempts``.
    ``step`` returns the outcome (1.0/0.0) on the final step and 0 before.
Termination
    terminated = a final reply was given; never truncates (turn and token budgets are the
    rollout engine's).
Difficulty knobs
    ``levels`` (a subset of the three, e.g. ``("chain_sum",)`` for an easy curriculum start)
    and ``settings`` (``{level: {reasoning-gym setting: value}}``, e.g.
    ``{"basic_arithmetic": {"max_digits": 6}}``, ``{"gsm_symbolic": {"difficulty": 0.5}}``),
    merged over the defaults above.
Oracle
    Calls ``python`` once with the computation (the task's expression; for ``gsm_symbolic`` the
    arithmetic steps recovered from the generator's worked solution, each checked against the
    result it states), then answers with the gold answer.
Known failure modes
    A bare reply without the answer tag or box scores 0, as does a number written in words;
    the model may put the answer in the same reply as a tool call, which then counts as a tool
    turn; Python's float division prints ``177.0`` where the gold is ``177`` (both count);
    ``gsm_symbolic`` steps that the parser cannot recover make the oracle's code print only
    the steps it could check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.reasoning.reasoning_gym_env import Grade, ReasoningGymEnv
from agentic_rl.rewards.math_answers import check_answer, extract_final_answer, single_number
from agentic_rl.tools.definition.calculator import evaluate_arithmetic
from agentic_rl.tools.definition.parser import format_tool_call

__all__ = ["MathPythonEnv", "LEVELS", "DEFAULT_SETTINGS", "gsm_program"]

LEVELS = ("gsm_symbolic", "basic_arithmetic", "chain_sum")
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "gsm_symbolic": {},
    "basic_arithmetic": {"min_terms": 3, "max_terms": 5, "min_digits": 2, "max_digits": 4},
    "chain_sum": {"min_terms": 4, "max_terms": 6, "min_digits": 3, "max_digits": 5},
}
INSTRUCTIONS = (
    "You are a helpful assistant that solves math problems. Use the python tool to compute "
    "(variables persist between calls; print what you need to see). When you know the result, "
    "reply with only the final number as <answer>NUMBER</answer>."
)

_STEP = re.compile(r"=\s*[$€£]?\s*(-?\d[\d,]*(?:\.\d+)?)")
_TOKEN = re.compile(r"\d[\d,]*(?:\.\d+)?|[-+*/()x×÷]")


def _step_expression(segment: str) -> str | None:
    """Arithmetic tokens of the text before an ``=`` (``x``/``×`` → ``*``, ``÷`` → ``/``)."""
    tokens = [t.replace(",", "") for t in _TOKEN.findall(segment)]
    tokens = ["*" if t in ("x", "×") else "/" if t == "÷" else t for t in tokens]
    while tokens and not (tokens[0][0].isdigit() or tokens[0] in "(-"):
        tokens.pop(0)
    while tokens and not (tokens[-1][0].isdigit() or tokens[-1] == ")"):
        tokens.pop()
    if sum(t[0].isdigit() for t in tokens) < 2:
        return None
    return " ".join(tokens)


def gsm_program(answer_cot: str) -> list[str]:
    """Python lines ``sK = <expr>`` for the worked solution's arithmetic steps that check out.

    A step is the text before an ``= NUMBER`` in a line of ``answer_cot``; it is kept only when
    its arithmetic (evaluated with the calculator's AST evaluator) equals the stated number.
    Never raises.
    """
    lines: list[str] = []
    for text in answer_cot.splitlines():
        if text.startswith("####"):
            continue
        start = 0
        for match in _STEP.finditer(text):
            expr = _step_expression(text[start : match.start()].split("=")[-1])
            start = match.end()
            if expr is None:
                continue
            try:
                value = evaluate_arithmetic(expr)
                stated = float(match.group(1).replace(",", ""))
            except Exception:  # noqa: BLE001 - an unparsable step is skipped
                continue
            if abs(float(value) - stated) <= 1e-9 * max(1.0, abs(stated)):
                lines.append(f"s{len(lines) + 1} = {expr}")
    return lines


class MathPythonEnv(ReasoningGymEnv):
    """Math word problems with the sandboxed python tool (see the module docstring).

    Args:
        levels: which of ``gsm_symbolic``, ``basic_arithmetic``, ``chain_sum`` to draw from.
        settings: ``{level: {setting: value}}`` merged over :data:`DEFAULT_SETTINGS`.
        permissions, audit_path, run_id, sandbox_backend: as :class:`ReasoningGymEnv`.

    Raises:
        ValueError: an unknown level or setting (named).
    """

    description = (
        "Multi-step math word problems (reasoning-gym) solved with a sandboxed stateful Python tool"
    )
    tool_instructions = INSTRUCTIONS

    def __init__(
        self,
        levels: str | Sequence[str] = LEVELS,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        context: EnvContext = EnvContext(),
        sandbox_backend: str = "bwrap",
    ):
        levels = (levels,) if isinstance(levels, str) else tuple(levels)
        unknown = sorted(set(levels) - set(LEVELS))
        if unknown or not levels:
            raise ValueError(
                f"unknown level(s) {unknown or list(levels)}; known: {', '.join(LEVELS)}"
            )
        merged = {
            lv: {**DEFAULT_SETTINGS[lv], **dict((settings or {}).get(lv, {}))} for lv in levels
        }
        super().__init__(
            levels,
            merged,
            python_tool=True,
            context=context,
            sandbox_backend=sandbox_backend,
        )
        self.levels = levels

    def grade(self, text: str) -> Grade:
        """The :class:`Grade` of a final reply: one number, checked by ``score_answer`` or math-verify.

        Safe on any thread (the rollout engine steps envs on worker threads); a math-verify
        failure is the grade's ``verifier_error``, not a wrong answer in silence.
        """
        assert self.task is not None and self.task.answer is not None
        answer = extract_final_answer(text)
        number = single_number(answer)
        if number is None:
            return Grade(answer, False, 0.0, False)
        score = float(self.task.score(number, self.task.entry))
        if score >= 1.0:
            return Grade(answer, True, score, True)
        verdict = check_answer(answer, self.task.answer)
        return Grade(answer, verdict.correct, score, True, verdict.error)

    def oracle_program(self) -> str:
        """The oracle's python code for the current task (see the module docstring)."""
        assert self.task is not None
        meta = self.task.entry.get("metadata", {})
        if "expression" in meta:
            return f"print({meta['expression']})"
        steps = gsm_program(str(meta.get("answer_cot", "")))
        if not steps:
            return f"print({self.task.answer})"
        return "\n".join(steps) + f"\nprint(s{len(steps)})"

    def oracle_reply(self) -> str | None:
        """Reference policy: run the computation with ``python``, then answer."""
        if self.task is None or self.episode.done:
            return None
        if not self._called:
            return format_tool_call("python", {"code": self.oracle_program()})
        return f"<answer>{self.task.answer}</answer>"
