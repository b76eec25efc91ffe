"""Memory tools: ``memory_write``, ``memory_search``, ``memory_update``, ``memory_delete``.

Memory is an action (docs/design.md, decision 5): the policy calls these tools like any other, so
they go through the env's :class:`~agentic_rl.tools.governance.executor.ToolExecutor` (permission check,
audit record, observation) and appear in the trajectory as tool calls and results. A
:class:`MemoryToolkit` binds the four tools to one :class:`~agentic_rl.memory.store.MemoryStore`::

    kit = MemoryToolkit(store)
    executor = ToolExecutor({**kit.tools, ...}, PermissionPolicy.allow_all(MEMORY_SIDE_EFFECTS), audit)
    kit.step, kit.trajectory_id = turn, trajectory_id   # before each env step
    report = executor.execute(...)
    obs = Observation(..., memory_events=kit.drain_events())  # one event per memory call

Observations (exact formats; the policy reads them):

* ``memory_write``  -> ``Stored memory 3.``
* ``memory_search`` -> ``Found 2 memories:\\n[3] text (tags: a, b)\\n[1] text`` or ``Found 0 memories.``
* ``memory_update`` -> ``Updated memory 3.``
* ``memory_delete`` -> ``Deleted memory 3.``
* a refused operation (store full, unknown id, text too long) -> ``Error: MemoryFullError: …``
  (built by the executor from the raised :class:`~agentic_rl.memory.store.MemoryStoreError`).

Events (``kit.drain_events()``), for metrics and rewards: :class:`~agentic_rl.types.MemoryEvent`
values, ``op`` in ``"write"|"search"|"update"|"delete"``, ``ok``, ``entry_ids``, ``hits`` (only
for searches: number of entries returned) and ``store_size``.

Permissions: :data:`MEMORY_SIDE_EFFECTS` classes ``memory_search`` as ``read_only`` and the
three others as ``workspace_write`` (they change only the agent's own store), so the default
side-effect modes allow all four; a ``[tools.permissions]`` table can deny any of them.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.memory.store import MemoryStore, MemoryStoreError
from agentic_rl.tools.definition.tool import Tool, tool
from agentic_rl.types import MemoryEvent

__all__ = ["MEMORY_SIDE_EFFECTS", "MEMORY_TOOL_NAMES", "MemoryToolkit", "format_hits"]

MEMORY_TOOL_NAMES = ("memory_write", "memory_search", "memory_update", "memory_delete")
MEMORY_SIDE_EFFECTS = {
    "memory_write": "workspace_write",
    "memory_search": "read_only",
    "memory_update": "workspace_write",
    "memory_delete": "workspace_write",
}
MAX_SEARCH_K = 10


def format_hits(hits: list[Any]) -> str:
    """The ``memory_search`` observation for a list of :class:`~agentic_rl.memory.store.SearchHit`."""
    if not hits:
        return "Found 0 memories."
    lines = [f"Found {len(hits)} {'memory' if len(hits) == 1 else 'memories'}:"]
    for hit in hits:
        tags = f" (tags: {', '.join(hit.entry.tags)})" if hit.entry.tags else ""
        lines.append(f"[{hit.entry.id}] {hit.entry.text}{tags}")
    return "\n".join(lines)


class MemoryToolkit:
    """The four memory tools bound to one store, with an event log (module docstring).

    Attributes:
        store: the store the tools act on.
        step: recorded as ``created_step``/``updated_step``/``last_used_step``; set by the env.
        trajectory_id: recorded as ``source_trajectory`` of written entries; set by the env.
        tools: ``{name: Tool}`` of the four tools.
    """

    def __init__(self, store: MemoryStore):
        self.store = store
        self.step = 0
        self.trajectory_id = ""
        self._events: list[MemoryEvent] = []
        self.tools: dict[str, Tool] = {t.name: t for t in self._build()}

    def drain_events(self) -> tuple[MemoryEvent, ...]:
        """The events since the last call (oldest first), and forget them. Never raises."""
        events, self._events = tuple(self._events), []
        return events

    def _record(self, op: str, ok: bool, entry_ids: list[int], hits: int = 0) -> None:
        self._events.append(MemoryEvent(op, ok, tuple(entry_ids), hits, len(self.store)))

    def _run(self, op: str, action):
        try:
            return action()
        except (MemoryStoreError, ValueError):
            self._record(op, False, [])
            raise

    def _build(self) -> list[Tool]:
        kit = self

        @tool
        def memory_write(text: str, tags: list[str] | None = None) -> str:
            """Store a note in your long-term memory; it survives when the conversation is wiped.

            Args:
                text: the note (one fact per note is easiest to find again).
                tags: optional keywords for finding it.
            """
            entry = kit._run(
                "write",
                lambda: kit.store.write(
                    text, tags or (), step=kit.step, source_trajectory=kit.trajectory_id
                ),
            )
            kit._record("write", True, [entry.id])
            return f"Stored memory {entry.id}."

        @tool
        def memory_search(query: str, k: int = 3) -> str:
            """Search your memory; returns the best matching notes with their ids.

            Args:
                query: keywords to look for.
                k: most notes to return (1 to 10).
            """
            if k > MAX_SEARCH_K:
                kit._record("search", False, [])
                raise ValueError(f"k must be between 1 and {MAX_SEARCH_K}, got {k}")
            hits = kit._run("search", lambda: kit.store.search(query, k, step=kit.step))
            kit._record("search", True, [h.entry.id for h in hits], hits=len(hits))
            return format_hits(hits)

        @tool
        def memory_update(id: int, text: str) -> str:  # noqa: A002 - the policy-facing name
            """Replace the text of a note (for example when a fact has changed or was wrong).

            Args:
                id: the note's id, as shown by memory_search.
                text: the new text.
            """
            entry = kit._run("update", lambda: kit.store.update(id, text, step=kit.step))
            kit._record("update", True, [entry.id])
            return f"Updated memory {entry.id}."

        @tool
        def memory_delete(id: int) -> str:  # noqa: A002 - the policy-facing name
            """Delete a note that is wrong or no longer needed.

            Args:
                id: the note's id, as shown by memory_search.
            """
            entry = kit._run("delete", lambda: kit.store.delete(id))
            kit._record("delete", True, [entry.id])
            return f"Deleted memory {entry.id}."

        return [memory_write, memory_search, memory_update, memory_delete]
