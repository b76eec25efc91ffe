"""``memory-recall-v0``: remember a customer's profile across sessions whose history is wiped.

Task
    One episode is a sequence of *sessions* with one fictional customer (seeded, see
    :mod:`agentic_rl.envs.memory_recall.tasks`). Session 1 reveals the customer's profile
    (``num_facts`` facts such as a codeword or a home city). Level ``update``: session 2 says one
    fact changed. Each later session asks one multiple-choice question about a fact (8
    options; the current value is right).
Observation
    On reset: the system message (instructions and, with ``memory=True``, the memory tools'
    schemas) and the first session's user message. Between sessions the conversation is
    **wiped**: ``Observation.context_reset`` is True and the step's observation is the new session's
    user message (it says that history was wiped and lists the results of the previous reply's
    tool calls); the new context is the system message followed by that message. A rollout
    engine that honours the flag starts that new context there (see
    :mod:`agentic_rl.rollout.context`); within a session, ``memory_search`` results come back as
    ``tool`` messages.
Actions and sessions
    A reply that calls ``memory_search`` gets the results and the session goes on; the first
    reply without a ``memory_search`` call ends the session (its other tool calls run first).
    In a question session that reply is graded: exactly one ``<answer>OPTION</answer>``.
    A session also ends, unanswered, after ``max_session_turns`` replies.
Tools
    ``memory_write``, ``memory_search``, ``memory_update``, ``memory_delete``
    (:mod:`agentic_rl.memory.tools`) on a :class:`~agentic_rl.memory.store.MemoryStore`, plus
    ``extra_tools``; all through a :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission
    check, audit when ``audit_path`` is set). ``memory=False`` offers no memory tools (calls to
    them are unknown-tool errors): the control showing memory is needed.
Memory scope
    ``scope="episode"`` (default): a private store per episode (namespace = trajectory id),
    cleared on the next ``reset`` and on ``close``; in memory unless ``memory_path`` is set.
    ``task_family`` / ``persistent``: entries in ``memory_path`` outlive the episode (namespace
    ``namespace`` for ``task_family``); do not share such a file between the parallel members
    of a GRPO group unless that is the experiment. ``max_entries`` / ``when_full``: the store's
    size limit and policy when full (default: refuse the write with an error observation).
Reward (rubric)
    outcome ``correct_answers`` (fraction of questions answered right; 1 = success);
    process ``answer_format`` (fraction of question sessions whose final reply had exactly one
    answer tag naming an offered option);
    cost ``memory_ops`` (0.01 per memory call), ``unused_writes`` (0.05 per entry written and
    never retrieved: junk), ``generated_tokens`` (0.0005 per sampled token);
    logged only (weight 0): ``memory_writes``, ``memory_reads``, ``memory_updates``,
    ``memory_deletes``, ``memory_hit_rate``, ``memory_store_size``, ``memory_tokens``;
    risk: the built-in ``denied_calls``, ``sandbox_limit_hits``, ``outside_workspace_attempts``.
    ``step`` returns 1/num_questions for each right answer, 0 otherwise.
Termination
    terminated after the last session; never truncated by the env (budgets are the engine's).
    Turns needed by the oracle: 1 (reveal) + 2 per question (+ 2 for the update session), i.e.
    3 with the defaults (``num_questions=1``, level ``recall``), within the default rollout budget.
Oracle
    Sees only the current session (as an agent whose history was wiped): reveal -> one
    ``memory_write`` with the whole profile; update -> search, then ``memory_update`` of the
    entry it found; question -> search, then the option that appears in the search results, or,
    with nothing found, the first option (a guess: right with probability 1/8).
Known failure modes
    With an engine that ignores ``context_reset`` the old sessions stay in the token context,
    so a model can answer without memory; the env is then still valid but memory is optional.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from agentic_rl.envs.context import EnvContext
from agentic_rl.envs.memory_recall.tasks import FACTS, RecallTask, make_task
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.memory import metrics as mm
from agentic_rl.memory.store import MemoryStore, Scope
from agentic_rl.memory.tools import MEMORY_SIDE_EFFECTS, MemoryToolkit
from agentic_rl.rewards import RewardFunction, RewardGroup, RewardWeights, Rubric, extract_answer
from agentic_rl.rewards.costs import token_cost
from agentic_rl.rewards.risk import risk_functions
from agentic_rl.tools.definition.parser import format_tool_call
from agentic_rl.tools.definition.tool import Tool
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import Action, Message, Observation, RiskEvent, ToolResult, Trajectory

INSTRUCTIONS = (
    "You are a customer-service assistant. The conversation is wiped between sessions; only notes you store "
    "with the memory tools survive. A reply that calls memory_search gets its results; your first reply "
    "without memory_search ends the session. Answer questions with <answer>OPTION</answer>."
)
INSTRUCTIONS_NO_MEMORY = (
    "You are a customer-service assistant. The conversation is wiped between sessions. Your reply ends "
    "the session. Answer questions with <answer>OPTION</answer>."
)


@functools.cache
def _minilm() -> Any:
    """The process's one MiniLM embedder, shared by every env instance (loaded once; imported
    only then: it loads sentence-transformers and torch)."""
    from agentic_rl.memory.embeddings import MiniLMEmbedder

    return MiniLMEmbedder()


class MemoryRecallEnv(ToolEnv):
    """Customer facts across wiped sessions (see the module docstring).

    Args:
        levels: ``recall`` and/or ``update``; ``levels[seed % len(levels)]`` is the task's level.
        num_facts: facts in the profile (1-4). num_questions: questions (1-num_facts).
        memory: offer the memory tools (False: the no-memory control).
        memory_path: SQLite file of the store (None: in memory; required for non-episode scopes).
        scope: ``episode``, ``task_family`` or ``persistent``. namespace: the task family's name.
        max_entries, max_chars, when_full: the store's limits (:class:`MemoryStore`).
        retrieval: how ``memory_search`` ranks entries: ``bm25`` (lexical, the default) or
            ``minilm`` (cosine similarity of all-MiniLM-L6-v2 embeddings,
            :class:`~agentic_rl.memory.embeddings.MiniLMEmbedder`; extra ``embeddings``), e.g.
            ``--set env.kwargs='{retrieval="minilm"}'``.
        max_session_turns: replies after which a session ends unanswered.
        extra_tools: more tools offered beside memory (their permission comes from ``permissions``).
        context: the run's :class:`~agentic_rl.envs.context.EnvContext`: ``audit_path`` (JSON-lines
            audit log of every tool call; None audits nothing), ``run_id`` (in every audit record)
            and ``permissions``: a ``[tools.permissions]`` table; None allows the memory tools and
            denies others.

    Raises:
        ValueError: a wrong level, count, scope, limit, retrieval or permission key (named in
            the message).
        AgenticRLError: ``retrieval="minilm"`` without the extra ``embeddings``.
    """

    description = (
        "Remember a customer's profile across sessions whose history is wiped, "
        "using memory tools (write/search/update/delete)"
    )

    def __init__(
        self,
        levels: Sequence[str] = ("recall",),
        num_facts: int = 3,
        num_questions: int = 1,
        memory: bool = True,
        memory_path: str | None = None,
        scope: str = "episode",
        namespace: str = "memory-recall",
        max_entries: int = 16,
        max_chars: int = 300,
        when_full: str = "refuse",
        retrieval: str = "bm25",
        max_session_turns: int = 3,
        extra_tools: Sequence[Tool] = (),
        context: EnvContext = EnvContext(),
    ):
        permissions, audit_path, run_id = context.permissions, context.audit_path, context.run_id
        self.levels = levels if isinstance(levels, str) else tuple(levels)
        self.num_facts, self.num_questions = int(num_facts), int(num_questions)
        make_task(0, self.levels, self.num_facts, self.num_questions)  # validate now
        if scope not in [s.value for s in Scope]:
            raise ValueError(
                f"unknown memory scope {scope!r}; use one of {[s.value for s in Scope]}"
            )
        if Scope(scope) is not Scope.EPISODE and memory_path is None:
            raise ValueError(f"scope {scope!r} outlives the episode: set memory_path")
        if max_session_turns < 1:
            raise ValueError(f"max_session_turns must be >= 1, got {max_session_turns}")
        if retrieval not in ("bm25", "minilm"):
            raise ValueError(f"retrieval must be 'bm25' or 'minilm', got {retrieval!r}")
        self.max_session_turns = int(max_session_turns)
        self.memory_enabled = bool(memory)
        self.scope = Scope(scope)
        self.store = MemoryStore(
            memory_path or ":memory:",
            scope=self.scope,
            namespace="" if self.scope is Scope.PERSISTENT else namespace,
            max_entries=max_entries,
            max_chars=max_chars,
            when_full=when_full,
            embedder=_minilm() if retrieval == "minilm" else None,
        )
        self.memory_path = memory_path
        self.kit = MemoryToolkit(self.store)
        tools: dict[str, Tool] = dict(self.kit.tools) if self.memory_enabled else {}
        tools.update({t.name: t for t in extra_tools})
        self.setup_tools(
            tools,
            INSTRUCTIONS if self.memory_enabled else INSTRUCTIONS_NO_MEMORY,
            PermissionPolicy.allow_all(MEMORY_SIDE_EFFECTS if self.memory_enabled else {}),
            permissions,
            audit_path,
            run_id,
        )
        self.task: RecallTask | None = None
        self._sessions: list[tuple[str, str]] = []  # (kind, fact key or "")
        self._reset_state()

    def _reset_state(self) -> None:
        self._session = 0
        self._session_turns = 0
        self._session_messages: list[Message] = []
        self._correct = 0

    # -- the episode -------------------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw the task of ``seed``; ``options["trajectory_id"]`` names the episode (store namespace, audit)."""
        seed = self.start_episode(seed, options)
        self.task = make_task(seed, self.levels, self.num_facts, self.num_questions)
        self._reset_state()
        if self.scope is Scope.EPISODE:
            self.store.clear()  # forget the previous episode, then use a namespace of its own
            self.store.namespace = self.episode.trajectory_id
        self.kit.trajectory_id = self.episode.trajectory_id
        self.kit.drain_events()
        self._sessions = (
            [("reveal", "")]
            + ([("update", "")] if self.task.change else [])
            + [("question", q) for q in self.task.questions]
        )
        obs = self._session_observation("")
        info = {
            "level": self.task.level,
            "customer": self.task.customer,
            "expected": [self.task.answer(q) for q in self.task.questions],
        }
        return obs, info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the action's tool calls; end the session unless it searched (module docstring)."""
        self.begin_step(self.task is not None)
        self.kit.step = self.episode.turn - 1
        self._session_turns += 1
        self._session_messages.append(Message("assistant", action.text))
        info: dict[str, Any] = {"tool_calls": 0, "tool_errors": 0}
        results: tuple[ToolResult, ...] = ()
        events: tuple[RiskEvent, ...] = ()
        if action.tool_calls or action.tool_call_errors:
            report = self.run_tools(action)
            results, events = report.results, report.risk_events
            info.update(tool_calls=len(results), tool_errors=sum(not r.ok for r in results))
        typed = {
            "tool_results": results,
            "risk_events": events,
            "memory_events": self.kit.drain_events(),
        }
        searched = "memory_search" in self.tools and any(
            c.name == "memory_search" for c in action.tool_calls
        )
        if searched and self._session_turns < self.max_session_turns:
            messages = tuple(Message("tool", r.content) for r in results)
            self._session_messages.extend(messages)
            return Observation(messages, **typed), 0.0, False, False, info
        reward = self._end_session(action, info)
        if self._session >= len(self._sessions):
            self.end_episode()
            return Observation((), **typed), reward, True, False, info
        obs = self._session_observation(_result_lines(results))
        obs = dataclasses.replace(obs, context_reset=True, **typed)
        return obs, reward, False, False, info

    def _end_session(self, action: Action, info: dict[str, Any]) -> float:
        kind, fact = self._sessions[self._session]
        reward = 0.0
        if kind == "question":
            options = self.task.options[self.task.questions.index(fact)]
            answer = extract_answer(action.text)
            correct = (
                answer is not None and answer.strip().lower() == self.task.answer(fact).lower()
            )
            self._correct += correct
            info.update(
                question=fact,
                answer=answer,
                correct=correct,
                answer_format_ok=answer is not None
                and answer.strip().lower() in {o.lower() for o in options},
            )
            reward = float(correct) / len(self.task.questions)
        self._session += 1
        self._session_turns = 0
        info["session_ended"] = kind
        info["correct_answers"] = self._correct / len(self.task.questions)
        return reward

    def _session_observation(self, previous_results: str) -> Observation:
        """The first session: system + user message; later sessions: the user message only (the
        system message survives a context reset, see the module docstring)."""
        text = self._session_text(previous_results)
        self._session_messages = [Message("system", self.system_prompt), Message("user", text)]
        if self._session:
            return Observation((self._session_messages[1],))
        return Observation(
            tuple(self._session_messages), tools=tuple(t.schema() for t in self.tools.values())
        )

    def _session_text(self, previous_results: str) -> str:
        task = self.task
        kind, fact = self._sessions[self._session]
        head = f"Session {self._session + 1} of {len(self._sessions)}."
        if self._session:
            head += " The conversation history was wiped; only your memory is kept."
            if previous_results:
                head += f" Results of your last tool calls: {previous_results}"
        if kind == "reveal":
            facts = "; ".join(f"{FACTS[k][0]}: {v}" for k, v in task.profile)
            return (
                f"{head}\nCustomer {task.customer} tells you their profile: {facts}. "
                "After your reply this conversation is wiped."
            )
        if kind == "update":
            key, old, new = task.change
            return f"{head}\nCustomer {task.customer} says: my {FACTS[key][0]} is now {new} (it was {old})."
        options = ", ".join(task.options[task.questions.index(fact)])
        return (
            f"{head}\nQuestion: what is {task.customer}'s {FACTS[fact][0]}? Options: {options}. "
            "Reply with <answer>OPTION</answer>."
        )

    # -- oracle, rubric, close ---------------------------------------------------------------------

    def oracle_reply(self) -> str | None:
        """Reference policy, using only what the current session shows (module docstring)."""
        if self.task is None or self.episode.done:
            return None
        task = self.task
        kind, fact = self._sessions[self._session]
        found = "\n".join(m.content for m in self._session_messages if m.role == "tool")
        searched = any(m.role == "tool" for m in self._session_messages)
        if kind == "reveal" and "memory_write" in self.tools:
            text = f"{task.customer}: " + "; ".join(
                f"{k} {v}" for k, v in task.profile
            )  # short keys: fewer tokens
            return _call("memory_write", {"text": text})
        if kind == "reveal":
            return "Noted."
        if kind == "update":
            key, old, new = task.change
            if not searched and "memory_search" in self.tools:
                return _call("memory_search", {"query": f"{task.customer} {FACTS[key][0]}"})
            match = re.search(
                rf"^\[(\d+)\] (.*\b{re.escape(old)}\b.*?)(?: \(tags: .*\))?$", found, re.MULTILINE
            )
            if match is None:
                return "Noted."
            new_text = re.sub(rf"\b{re.escape(old)}\b", new, match.group(2))
            return _call("memory_update", {"id": int(match.group(1)), "text": new_text})
        if not searched and "memory_search" in self.tools:
            return _call("memory_search", {"query": f"{task.customer} {FACTS[fact][0]}"})
        options = task.options[task.questions.index(fact)]
        seen = [o for o in options if re.search(rf"\b{re.escape(o)}\b", found, re.IGNORECASE)]
        return f"<answer>{(seen or options)[0]}</answer>"

    def rubric(self, weights: RewardWeights = RewardWeights()) -> Rubric:
        """Default rubric of the env (components listed in the module docstring)."""
        logged = [
            mm.memory_writes,
            mm.memory_reads,
            mm.memory_updates,
            mm.memory_deletes,
            mm.memory_hit_rate,
            mm.memory_store_size,
            mm.memory_tokens,
        ]
        return Rubric(
            [
                RewardFunction("correct_answers", RewardGroup.OUTCOME, correct_answers),
                RewardFunction("answer_format", RewardGroup.PROCESS, answer_format),
                RewardFunction("memory_ops", RewardGroup.COST, mm.memory_ops, weight=0.01),
                RewardFunction("unused_writes", RewardGroup.COST, mm.unused_writes, weight=0.05),
                token_cost(),
                *(RewardFunction(fn.__name__, RewardGroup.COST, fn, weight=0.0) for fn in logged),
                *risk_functions(),
            ],
            weights,
        )

    def close(self) -> None:
        """Clear an episode-scoped store and close the store (safe to call twice)."""
        try:
            if self.scope is Scope.EPISODE:
                self.store.clear()
            self.store.close()
        except sqlite3.ProgrammingError:  # already closed
            pass


def _call(name: str, arguments: dict[str, Any]) -> str:
    return format_tool_call(name, arguments)


def _result_lines(results: Sequence[Any]) -> str:
    return " ".join(r.content.replace("\n", " ") for r in results)


def correct_answers(trajectory: Trajectory) -> float:
    """Fraction of the episode's questions answered right (1.0 = success)."""
    values = [t.info["correct_answers"] for t in trajectory.turns if "correct_answers" in t.info]
    return float(values[-1]) if values else 0.0


def answer_format(trajectory: Trajectory) -> float:
    """Fraction of question sessions whose final reply had one answer tag naming an offered option."""
    graded = [t.info for t in trajectory.turns if t.info.get("session_ended") == "question"]
    questions = trajectory.info.get("expected", graded)
    return sum(bool(i.get("answer_format_ok")) for i in graded) / max(len(questions), 1)
