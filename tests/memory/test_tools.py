"""Memory tools through the one tool path: permission check -> execution -> audit -> observation."""

from __future__ import annotations

import pytest

from agentic_rl.memory import MEMORY_SIDE_EFFECTS, MEMORY_TOOL_NAMES, MemoryStore, MemoryToolkit
from agentic_rl.tools.governance.audit import AuditLog
from agentic_rl.tools.governance.executor import ToolExecutor
from agentic_rl.tools.governance.permissions import PermissionPolicy
from agentic_rl.types import ToolCall


def _executor(kit: MemoryToolkit, tmp_path, permissions=None) -> tuple[ToolExecutor, AuditLog]:
    audit = AuditLog(tmp_path / "audit.jsonl")
    policy = (
        PermissionPolicy.allow_all(MEMORY_SIDE_EFFECTS)
        if permissions is None
        else PermissionPolicy.from_dict(permissions)
    )
    return ToolExecutor(kit.tools, policy, audit, {"run_id": "r1"}), audit


def _run(executor: ToolExecutor, name: str, turn: int = 0, **arguments):
    report = executor.execute(
        [ToolCall(name, arguments, id=f"call_{turn}_0")], [], trajectory_id="t1", turn=turn
    )
    return report.results[0], report.risk_events


def test_the_four_tools_exist_with_schemas():
    kit = MemoryToolkit(MemoryStore())
    assert tuple(kit.tools) == MEMORY_TOOL_NAMES == tuple(MEMORY_SIDE_EFFECTS)
    schema = kit.tools["memory_search"].schema()
    assert schema["parameters"]["required"] == ["query"]
    assert (
        kit.tools["memory_update"].schema()["parameters"]["properties"]["id"]["type"] == "integer"
    )


def test_write_search_update_delete_round_trip_is_audited(tmp_path):
    kit = MemoryToolkit(MemoryStore(max_entries=4))
    kit.trajectory_id, kit.step = "t1", 3
    executor, audit = _executor(kit, tmp_path)

    result, events = _run(
        executor, "memory_write", text="Alice Moreau: codeword falcon", tags=["alice"]
    )
    assert (result.ok, result.content, events) == (True, "Stored memory 1.", ())
    assert kit.store.get(1).source_trajectory == "t1" and kit.store.get(1).created_step == 3
    result, _ = _run(executor, "memory_write", turn=1, text="Bruno Silva: codeword otter")
    result, _ = _run(executor, "memory_search", turn=2, query="Alice codeword", k=2)
    assert result.content == (
        "Found 2 memories:\n[1] Alice Moreau: codeword falcon (tags: alice)\n"
        "[2] Bruno Silva: codeword otter"
    )
    result, _ = _run(executor, "memory_update", turn=3, id=1, text="Alice Moreau: codeword comet")
    assert (
        result.content == "Updated memory 1."
        and kit.store.get(1).text == "Alice Moreau: codeword comet"
    )
    result, _ = _run(executor, "memory_delete", turn=4, id=2)
    assert result.content == "Deleted memory 2." and len(kit.store) == 1
    result, _ = _run(executor, "memory_search", turn=5, query="zebra")
    assert result.content == "Found 0 memories."

    records = list(audit.read())
    assert [r["tool"] for r in records] == [
        "memory_write",
        "memory_write",
        "memory_search",
        "memory_update",
        "memory_delete",
        "memory_search",
    ]
    assert all(
        r["decision"] == "allow" and r["run_id"] == "r1" and r["trajectory_id"] == "t1"
        for r in records
    )
    assert [e.to_dict() for e in kit.drain_events()] == [
        {"op": "write", "ok": True, "entry_ids": [1], "hits": 0, "store_size": 1},
        {"op": "write", "ok": True, "entry_ids": [2], "hits": 0, "store_size": 2},
        {"op": "search", "ok": True, "entry_ids": [1, 2], "hits": 2, "store_size": 2},
        {"op": "update", "ok": True, "entry_ids": [1], "hits": 0, "store_size": 2},
        {"op": "delete", "ok": True, "entry_ids": [2], "hits": 0, "store_size": 1},
        {"op": "search", "ok": True, "entry_ids": [], "hits": 0, "store_size": 1},
    ]
    assert kit.drain_events() == ()


def test_refused_operations_are_error_observations_and_failed_events(tmp_path):
    kit = MemoryToolkit(MemoryStore(max_entries=1, max_chars=40))
    executor, audit = _executor(kit, tmp_path)
    assert _run(executor, "memory_write", text="first")[0].ok
    result, _ = _run(executor, "memory_write", text="second")
    assert not result.ok and result.content.startswith(
        "Error: MemoryFullError: memory is full (1 of 1 entries)"
    )
    result, _ = _run(executor, "memory_update", id=99, text="x")
    assert not result.ok and result.content == "Error: MemoryNotFoundError: no memory with id 99"
    result, _ = _run(executor, "memory_update", id=1, text="y" * 41)
    assert not result.ok and "over the limit of 40" in result.content
    result, _ = _run(executor, "memory_search", query="first", k=11)
    assert not result.ok and "k must be between 1 and 10" in result.content
    result, _ = _run(executor, "memory_delete", id="1")  # schema: id is an integer
    assert not result.ok and "id" in result.content
    assert [e.ok for e in kit.drain_events()] == [True, False, False, False, False]
    assert [r["status"] for r in audit.read()] == [
        "ok",
        "error",
        "error",
        "error",
        "error",
        "error",
    ]
    assert [e.text for e in kit.store.entries()] == ["first"]


def test_permission_policy_can_deny_a_memory_tool(tmp_path):
    kit = MemoryToolkit(MemoryStore())
    permissions = {
        "default": "deny",
        "tools": {
            "memory_search": {"side_effect": "read_only"},
            "memory_delete": {"side_effect": "workspace_write", "mode": "deny"},
        },
    }
    executor, audit = _executor(kit, tmp_path, permissions)
    kit.store.write("keep me")
    result, events = _run(executor, "memory_delete", id=1)
    assert not result.ok and result.content.startswith("Denied:")
    assert events and events[0].denied and events[0].tool == "memory_delete"
    assert len(kit.store) == 1  # never ran
    result, _ = _run(executor, "memory_write", text="x")  # unlisted tool: the default denies it
    assert result.content.startswith("Denied:")
    assert [r["decision"] for r in audit.read()] == ["deny", "deny"]


@pytest.mark.parametrize("name", MEMORY_TOOL_NAMES)
def test_default_side_effect_modes_allow_every_memory_tool(name):
    policy = PermissionPolicy.allow_all(MEMORY_SIDE_EFFECTS)
    assert policy.decide(ToolCall(name, {})).allowed
