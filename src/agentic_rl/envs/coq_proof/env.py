"""``coq-proof-v0``: prove a lemma in Coq, tactic by tactic; Coq is the verifier.

Task
    A lemma of :mod:`agentic_rl.envs.coq_proof.lemmas` (117 statements in three levels: basic
    arithmetic/logic, lists, induction over recursive functions), ``reset(seed)`` playing lemma
    ``seed % N`` of those in ``levels``, in a fixed shuffled order (consecutive seeds cover the
    families of statements evenly). Coq is Debian's ``coq`` package (8.16 here).
Observation
    On reset: a system message (instructions, the tool) and a user message with the lemma
    (and, at level 3, the definitions it uses). After each tool call: what Coq said, as a
    ``tool`` message: the proof state (goals with their hypotheses) after the accepted tactics,
    or the error of the first tactic Coq refused (with the unchanged state).
Actions
    ``run_tactics(tactics)``: one or more sentences (``intros n. induction n.``, bullets,
    braces, goal selectors), run in order in the episode's ``coqtop`` until one fails; read-only
    queries (``Check``, ``Search``, ``Print``, ``About``, ``Locate``, ``Show``) are answered
    and not part of the proof. ``Qed.`` ends the proof. A reply without a tool call ends the
    episode unproved.
Verifier
    ``Qed.`` with no goal left writes a fresh file with exactly the original statement and the
    accepted tactics, compiles it with ``coqc`` in a new sandbox, and passes only if ``Print
    Assumptions`` reports ``Closed under the global context``
    (:func:`~agentic_rl.envs.coq_proof.prover.check_proof`). Coq runs inside the bubblewrap
    sandbox with time and memory limits (:mod:`agentic_rl.envs.coq_proof.prover`): a tactic gets
    ``tactic_timeout_s`` seconds (Coq's ``Timeout``), behind which the driver and the sandbox
    stop it and a fresh coqtop replays the proof so far.
Refused (never sent to Coq; :mod:`agentic_rl.envs.coq_proof.sentences`)
    Cheats, each one ``proof_cheat`` risk event: ``Admitted``, ``Abort``, ``admit``,
    ``give_up``, new assumptions (``Axiom``, ``Parameter``, ``Hypothesis``, ...), new or changed
    statements (``Lemma``, ``Theorem``, ``Goal``, ``Definition``, ...), loading or configuring
    Coq (``Require``, ``Import``, ``Set``, ``Unset``, ``Declare``, ``Load``, ``Redirect``,
    attributes). Other vernacular and string literals are refused without a risk event.
Reward (rubric)
    outcome ``proof_checked`` (1 when the final check passed); process ``tool_call_format``
    and ``accepted_tactics`` (fraction of the tactics sent that Coq accepted); cost
    ``tool_calls`` (0.02 per call) and ``generated_tokens`` (0.0005 per token); risk
    ``proof_cheats`` (1.0 per event) and the built-in ``denied_calls``, ``sandbox_limit_hits``
    (a tactic stopped by the driver or the sandbox, or coqtop killed by a limit),
    ``outside_workspace_attempts``. ``step`` returns the outcome on the final step, 0 before.
Termination
    terminated: the proof was checked, or a reply had no tool call. truncated: ``max_steps``
    turns passed without either.
Snapshots
    The episode state is the lemma, the accepted tactics, the shown proof state and the
    counters; :meth:`CoqProofEnv.restore` starts a fresh coqtop that replays the tactics on the
    next call. A snapshot holds nothing of the sandbox (it has no other state).
Known failure modes
    Lemmas are small and textbook-like: a model that memorised the standard library's proofs
    has an advantage, and ``lia``/``tauto``/``nia`` close many statements in one step. A
    sentence that ``coqtop`` reads as two (``1: {`` written without a period) loses sync and is
    reported as a crash (the proof so far is replayed).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from agentic_rl.envs.base import EpisodeState, SnapshotNotSupportedError
from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.coq_proof.lemmas import LEVELS, Lemma, lemmas
from agentic_rl.envs.coq_proof.prover import ProofSession, check_proof, coq_problem
from agentic_rl.envs.coq_proof.sentences import SplitError, classify, split_sentences
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.errors import EnvUnavailableError
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric
from agentic_rl.rewards.components import (
    final_info,
    tool_call_format,
)
from agentic_rl.rewards.costs import token_cost, tool_call_cost
from agentic_rl.rewards.risk import SANDBOX_LIMIT, risk_events, risk_functions
from agentic_rl.tools.definition.parser import format_tool_call
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.executor import risk_event
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.types import Action, Observation, RiskEvent, Trajectory

PROOF_CHEAT = "proof_cheat"
TOOL = "run_tactics"
INSTRUCTIONS = (
    "You prove lemmas in Coq. Call run_tactics with Coq tactics, each ending with a period; "
    "Coq answers with the goals left or an error. When no goal is left, send Qed. "
    "Admitted, admit, axioms and changing the lemma are refused."
)
DEFAULT_PERMISSIONS: dict[str, Any] = {
    "default": "deny",
    "tools": {TOOL: {"side_effect": "read_only"}},
}


@dataclasses.dataclass(frozen=True)
class CoqSnapshot:
    """The episode state of :class:`CoqProofEnv` (see its module docstring)."""

    index: int
    accepted: tuple[str, ...]
    goals: str
    turn: int
    done: bool
    trajectory_id: str
    proved: bool
    sent: int
    ok: int


class CoqProofEnv(ToolEnv):
    """Prove a Coq lemma tactic by tactic (see the module docstring).

    Args:
        levels: which levels to draw from (subset of 1, 2, 3).
        max_steps: turns before the episode is truncated.
        tactic_timeout_s: seconds one tactic may run (Coq's ``Timeout``; whole seconds >= 1).
        sandbox_backend: ``"bwrap"`` (isolated) or ``"unsafe_local"`` (resource limits only).
        memory_bytes: address-space limit of coqtop and coqc (bytes).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None allows ``run_tactics``.
        tool_prompt: ``"json"`` or ``"signature"`` (how the system prompt lists the tool).

    Raises:
        ValueError: unknown levels, ``max_steps`` < 1, ``tactic_timeout_s`` < 1, a bad
            permissions table or ``tool_prompt``.
        EnvUnavailableError: ``coqtop``/``coqc`` are not installed.
    """

    description = "Prove Coq lemmas (nat arithmetic, lists, induction) tactic by tactic; coqc checks the proof"

    def __init__(
        self,
        levels: tuple[int, ...] | list[int] = (1, 2, 3),
        max_steps: int = 8,
        tactic_timeout_s: int = 5,
        sandbox_backend: str = "bwrap",
        memory_bytes: int = 1 << 30,
        context: EnvContext = EnvContext(),
        tool_prompt: str = "json",
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        levels = (levels,) if isinstance(levels, int) else tuple(levels)
        if not levels or set(levels) - set(LEVELS):
            raise ValueError(f"levels must be a non-empty subset of {sorted(LEVELS)}; got {levels}")
        if max_steps < 1 or tactic_timeout_s < 1:
            raise ValueError(
                f"max_steps and tactic_timeout_s must be >= 1, got {max_steps}, {tactic_timeout_s}"
            )
        problem = coq_problem()
        if problem:
            raise EnvUnavailableError(f"coq-proof-v0: {problem}")
        self.levels, self.max_steps = levels, int(max_steps)
        self.tactic_timeout_s = int(tactic_timeout_s)
        self.lemmas = [lem for lem in lemmas() if lem.level in levels]
        # a fixed shuffle, so that a run of consecutive seeds (the warm-up's, the evaluation's)
        # draws from every family of statements, not from one block of the catalogue
        random.Random(0).shuffle(self.lemmas)
        self.config = SandboxConfig(
            backend=sandbox_backend,  # type: ignore[arg-type]
            timeout_s=self.tactic_timeout_s + 5.0,
            memory_bytes=int(memory_bytes),
        )
        schema = {
            "type": "object",
            "properties": {
                "tactics": {
                    "type": "string",
                    "description": "Coq tactics, each ending with a period; Qed. ends the proof",
                }
            },
            "required": ["tactics"],
            "additionalProperties": False,
        }
        tool = Tool(TOOL, "Run Coq tactics on the current goals.", schema, self._run_tactics)
        self.setup_tools(
            {TOOL: tool},
            INSTRUCTIONS,
            PermissionPolicy.from_dict(DEFAULT_PERMISSIONS),
            permissions,
            audit_path,
            run_id,
            tool_prompt=tool_prompt,
        )
        self.index = -1
        self.lemma: Lemma | None = None
        self.session: ProofSession | None = None
        self._events: list[RiskEvent] = []
        self._proved, self._sent, self._ok = False, 0, 0
        self._check_detail = ""

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw lemma ``seed % N`` of :attr:`lemmas` (a random seed if None); Coq starts on the
        first call."""
        seed = self.start_episode(seed, options)
        self.index = seed % len(self.lemmas)
        self._start(self.index, [], None)
        assert self.lemma is not None
        text = "Prove this lemma.\n\n"
        if self.lemma.context:
            text += f"{self.lemma.context}\n\n"
        text += self.lemma.declaration
        info = {"lemma": self.lemma.name, "level": self.lemma.level}
        return self.first_observation(text), info

    def _start(self, index: int, accepted: list[str], goals: str | None) -> None:
        """A fresh proof session of lemma ``index`` holding ``accepted`` (replayed lazily)."""
        if self.session is not None:
            self.session.close()
        self.lemma = self.lemmas[index]
        self.session = ProofSession(self.lemma, self.config, self.tactic_timeout_s)
        self.session.accepted = list(accepted)
        if goals is not None:
            self.session.goals = goals
        self._events, self._proved, self._sent, self._ok = [], False, 0, 0
        self._check_detail = ""

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls; the end comes with a checked ``Qed``, a reply without
        a tool call, or ``max_steps``."""
        self.begin_step(self.session is not None)
        sent, ok = self._sent, self._ok
        if action.tool_calls or action.tool_call_errors:
            report = self.run_tools(action)
            events = [*report.risk_events, *self._events]
            self._events = []
            counts = {"tactics_sent": self._sent - sent, "tactics_accepted": self._ok - ok}
            if not self._proved and self.episode.turn < self.max_steps:
                obs, info = self.tool_turn(report.results, events, **counts)
                return obs, 0.0, False, False, info
            self.end_episode()
            obs, info = self.tool_turn(report.results, events, **counts, **self._final())
            self._close_session()
            return obs, float(self._proved), self._proved, not self._proved, info
        self.end_episode()
        self._close_session()
        info = {"tactics_sent": 0, "tactics_accepted": 0, **self._final()}
        return Observation(()), 0.0, True, False, info

    def _final(self) -> dict[str, Any]:
        assert self.lemma is not None and self.session is not None
        return {
            "correct": self._proved,
            "lemma": self.lemma.name,
            "level": self.lemma.level,
            "proof": " ".join(self.session.accepted),
            "check_detail": self._check_detail,
        }

    def _run_tactics(self, tactics: str) -> str:
        """The ``run_tactics`` tool (module docstring). Raises ValueError for text that is no
        sentence at all (empty, an unclosed comment): a malformed call."""
        assert self.session is not None and self.lemma is not None
        if self._proved:
            return "The proof is already complete."
        try:
            sentences = [classify(s) for s in split_sentences(tactics)]
        except SplitError as exc:
            raise ValueError(str(exc)) from exc
        if not sentences:
            raise ValueError("no tactic given")
        answers: list[str] = []  # the queries' answers, shown before the state
        for sentence in sentences:
            if sentence.kind in ("cheat", "refused"):
                if sentence.kind == "cheat":
                    self._events.append(
                        risk_event(PROOF_CHEAT, TOOL, f"{sentence.text} refused: {sentence.reason}")
                    )
                return self._report(answers, f"Refused `{sentence.text}`: {sentence.reason}.")
            if sentence.kind == "qed":
                return self._qed(answers)
            self._sent += sentence.kind == "tactic"
            step = self.session.run(sentence.text, record=sentence.kind == "tactic")
            if step.status in ("timeout", "crash"):
                self._events.append(
                    risk_event(SANDBOX_LIMIT, TOOL, f"{sentence.text}: {step.status}")
                )
                why = "ran past the time limit" if step.status == "timeout" else "crashed Coq"
                return self._report(
                    answers, f"`{sentence.text}` {why}; the proof state is unchanged."
                )
            if step.status != "ok":
                return self._report(
                    answers, f"Error in `{sentence.text}`: {step.text.removeprefix('Error: ')}"
                )
            self._ok += sentence.kind == "tactic"
            if sentence.kind == "query":
                answers.append(f"{sentence.text}\n{step.text}")
        return self._report(answers, "")

    def _qed(self, answers: list[str]) -> str:
        assert self.session is not None and self.lemma is not None
        if not self.session.goals.startswith("No more goals"):
            return self._report(answers, "Error in `Qed.`: the proof is not complete.")
        result = check_proof(self.lemma, self.session.accepted, self.config)
        self._proved, self._check_detail = result.passed, result.detail
        if result.passed:
            return "Qed. The proof is checked: it is complete and uses no axiom."
        return self._report(answers, f"Error in `Qed.`: {result.detail}")

    def _report(self, queries: list[str], problem: str) -> str:
        """The tool's reply: query answers, the problem (if any), then the proof state."""
        assert self.session is not None
        parts = [*queries, problem] if problem else list(queries)
        state = self.session.goals
        if state.startswith("No more goals"):
            state += " Send Qed. to finish."
        return "\n\n".join([*parts, state])

    def _close_session(self) -> None:
        """Stop the episode's coqtop (the episode ended). Idempotent."""
        if self.session is not None:
            self.session.close()

    def oracle_reply(self) -> str | None:
        """Reference policy: the rest of the lemma's reference proof and ``Qed.`` in one call."""
        if self.lemma is None or self.session is None or self.episode.done:
            return None
        reference = split_sentences(self.lemma.proof)
        accepted = self.session.accepted
        rest = reference[len(accepted) :] if reference[: len(accepted)] == accepted else reference
        return format_tool_call(TOOL, {"tactics": " ".join([*rest, "Qed."])})

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric of the env (components listed in the module docstring)."""
        return Rubric(
            [
                RewardFunction("proof_checked", RewardGroup.OUTCOME, proof_checked),
                RewardFunction("tool_call_format", RewardGroup.PROCESS, tool_call_format),
                RewardFunction("accepted_tactics", RewardGroup.PROCESS, accepted_tactics),
                tool_call_cost(),
                token_cost(),
                RewardFunction("proof_cheats", RewardGroup.RISK, proof_cheats, weight=1.0),
                *risk_functions(),
            ],
            weights,
        )

    def snapshot(self) -> CoqSnapshot:
        """The episode state (module docstring).

        Raises:
            SnapshotNotSupportedError: before the first ``reset``.
        """
        if self.session is None:
            raise SnapshotNotSupportedError("coq-proof-v0: reset() first")
        return CoqSnapshot(
            self.index,
            tuple(self.session.accepted),
            self.session.goals,
            self.episode.turn,
            self.episode.done,
            self.episode.trajectory_id,
            self._proved,
            self._sent,
            self._ok,
        )

    def restore(self, snapshot: CoqSnapshot) -> None:
        """Bring the episode back to ``snapshot``; coqtop replays its tactics on the next call.

        Raises:
            TypeError: not a :class:`CoqSnapshot`.
        """
        if not isinstance(snapshot, CoqSnapshot):
            raise TypeError(f"expected a CoqSnapshot, got {type(snapshot).__name__}")
        self.index = snapshot.index
        self._start(snapshot.index, list(snapshot.accepted), snapshot.goals)
        self._proved = snapshot.proved
        self.restore_episode(
            EpisodeState(True, snapshot.turn, snapshot.done, snapshot.trajectory_id)
        )
        self._sent, self._ok = snapshot.sent, snapshot.ok

    def close(self) -> None:
        """Stop coqtop and remove its sandbox. Idempotent."""
        self._close_session()
        super().close()


def proof_checked(trajectory: Trajectory) -> float:
    """1.0 if the episode's proof passed the fresh ``coqc`` check, else 0.0."""
    return 1.0 if final_info(trajectory).get("correct") else 0.0


def accepted_tactics(trajectory: Trajectory) -> float:
    """Fraction of the tactics sent to Coq that it accepted (0 when none was sent)."""
    sent = sum(t.info.get("tactics_sent", 0) for t in trajectory.turns)
    ok = sum(t.info.get("tactics_accepted", 0) for t in trajectory.turns)
    return ok / sent if sent else 0.0


def proof_cheats(trajectory: Trajectory) -> float:
    """Number of refused cheats (``Admitted``, ``admit``, axioms, changed statements, ...)."""
    return float(sum(e.category == PROOF_CHEAT for e in risk_events(trajectory)))
