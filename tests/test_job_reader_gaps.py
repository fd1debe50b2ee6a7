"""What a page of jobs does with a run it cannot read in full (api/job_history_reads.py),
in process against the session's dev server: no worker ever polls these runs' queue, so
their workflow never answers."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowExecution

from api.job_history_reads import JobReader
from engine.clock import now_ms
from tests.conftest import wait_until_async
from workflows import names, search_attributes
from workflows.errors import TemporalUnavailable
from workflows.models import Job, JobInput, JobSpec, pending_job


async def never_answers(job_id: str) -> Job:
    raise TemporalUnavailable(f"no worker answered for {job_id}")


async def listed(client: Client, workflow_id: str) -> WorkflowExecution:
    async def found() -> WorkflowExecution | None:
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
            return execution
        return None

    execution: WorkflowExecution = await wait_until_async(found, what=f"{workflow_id} listed")
    return execution


def unserved_input() -> JobInput:
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    return JobInput(
        id=f"gap-{uuid.uuid4().hex}",
        spec=JobSpec(type="gap", params={"n": 1}),
        created_at=now_ms(),
        priority_key=3,
        activity_task_queue=queue,
        heartbeat_timeout_ms=60_000,
    )


async def test_a_run_whose_memo_cannot_be_read_is_listed_from_its_input(client: Client) -> None:
    inp = unserved_input()
    await client.start_workflow(
        names.JOB_WORKFLOW,
        inp,
        id=inp.id,
        task_queue=inp.activity_task_queue,
        memo={names.EVENTS_MEMO: {"transitions": "not a list"}},
        search_attributes=search_attributes.at_submit("gap", 0, inp.created_at),
    )
    reader = JobReader(client, never_answers)
    job = await reader.read(await listed(client, inp.id))
    assert job == pending_job(inp)


async def test_a_run_whose_input_cannot_be_read_is_a_503_naming_it(client: Client) -> None:
    job_id = f"gap-{uuid.uuid4().hex}"
    await client.start_workflow(
        names.JOB_WORKFLOW, {"not": "a job input"}, id=job_id, task_queue=f"nobody-{job_id}"
    )
    reader = JobReader(client, never_answers)
    with pytest.raises(TemporalUnavailable, match=job_id):
        await reader.read(await listed(client, job_id))


async def test_the_end_of_a_run_that_does_not_exist_is_none(client: Client) -> None:
    assert await JobReader(client, never_answers).ended(f"gap-{uuid.uuid4().hex}") is None
