"""The SQLite memory store: fields, persistence across processes, scopes, limits, BM25 ranking."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from agentic_rl.memory import (
    MemoryFullError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryStore,
    MemoryStoreError,
    Scope,
)
from agentic_rl.memory.store import bm25_scores


def test_write_get_update_delete_keep_every_field():
    store = MemoryStore(scope="episode", namespace="ep-1")
    entry = store.write("Alice likes teal", ["alice", "colour"], step=2, source_trajectory="traj-7")
    assert (entry.text, entry.tags, entry.created_step, entry.updated_step) == (
        "Alice likes teal",
        ("alice", "colour"),
        2,
        2,
    )
    assert (entry.scope, entry.namespace, entry.source_trajectory, entry.uses) == (
        "episode",
        "ep-1",
        "traj-7",
        0,
    )
    assert store.get(entry.id) == entry and len(store) == 1

    updated = store.update(entry.id, "Alice likes green", step=5)
    assert (updated.text, updated.tags, updated.created_step, updated.updated_step) == (
        "Alice likes green",
        ("alice", "colour"),
        2,
        5,
    )
    assert store.update(entry.id, "Alice likes green", ["a"], step=6).tags == ("a",)

    assert store.delete(entry.id).text == "Alice likes green"
    assert len(store) == 0 and store.entries() == []
    with pytest.raises(MemoryNotFoundError, match=f"no memory with id {entry.id}"):
        store.get(entry.id)
    with pytest.raises(MemoryNotFoundError):
        store.update(entry.id, "x")
    with pytest.raises(MemoryNotFoundError):
        store.delete(entry.id)
    with pytest.raises(MemoryNotFoundError, match="integers"):
        store.get("1")  # type: ignore[arg-type]


def test_ids_are_never_reused():
    store = MemoryStore()
    first = store.write("a fact")
    store.delete(first.id)
    assert store.write("another fact").id > first.id


_WRITER = textwrap.dedent("""
    import sys
    from agentic_rl.memory import MemoryStore
    store = MemoryStore(sys.argv[1], scope="persistent")
    store.write("the codeword of Bruno Silva is quartz", ["bruno"], step=3, source_trajectory="run-a")
    store.write("the home city of Bruno Silva is Oslo", step=4)
    store.close()
""")
_READER = textwrap.dedent("""
    import json, sys
    from agentic_rl.memory import MemoryStore
    store = MemoryStore(sys.argv[1], scope="persistent")
    hits = store.search("Bruno codeword", k=1, step=9)
    print(json.dumps({"n": len(store), "top": hits[0].entry.text, "src": hits[0].entry.source_trajectory,
                      "uses": store.get(hits[0].entry.id).uses}))
