"""Memory as an action: a SQLite memory store with BM25 retrieval, the memory tools, and metrics.

Data flow: the policy calls ``memory_write`` / ``memory_search`` / ``memory_update`` /
``memory_delete`` (:class:`MemoryToolkit`) through the env's ToolExecutor (permission, audit);
the tools act on a :class:`MemoryStore` (scopes: episode, task family, persistent; size limits
with a documented policy when full); the toolkit's events go into the step info, where
:mod:`agentic_rl.memory.metrics` turns them into metrics and reward components.

Layer rule: this package imports the standard library, ``bm25s``, :mod:`agentic_rl.types` and
:mod:`agentic_rl.tools`; never torch. The optional dense retrieval of
:mod:`agentic_rl.memory.embeddings` (extra ``embeddings``) loads sentence-transformers, and so
torch, only when a :class:`~agentic_rl.memory.embeddings.MiniLMEmbedder` is built.
"""

from agentic_rl.memory.store import (
    MemoryEntry,
    MemoryFullError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryStore,
    MemoryStoreError,
    Scope,
    SearchHit,
)
from agentic_rl.memory.tools import MEMORY_SIDE_EFFECTS, MEMORY_TOOL_NAMES, MemoryToolkit

__all__ = [
    "MEMORY_SIDE_EFFECTS",
    "MEMORY_TOOL_NAMES",
    "MemoryEntry",
    "MemoryFullError",
    "MemoryLimitError",
    "MemoryNotFoundError",
    "MemoryStore",
    "MemoryStoreError",
    "MemoryToolkit",
    "Scope",
    "SearchHit",
]
