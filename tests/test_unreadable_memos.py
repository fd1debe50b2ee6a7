"""A run of jobforge's workflow types whose memo jobforge did not write (started by hand,
or by a tool that knows the type's name) fails no read of many: the page, the audit,
the gates' list and the event stream leave it out and answer for the others. Against
the session's API; the runs have no worker, and are deleted at the end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client

from engine.clock import now_ms
from tests.conftest import Api, wait_until, wait_until_async
from tests.helpers import Collector
from workflows import names, search_attributes

pytestmark = pytest.mark.usefixtures("session_worker")

NOT_A_MEMO = {"transitions": "not a list"}
# A job's identity with no transition: every job's memo holds its submission.
NO_TRANSITION = {"type": "x", "priority": 0, "created_at": 1, "transitions": []}


@pytest.fixture
async def foreign_runs(client: Client) -> AsyncIterator[Callable[..., Any]]:
    """Factory: start a run of a workflow type with a memo that is not jobforge's; it
    returns once visibility lists the run."""
    started: list[str] = []

    async def start(workflow: str, memo_key: str, memo: Any = NOT_A_MEMO, **attributes: Any) -> str:
        run_id = f"foreign-{uuid.uuid4().hex}"
        await client.start_workflow(
            workflow,
            {"not": "an input"},
            id=run_id,
            task_queue=f"nobody-{run_id}",
            memo={memo_key: memo},
            **attributes,
        )
        started.append(run_id)

        async def listed() -> bool:
            async for _ in client.list_workflows(f"WorkflowId = '{run_id}'"):
                return True
            return False

        await wait_until_async(listed, what=f"{run_id} listed")
        return run_id

    yield start
    for run_id in started:  # gone from visibility too: later reads never meet it
        await client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=run_id),
            )
        )


def ok(api: Api, path: str, **params: str) -> Any:
    response = api.http.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("memo", [NOT_A_MEMO, NO_TRANSITION], ids=["not-a-memo", "no-transition"])
async def test_a_job_run_with_a_foreign_memo_is_left_out_of_pages_audit_and_stream(
    api: Api, client: Client, foreign_runs: Callable[..., Any], memo: Any
) -> None:
    job_type = f"foreign-{uuid.uuid4().hex[:8]}"
    other = f"{job_type}-b"
    # A client on the stream first: the foreign run is then in every look it makes.
    stream = Collector(f"{api.url}/api/jobs/events", {"type": other}, lambda e: bool(e))
    reader = stream.run(60)
    assert stream.connected.wait(30), stream.error
    attributes = search_attributes.at_submit(job_type, 0, now_ms())
    foreign = await foreign_runs(
        names.JOB_WORKFLOW, names.EVENTS_MEMO, memo, search_attributes=attributes
    )
    job_id = api.submit(type=other)  # no worker serves it: it stays pending

    assert ok(api, "/api/jobs/page", type=job_type)["jobs"] == []
    assert foreign not in [job["id"] for job in ok(api, "/api/jobs/page")["jobs"]]
    audit = ok(api, "/api/audit", limit="200")
    assert foreign not in [entry["job_id"] for entry in audit["entries"]]
    reader.join(60)
    assert stream.error is None, stream.error
    assert [(e.event, e.job_id) for e in stream.events] == [("job:created", job_id)]
    api.http.delete(f"/api/jobs/{job_id}")


async def test_a_gate_run_with_a_foreign_memo_is_left_out_of_the_gates_lists(
    api: Api, foreign_runs: Callable[..., Any]
) -> None:
    await foreign_runs(names.GATE_WORKFLOW, names.GATE_MEMO)
    group = f"foreign-{uuid.uuid4().hex[:8]}"
    job_id = api.submit(type=f"{group}-t", group=group)

    for path in ("/api/pools", "/api/targets"):
        ok(api, path)
    wait_until(
        lambda: group in [view["group"] for view in ok(api, "/api/groups")],
        what=f"group {group} listed",
    )
    api.http.delete(f"/api/jobs/{job_id}")