""")


def test_persistent_entries_survive_process_restarts(tmp_path):
    path = tmp_path / "nested" / "memory.sqlite"
    subprocess.run([sys.executable, "-c", _WRITER, str(path)], check=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", _READER, str(path)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == {
        "n": 2,
        "top": "the codeword of Bruno Silva is quartz",
        "src": "run-a",
        "uses": 1,
    }
    out = subprocess.run(
        [sys.executable, "-c", _READER, str(path)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out)["uses"] == 2  # the use counted by the first reader was persisted too


def test_scopes_and_namespaces_are_isolated(tmp_path):
    path = tmp_path / "memory.sqlite"
    ep_a = MemoryStore(path, scope=Scope.EPISODE, namespace="episode-a")
    ep_b = MemoryStore(path, scope="episode", namespace="episode-b")
    family = MemoryStore(path, scope="task_family", namespace="customers")
    other_family = MemoryStore(path, scope="task_family", namespace="invoices")
    persistent = MemoryStore(path, scope="persistent")
    for store in (ep_a, ep_b, family, other_family, persistent):
        store.write(f"note of {store.scope.value} {store.namespace}")
    assert all(len(s) == 1 for s in (ep_a, ep_b, family, other_family, persistent))
    assert [e.text for e in family.entries()] == ["note of task_family customers"]
    assert ep_a.search("note") and all(
        h.entry.namespace == "episode-a" for h in ep_a.search("note", k=10)
    )
    with pytest.raises(MemoryNotFoundError):
        ep_b.get(ep_a.entries()[0].id)  # an id of another namespace is not visible
    # the episode ends: its entries go, the others stay
    assert ep_a.clear() == 1
    assert len(ep_a) == 0 and len(ep_b) == 1 and len(family) == 1 and len(persistent) == 1
    # a new object on the same family sees the family's entries (across episodes)
    assert [
        e.text for e in MemoryStore(path, scope="task_family", namespace="customers").entries()
    ] == ["note of task_family customers"]


def test_anonymous_episode_stores_are_private():
    a, b = MemoryStore(), MemoryStore()
    assert a.namespace and a.namespace != b.namespace


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scope": "global"}, "unknown memory scope"),
        ({"scope": "task_family"}, "needs a namespace"),
        ({"scope": "persistent", "namespace": "x"}, "single namespace"),
        ({"max_entries": 0}, "max_entries must be a positive integer"),
        ({"max_chars": 1.5}, "max_chars must be a positive integer"),
        ({"when_full": "drop"}, "when_full must be one of"),
    ],
)
def test_bad_configuration_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryStore(**kwargs)


def test_full_store_refuses_and_changes_nothing():
    store = MemoryStore(max_entries=2)
    store.write("one")
    store.write("two")
    with pytest.raises(
        MemoryFullError, match=r"memory is full \(2 of 2 entries\): delete or update"
    ):
        store.write("three")
    assert [e.text for e in store.entries()] == ["one", "two"]
    assert isinstance(MemoryFullError("x"), MemoryStoreError)
    store.update(store.entries()[0].id, "one, revised")  # updating a full store is fine
    store.delete(store.entries()[1].id)
    assert store.write("three").text == "three"


def test_full_store_with_evict_lru_drops_the_least_recently_used_entry():
    store = MemoryStore(max_entries=3, when_full="evict_lru")
    a = store.write("apple pie recipe", step=0)
    store.write("banana bread recipe", step=1)
    c = store.write("cherry tart recipe", step=2)
    store.search("apple", step=5)  # a used at step 5: now b (step 1) is the least recently used
    d = store.write("date cake recipe", step=6)
    assert [e.id for e in store.entries()] == [a.id, c.id, d.id]
    store.update(c.id, "cherry tart recipe, less sugar", step=7)  # an update counts as a use
    e = store.write(
        "elderflower jelly recipe", step=8
    )  # LRU: a (used 5) < d (written 6) < c (updated 7)
    assert [x.id for x in store.entries()] == [c.id, d.id, e.id]


def test_entry_limits():
    store = MemoryStore(max_chars=10)
    with pytest.raises(MemoryLimitError, match="11 characters, over the limit of 10"):
        store.write("x" * 11)
    for bad_text in ("", "   ", None):
        with pytest.raises(MemoryLimitError, match="non-empty string"):
            store.write(bad_text)  # type: ignore[arg-type]
    with pytest.raises(MemoryLimitError, match="tags"):
        store.write("ok", "not-a-list")  # type: ignore[arg-type]
    with pytest.raises(MemoryLimitError, match="tags"):
        store.write("ok", [""])
    with pytest.raises(MemoryLimitError, match="at most 8 tags"):
        store.write("ok", [f"t{i}" for i in range(9)])
    assert len(store) == 0


CORPUS = [
    "the cat sat on the mat",  # id 1
    "dogs chase cats in the park",  # id 2
    "a cat and a dog share the mat",  # id 3
    "stock prices fell sharply on monday",  # id 4
]


def test_bm25_ranking_on_a_fixed_corpus():
    store = MemoryStore()
    ids = [store.write(text).id for text in CORPUS]
    # "cat mat": docs 1 and 3 contain both terms; doc 1 is shorter, so it ranks first; doc 2 has
    # "cats" (no stemming) and doc 4 nothing: neither is returned
    assert [h.entry.id for h in store.search("cat mat", k=4)] == [ids[0], ids[2]]
    # "cat mat dog": doc 3 has all three terms and beats the shorter doc 1, which has two
    assert [h.entry.id for h in store.search("cat mat dog", k=4)] == [ids[2], ids[0]]
    hits = store.search("stock monday", k=2)
    assert [h.entry.id for h in hits] == [ids[3]]
    assert store.search("", k=3) == [] and store.search("zebra", k=3) == []
    assert len(store.search("cat", k=1)) == 1
    with pytest.raises(ValueError, match="k must be a positive integer"):
        store.search("cat", k=0)


def test_bm25_score_matches_the_formula_by_hand():
    # corpus after lower-casing and English stop-word removal:
    #   d0 = [cat, sat, mat] (|d| = 3), d1 = [dogs, chase, cats] (3), d2 = [bird, hand] (2)
    # avgdl = 8/3, N = 3, df(cat) = df(mat) = 1
    # idf = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) = ln(8/3) = 0.980829
    # tf part for d0 = 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * 3 / (8/3))) = 1 / 2.640625 = 0.378698
    # score(d0, "cat mat") = 2 * 0.980829 * 0.378698 = 0.742877; d1 and d2 score 0
    scores = bm25_scores(
        "cat mat", ["the cat sat on the mat", "dogs chase cats", "a bird in the hand"]
    )
    assert math.isclose(scores[0], 2 * math.log(8 / 3) / 2.640625, rel_tol=1e-5)
    assert scores[1:] == [0.0, 0.0]
    assert bm25_scores("cat", []) == []


def test_search_counts_uses_unless_asked_not_to():
    store = MemoryStore()
    entry = store.write("codeword falcon", step=0)
    store.search("falcon", step=4, count_use=False)
    assert store.get(entry.id).uses == 0
    hit = store.search("falcon", step=4)[0]
    assert hit.entry.uses == 0 and hit.score > 0  # the hit shows the entry as it was
    assert (store.get(entry.id).uses, store.get(entry.id).last_used_step) == (1, 4)


def test_ties_are_broken_by_smaller_id():
    store = MemoryStore()
    first = store.write("codeword falcon")
    second = store.write("codeword falcon")
    assert [h.entry.id for h in store.search("falcon")] == [first.id, second.id]
