"""A gate's lock, in process: one owner at a time, renewed by its owner, taken over once
its owner let it expire (workflow time), given back, and carried across continue-as-new.

The pool gate runs on a fresh task queue of the session's dev server
(tests/workflow_harness.py); the lock is taken as the API takes it (engine/gates.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness
from workflows.errors import TemporalCallFailed
from workflows.gate_models import GateKind, GateSettings, LockAnswer, LockRequest

POOL = GateKind.POOL
LONG_TTL_S = 600.0


def gates_for(harness: Harness, **defaults: Any) -> Gates:
    return Gates(harness.client, harness.task_queue, GateSettings(**defaults))


async def test_the_first_owner_holds_the_lock_and_another_is_refused_with_its_name(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    first = await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
    assert first.held and first.lock is not None and first.lock.owner == "a"
    refused = await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))
    assert not refused.held
    assert refused.lock == first.lock  # who holds it, and since when
    # Its owner renews it: same `since`, a later renewal.
    renewed = await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
    assert renewed.held and renewed.lock is not None
    assert renewed.lock.since == first.lock.since
    assert renewed.lock.renewed_at >= first.lock.renewed_at
    # Another gate's lock is its own.
    other = await gates.lock(POOL, "ws-2", LockRequest(owner="b", ttl_s=LONG_TTL_S))
    assert other.held


async def test_a_lock_given_back_is_free_and_only_its_owner_gives_it_back(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
    kept = await gates.unlock(POOL, "ws", LockRequest(owner="b"))
    assert kept.lock is not None and kept.lock.owner == "a"
    assert not (await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))).held
    freed = await gates.unlock(POOL, "ws", LockRequest(owner="a"))
    assert freed.lock is None
    taken = await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))
    assert taken.held and taken.lock is not None and taken.lock.owner == "b"


async def test_a_lock_its_owner_stopped_renewing_is_taken_over_after_its_ttl(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    first = await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=1.0))
    assert first.held and first.lock is not None

    async def taken() -> LockAnswer | None:
        answer = await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))
        return answer if answer.held else None

    answer: LockAnswer = await wait_until_async(taken, timeout=15, what="the lock taken over")
    assert answer.lock is not None
    # Not before the first owner's ttl passed, by the gate's clock.
    assert answer.lock.since >= first.lock.renewed_at + first.lock.ttl_ms
    # The first owner, back, is refused: the lock is the second one's now.
    late = await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=1.0))
    assert not late.held and late.lock is not None and late.lock.owner == "b"


async def test_a_bad_lock_request_is_rejected_and_changes_nothing(harness: Harness) -> None:
    gates = gates_for(harness)
    await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
    for bad in (LockRequest(owner="", ttl_s=1.0), LockRequest(owner="b", ttl_s=0)):
        with pytest.raises(TemporalCallFailed, match="owner and a positive ttl_s"):
            await gates.lock(POOL, "ws", bad)
    still = await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))
    assert not still.held and still.lock is not None and still.lock.owner == "a"


@pytest.mark.slow(20)
async def test_the_lock_is_carried_across_continue_as_new(harness: Harness) -> None:
    gates = gates_for(harness, history_limit=30)
    first = await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
    assert first.lock is not None
    gate_id = gates.ref(POOL, "ws").workflow_id

    async def continued() -> bool:
        # Each renewal adds to the gate's history, until it continues as new.
        await gates.lock(POOL, "ws", LockRequest(owner="a", ttl_s=LONG_TTL_S))
        runs = [r async for r in harness.client.list_workflows(f"WorkflowId = '{gate_id}'")]
        return len(runs) > 1

    await wait_until_async(continued, timeout=30, what="the gate to continue as new")
    refused = await gates.lock(POOL, "ws", LockRequest(owner="b", ttl_s=LONG_TTL_S))
    assert not refused.held and refused.lock is not None
    assert (refused.lock.owner, refused.lock.since) == ("a", first.lock.since)
