"""The memory store: an embedded SQLite table of text entries, searched with BM25.

Memory is the agent's belief state across the parts of a task it cannot keep in context
(docs/design.md, decision 5). The policy writes, updates, deletes and searches entries with tool
calls (:mod:`agentic_rl.memory.tools`); this module is the storage those tools act on.

Entries
    ``id`` (integer, unique in the file, never reused), ``text``, ``tags``, ``created_step`` and
    ``updated_step`` (the caller's step counter, e.g. the env turn), ``last_used_step`` and
    ``uses`` (how often a search returned the entry), ``source_trajectory`` (the trajectory id
    that wrote it).

Scopes (one :class:`MemoryStore` object sees exactly the entries of its ``(scope, namespace)``)
    ===============  ======================  ==============================================
    scope            namespace               lifetime
    ===============  ======================  ==============================================
    ``episode``      the episode's id        one episode; the owner calls :meth:`clear` when
                                             it ends (an env does so on ``reset``/``close``)
    ``task_family``  a task family's name    every episode of that family that opens the
                                             same file (the run directory's by default)
    ``persistent``   always ``""``           every run that opens the same file (a path
                                             outside the run directory, chosen by the user)
    ===============  ======================  ==============================================

    Several scopes and namespaces can share one file; they never see each other's entries.

Size limits and the policy when full
    ``max_chars`` bounds one entry's text (longer text: :class:`MemoryLimitError`, nothing is
    stored). ``max_entries`` bounds the entries of one ``(scope, namespace)``. When a write
    would exceed it, ``when_full`` decides:

    * ``"refuse"`` (default): the write raises :class:`MemoryFullError`; the store is unchanged.
      Through the memory tools this is an error observation telling the policy to delete or
      update an entry first, so forgetting stays the policy's decision.
    * ``"evict_lru"``: the least recently used entry (smallest ``max(last_used_step,
      updated_step)``, then the smallest id) is deleted to make room; the write succeeds.

Retrieval
    :meth:`MemoryStore.search` ranks the entries (text and tags) with Okapi BM25 as implemented
    by ``bm25s`` (Lucene variant, k1 = 1.5, b = 0.75, English stop words removed, lower-cased,
    no stemming): for query terms q and document d,
    score(d) = Σ_q idf(q) · tf(q, d) / (tf(q, d) + k1 · (1 − b + b · |d| / avgdl)),
    idf(q) = ln(1 + (N − df(q) + 0.5) / (df(q) + 0.5)) (Robertson & Zaragoza 2009, "The
    Probabilistic Relevance Framework: BM25 and Beyond"; Lù 2024, "BM25S"). Only entries with a
    positive score are returned, best first, ties by smaller id. The index is rebuilt per
    search (the corpus of one namespace is small, bounded by ``max_entries``).

    With an ``embedder`` (e.g. :class:`agentic_rl.memory.embeddings.MiniLMEmbedder`, extra
    ``embeddings``), entries are ranked by the cosine similarity of their embedding (text and
    tags) to the query's instead; entries above ``min_similarity`` are returned, best first,
    ties by smaller id.

Concurrency: every operation is one SQLite transaction (``BEGIN IMMEDIATE`` for writes), so
several processes may share a file. The store is not thread-safe; use one object per thread.
"""

from __future__ import annotations

import enum
import functools
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MemoryEntry",
    "MemoryFullError",
    "MemoryLimitError",
    "MemoryNotFoundError",
    "MemoryStore",
    "MemoryStoreError",
    "Scope",
    "SearchHit",
    "WHEN_FULL",
]

WHEN_FULL = ("refuse", "evict_lru")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    tags TEXT NOT NULL,
    created_step INTEGER NOT NULL,
    updated_step INTEGER NOT NULL,
    last_used_step INTEGER NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    source_trajectory TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_scope ON memory (scope, namespace);
