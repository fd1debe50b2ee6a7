"""A gate keeps its latest operator changes (who, when, what) and writes them into its
memo, for GET /api/audit; in-process (tests/workflow_harness.py)."""

from __future__ import annotations

from typing import Any

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness
from workflows.gate_models import (
    GATE_CHANGES_KEEP,
    GateKind,
    GatePatch,
    GateSettings,
    LockRequest,
    TargetResume,
)
from workflows.names import GATE_CHANGES_MEMO


async def changes_of(gates: Gates, kind: GateKind, key: str) -> list[dict[str, Any]]:
    handle = gates._client.get_workflow_handle(gates.ref(kind, key).workflow_id)
    memo = await (await handle.describe()).memo()
    changes: list[dict[str, Any]] = memo.get(GATE_CHANGES_MEMO) or []
    return changes


async def changes_until(gates: Gates, kind: GateKind, key: str, count: int) -> list[Any]:
    async def enough() -> list[dict[str, Any]] | None:
        changes = await changes_of(gates, kind, key)
        return changes if len(changes) >= count else None

    found: list[dict[str, Any]] = await wait_until_async(
        enough, timeout=30, what=f"{count} change(s) in the memo"
    )
    return found


async def test_a_pause_and_a_resume_are_kept_with_their_caller(harness: Harness) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    await gates.pause(GateKind.GROUP, "g", by="alice")
    await gates.resume(GateKind.GROUP, "g", TargetResume(by="bob"))
    pause, resume = await changes_until(gates, GateKind.GROUP, "g", 2)
    assert (pause["action"], pause["by"]) == ("pause", "alice")
    assert (resume["action"], resume["by"]) == ("resume", "bob")
    assert 0 < pause["ts"] <= resume["ts"]


async def test_a_capacity_change_and_a_lock_are_kept_a_renewal_is_not(harness: Harness) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=5, by="carol"))
    ask = LockRequest(owner="d1", by="daemon")
    await gates.lock(GateKind.POOL, "p", ask)
    await gates.lock(GateKind.POOL, "p", ask)  # a renewal
    await gates.unlock(GateKind.POOL, "p", ask)
    await gates.unlock(GateKind.POOL, "p", ask)  # held by nobody: nothing changes
    changes = await changes_until(gates, GateKind.POOL, "p", 3)
    assert [(c["action"], c["by"], c["detail"]) for c in changes] == [
        ("configure", "carol", "capacity=5"),
        ("lock", "daemon", "owner=d1"),
        ("unlock", "daemon", "owner=d1"),
    ]


async def test_a_gate_keeps_only_its_latest_changes(harness: Harness) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    for n in range(GATE_CHANGES_KEEP + 3):
        await gates.configure(GateKind.POOL, "q", GatePatch(capacity=n + 1, by=f"u{n}"))

    async def last_written() -> list[dict[str, Any]] | None:
        changes = await changes_of(gates, GateKind.POOL, "q")
        return changes if changes and changes[-1]["by"] == f"u{GATE_CHANGES_KEEP + 2}" else None

    changes = await wait_until_async(last_written, timeout=30, what="the last change written")
    assert len(changes) == GATE_CHANGES_KEEP
    assert changes[0]["by"] == "u3"
