"""Priority is exact: a backlog is claimed by priority descending, then arrival.

Jobs are submitted while nobody polls their queue, each one's attempt queued before the
next is submitted (the arrival order Temporal sees), then one agent claims them one at
a time. With the former 5 bands, priorities 2 and 9 shared a key and ran in arrival
order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from temporalio.client import Client

from tests.conftest import Api, wait_until_async
from workflows.models import PRIORITY_LEVELS, priority_range

pytestmark = pytest.mark.usefixtures("session_worker")

QUEUE_PREFIX = f"prio-{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues only this module's claims poll."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX)


async def attempt_queued(client: Client, job_id: str) -> bool:
    """Whether the job's attempt is in its task queue."""
    desc = await client.get_workflow_handle(job_id).describe()
    return bool(desc.raw_description.pending_activities)


async def backlog(
    hub: Api, client: Client, job_type: str, priorities: list[int], groups: list[str] | None = None
) -> list[str]:
    """Submit a job per priority (and group), in this order, each queued before the next."""
    job_ids: list[str] = []
    for seq, priority in enumerate(priorities):
        grouped = {"group": groups[seq]} if groups else {}
        job_ids.append(hub.submit(type=job_type, priority=priority, params={"seq": seq}, **grouped))
        await wait_until_async(
            lambda: attempt_queued(client, job_ids[-1]), what="the attempt queued"
        )
    return job_ids


def claim_all(hub: Api, job_type: str, count: int) -> list[str]:
    """One agent takes `count` jobs one at a time, completing each before the next."""
    taken = []
    for _ in range(count):
        response = hub.http.post(
            "/api/jobs/claim", json={"worker_id": "agent-p", "types": [job_type], "wait": 10}
        )
        assert response.status_code == 200, response.text
        job_id = response.json()["id"]
        done = hub.http.post(
            f"/api/jobs/{job_id}/result", json={"worker_id": "agent-p", "result": {}}
        )
        assert done.status_code == 200, done.text
        taken.append(job_id)
    return taken


async def test_a_backlog_is_claimed_by_exact_priority_then_arrival(
    hub: Api, client: Client, job_type: str
) -> None:
    low, high = priority_range(PRIORITY_LEVELS)
    # Ascending arrival, so arrival order alone would be the reverse; 2 and 9 fell in one
    # band before. Repeats check arrival order within a priority.
    priorities = [low, -5, 0, 2, 0, 9, 2, 17, 9, high - 1, high, low + 1]
    job_ids = await backlog(hub, client, job_type, priorities)

    taken = claim_all(hub, job_type, len(job_ids))

    expected = sorted(range(len(priorities)), key=lambda seq: (-priorities[seq], seq))
    assert [priorities[job_ids.index(job_id)] for job_id in taken] == [
        29, 28, 17, 9, 9, 2, 2, 0, 0, -5, -28, -29
    ]  # fmt: skip
    assert taken == [job_ids[seq] for seq in expected]


async def test_priorities_beyond_the_exact_range_share_its_end_and_go_by_arrival(
    hub: Api, client: Client, job_type: str
) -> None:
    low, high = priority_range(PRIORITY_LEVELS)
    priorities = [high - 1, high, 1_000_000, high + 1, low, -1_000_000, low - 1, low + 1]
    job_ids = await backlog(hub, client, job_type, priorities)

    taken = claim_all(hub, job_type, len(job_ids))

    # 29, 1,000,000 and 30 share the first key, -29, -1,000,000 and -30 the last: each
    # group in arrival order; 28 and -28 keep their own places.
    assert taken == [job_ids[seq] for seq in (1, 2, 3, 0, 7, 4, 5, 6)]


async def test_priority_goes_before_the_round_robin_between_groups_on_one_queue(
    hub: Api, client: Client, job_type: str
) -> None:
    a, b = f"a-{job_type}", f"b-{job_type}"
    groups = [a, b, a, b, a, b]
    priorities = [0, 0, 2, 9, 0, -3]
    job_ids = await backlog(hub, client, job_type, priorities, groups)

    taken = claim_all(hub, job_type, len(job_ids))

    # Each group's gate granted its jobs at submit; on the queue, the key comes first
    # and the groups take turns only among jobs of one priority.
    assert [priorities[job_ids.index(job_id)] for job_id in taken] == [9, 2, 0, 0, 0, -3]