"""
_COLUMNS = "id, text, tags, scope, namespace, created_step, updated_step, last_used_step, uses, source_trajectory"


def _serialized(method):
    """Run a :class:`MemoryStore` method under the store's lock (one SQLite call at a time)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class MemoryStoreError(ValueError):
    """A memory operation was refused; the message is meant to be shown to the policy."""


class MemoryFullError(MemoryStoreError):
    """A write would exceed ``max_entries`` and the policy when full is ``refuse``."""


class MemoryLimitError(MemoryStoreError):
    """An entry's text is empty or longer than ``max_chars``, or a tag is invalid."""


class MemoryNotFoundError(MemoryStoreError, KeyError):
    """No entry with that id in this store's scope and namespace."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class Scope(str, enum.Enum):
    """Visibility and lifetime of entries (see the module docstring)."""

    EPISODE = "episode"
    TASK_FAMILY = "task_family"
    PERSISTENT = "persistent"


@dataclass(frozen=True)
class MemoryEntry:
    """One stored entry (fields as in the module docstring)."""

    id: int
    text: str
    tags: tuple[str, ...]
    scope: str
    namespace: str
    created_step: int
    updated_step: int
    last_used_step: int
    uses: int
    source_trajectory: str


@dataclass(frozen=True)
class SearchHit:
    """A search result: the entry (as it was before the search counted the use) and its BM25 score."""

    entry: MemoryEntry
    score: float


def _entry(row: tuple) -> MemoryEntry:
    return MemoryEntry(
        row[0],
        row[1],
        tuple(json.loads(row[2])),
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        row[9],
    )


class MemoryStore:
    """A view of one ``(scope, namespace)`` of a SQLite memory file.

    Args:
        path: SQLite file (created with its parent directory if missing), or ``":memory:"`` for
            a private in-process store (gone when closed).
        scope: a :class:`Scope` or its value.
        namespace: episode id / task family name; required for ``task_family``; for
            ``episode``, ``""`` means a fresh random id (an anonymous episode); must be ``""``
            for ``persistent``.
        max_entries: most entries of this ``(scope, namespace)`` (>= 1).
        max_chars: longest entry text in characters (>= 1).
        when_full: ``"refuse"`` or ``"evict_lru"`` (module docstring).
        embedder: ``texts -> one vector per text``; when given, :meth:`search` ranks by cosine
            similarity instead of BM25 (module docstring). None: BM25.
        min_similarity: with an embedder, the similarity a hit must exceed (in [-1, 1]).

    Raises:
        ValueError: an unknown scope or ``when_full``, a wrong namespace, a limit < 1.
        sqlite3.Error: the file cannot be opened or is not a memory store.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        scope: Scope | str = Scope.EPISODE,
        namespace: str = "",
        max_entries: int = 64,
        max_chars: int = 500,
        when_full: str = "refuse",
        embedder: Callable[[Sequence[str]], Sequence[Sequence[float]]] | None = None,
        min_similarity: float = 0.0,
    ):
        try:
            self.scope = Scope(scope)
        except ValueError:
            raise ValueError(
                f"unknown memory scope {scope!r}; use one of {[s.value for s in Scope]}"
            ) from None
        if self.scope is Scope.PERSISTENT and namespace:
            raise ValueError("the persistent scope has a single namespace: pass namespace=''")
        if self.scope is Scope.EPISODE and not namespace:
            namespace = uuid.uuid4().hex  # an anonymous episode: private to this object
        if self.scope is Scope.TASK_FAMILY and not namespace:
            raise ValueError("the task_family scope needs a namespace (the task family's name)")
        for name, value in (("max_entries", max_entries), ("max_chars", max_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if when_full not in WHEN_FULL:
            raise ValueError(f"when_full must be one of {WHEN_FULL}, got {when_full!r}")
        self.path = str(path)
        self.namespace = str(namespace)
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.when_full = when_full
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError(f"min_similarity must be in [-1, 1], got {min_similarity!r}")
        self.embedder = embedder
        self.min_similarity = float(min_similarity)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # a rollout engine steps an episode's env on whichever worker thread is free: the
        # connection may be used from any thread, one call at a time (the lock)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._db.executescript(_SCHEMA)

    # -- reading -------------------------------------------------------------------------------

    def _where(self) -> tuple[str, tuple[str, str]]:
        return "scope = ? AND namespace = ?", (self.scope.value, self.namespace)

    @_serialized
    def entries(self) -> list[MemoryEntry]:
        """All entries of this scope and namespace, by id. Never raises on a healthy file."""
        where, args = self._where()
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM memory WHERE {where} ORDER BY id", args
        ).fetchall()
        return [_entry(r) for r in rows]

    @_serialized
    def __len__(self) -> int:
        where, args = self._where()
        return int(
            self._db.execute(f"SELECT COUNT(*) FROM memory WHERE {where}", args).fetchone()[0]
        )

    @_serialized
    def get(self, entry_id: int) -> MemoryEntry:
        """The entry with this id.

        Raises:
            MemoryNotFoundError: no such entry in this scope and namespace.
        """
        where, args = self._where()
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM memory WHERE id = ? AND {where}", (_entry_id(entry_id), *args)
        ).fetchone()
        if row is None:
            raise MemoryNotFoundError(f"no memory with id {entry_id}")
        return _entry(row)

    @_serialized
    def search(
        self, query: str, k: int = 3, *, step: int = 0, count_use: bool = True
    ) -> list[SearchHit]:
        """The ``k`` best entries for ``query`` by BM25 or embeddings (module docstring), best first.

        Args:
            query: free text.
            k: most results (>= 1).
            step: the caller's step, recorded as the returned entries' ``last_used_step``.
            count_use: add 1 to the returned entries' ``uses`` (False for inspection).

        Returns:
            hits with a positive BM25 score (with an embedder: a similarity above
            ``min_similarity``), at most ``k``; ``[]`` for an empty store or no match.

        Raises:
            ValueError: ``k`` < 1 or ``query`` is not a string.
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        entries = self.entries()
        documents = [" ".join((e.text, *e.tags)) for e in entries]
        if self.embedder is None:
            scores, floor = bm25_scores(query, documents), 0.0
        else:
            from agentic_rl.memory.embeddings import cosine_similarities

            vectors = list(self.embedder([query, *documents])) if documents else []
            scores, floor = (
                (cosine_similarities(vectors[0], vectors[1:]) if documents else []),
                self.min_similarity,
            )
        ranked = sorted(
            (i for i, s in enumerate(scores) if s > floor),
            key=lambda i: (-scores[i], entries[i].id),
        )[:k]
        hits = [SearchHit(entries[i], float(scores[i])) for i in ranked]
        if hits and count_use:
            with self._transaction():
                self._db.executemany(
                    "UPDATE memory SET uses = uses + 1, last_used_step = ? WHERE id = ?",
                    [(int(step), h.entry.id) for h in hits],
                )
        return hits

    # -- writing -------------------------------------------------------------------------------

    @_serialized
    def write(
        self,
        text: str,
        tags: tuple[str, ...] | list[str] = (),
        *,
        step: int = 0,
        source_trajectory: str = "",
    ) -> MemoryEntry:
        """Store a new entry and return it.

        Raises:
            MemoryLimitError: empty/too long text or invalid tags (nothing stored).
            MemoryFullError: the store is full and ``when_full == "refuse"`` (nothing stored).
        """
        text, tags = self._check(text, tags)
        where, args = self._where()
        with self._transaction():
            count = self._db.execute(f"SELECT COUNT(*) FROM memory WHERE {where}", args).fetchone()[
                0
            ]
            if count >= self.max_entries:
                if self.when_full == "refuse":
                    raise MemoryFullError(
                        f"memory is full ({count} of {self.max_entries} entries): "
                        "delete or update an entry first"
                    )
                self._db.execute(
                    f"DELETE FROM memory WHERE id IN (SELECT id FROM memory WHERE {where} "
                    "ORDER BY MAX(last_used_step, updated_step), id LIMIT ?)",
                    (*args, count - self.max_entries + 1),
                )
            cursor = self._db.execute(
                "INSERT INTO memory (scope, namespace, text, tags, created_step, updated_step, last_used_step, "
                "source_trajectory) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *args,
                    text,
                    json.dumps(list(tags)),
                    int(step),
                    int(step),
                    int(step),
                    str(source_trajectory),
                ),
            )
            entry_id = cursor.lastrowid
        return self.get(entry_id)

    @_serialized
    def update(
        self,
        entry_id: int,
        text: str,
        tags: tuple[str, ...] | list[str] | None = None,
        *,
        step: int = 0,
    ) -> MemoryEntry:
        """Replace an entry's text (and tags unless None); returns the updated entry.

        Raises:
            MemoryNotFoundError: no such entry. MemoryLimitError: as :meth:`write`.
        """
        old = self.get(entry_id)
        text, new_tags = self._check(text, old.tags if tags is None else tags)
        with self._transaction():
            self._db.execute(
                "UPDATE memory SET text = ?, tags = ?, updated_step = ? WHERE id = ?",
                (text, json.dumps(list(new_tags)), int(step), old.id),
            )
        return self.get(old.id)

    @_serialized
    def delete(self, entry_id: int) -> MemoryEntry:
        """Delete an entry; returns it as it was.

        Raises:
            MemoryNotFoundError: no such entry.
        """
        old = self.get(entry_id)
        with self._transaction():
            self._db.execute("DELETE FROM memory WHERE id = ?", (old.id,))
        return old

    @_serialized
    def clear(self) -> int:
        """Delete every entry of this scope and namespace; returns how many."""
        where, args = self._where()
        with self._transaction():
            return self._db.execute(f"DELETE FROM memory WHERE {where}", args).rowcount

    @_serialized
    def close(self) -> None:
        """Close the connection (safe to call twice)."""
        self._db.close()

    def _check(self, text: str, tags: tuple[str, ...] | list[str]) -> tuple[str, tuple[str, ...]]:
        if not isinstance(text, str) or not text.strip():
            raise MemoryLimitError("memory text must be a non-empty string")
        if len(text) > self.max_chars:
            raise MemoryLimitError(
                f"memory text is {len(text)} characters, over the limit of {self.max_chars}"
            )
        if isinstance(tags, str) or not all(isinstance(t, str) and t.strip() for t in tags):
            raise MemoryLimitError(f"tags must be a list of non-empty strings, got {tags!r}")
        if len(tags) > 8 or any(len(t) > 64 for t in tags):
            raise MemoryLimitError("at most 8 tags of at most 64 characters each")
        return text, tuple(t.strip() for t in tags)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, traceback) -> None:
        self.db.execute("ROLLBACK" if kind else "COMMIT")


def _entry_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MemoryNotFoundError(f"memory ids are integers, got {value!r}")
    return value


def bm25_scores(query: str, documents: list[str]) -> list[float]:
    """BM25 score of every document for ``query`` (formula in the module docstring), length = len(documents).

    A document with no indexable term scores 0. Never raises for string inputs.
    """
    import bm25s

    if not documents:
        return []
    corpus = bm25s.tokenize(documents, stopwords="en", return_ids=False, show_progress=False)
    vocabulary = {term for doc in corpus for term in doc}
    terms = [
        t
        for t in bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if t in vocabulary
    ]
    if not terms:
        return [0.0] * len(documents)
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(
        bm25s.tokenize(documents, stopwords="en", show_progress=False), show_progress=False
    )
    return [float(s) for s in retriever.get_scores(terms)]
