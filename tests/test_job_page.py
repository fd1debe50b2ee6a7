"""The dashboard's page of summaries, in process: one listing of the page's rows, read
as ids and memos only (no search attribute decoded), its token sealed for its query; a
token Temporal no longer takes is a 422 naming page_token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pytest
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import (
    ListWorkflowExecutionsRequest,
    ListWorkflowExecutionsResponse,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from api.job_visibility_reads import JobViews
from workflows.errors import InvalidField
from workflows.job_states import JobStatus
from workflows.models import EventsMemo, Transition
from workflows.names import EVENTS_MEMO
from workflows.search_attributes import JOBS


def row(job_id: str, memo: EventsMemo | None) -> WorkflowExecutionInfo:
    info = WorkflowExecutionInfo()
    info.execution.workflow_id = job_id
    if memo is not None:
        payload = pydantic_data_converter.payload_converter.to_payloads([memo])[0]
        info.memo.fields[EVENTS_MEMO].CopyFrom(payload)
    return info


def memo(ts: int) -> EventsMemo:
    first = Transition(seq=1, status=JobStatus.PENDING, ts=ts, attempt=0)
    return EventsMemo(type="t", priority=0, created_at=ts, transitions=[first])


@dataclass
class Service:
    """Stands in for the workflow service: pages of `rows`, `size` at a time."""

    rows: list[WorkflowExecutionInfo]
    requests: list[ListWorkflowExecutionsRequest] = field(default_factory=list)

    async def list_workflow_executions(
        self, request: ListWorkflowExecutionsRequest, **_options: object
    ) -> ListWorkflowExecutionsResponse:
        self.requests.append(request)
        if request.next_page_token == b"gone":
            raise RPCError("bad token", RPCStatusCode.INVALID_ARGUMENT, b"")
        start = int(request.next_page_token or b"0")
        end = start + request.page_size
        more = str(end).encode() if end < len(self.rows) else b""
        return ListWorkflowExecutionsResponse(executions=self.rows[start:end], next_page_token=more)


@dataclass
class FakeClient:
    workflow_service: Service
    namespace: str = "default"
    data_converter: object = pydantic_data_converter


def views_of(rows: list[WorkflowExecutionInfo]) -> tuple[JobViews, Service]:
    service = Service(rows)
    return JobViews(cast(Client, FakeClient(service)), "secret-" * 6, 0), service


async def test_a_page_is_one_listing_of_its_rows_ids_and_memos() -> None:
    rows = [row(f"job-{i}", memo(1000 + i)) for i in range(5)]
    rows.insert(2, row("not-a-job-memo", None))
    views, service = views_of(rows)

    page = await views.page(None, None, 3, None)

    assert [job.id for job in page.jobs] == ["job-0", "job-1"]  # the row without one: out
    assert page.jobs[1].updated_at == 1001
    assert [r.page_size for r in service.requests] == [3]
    assert page.next_page_token is not None
    following = await views.page(None, None, 3, page.next_page_token)
    assert [job.id for job in following.jobs] == ["job-2", "job-3", "job-4"]
    assert following.next_page_token is None
    # Sealed for its query: another filter's page refuses it.
    with pytest.raises(InvalidField) as refused:
        await views.page(JobStatus.PENDING, None, 3, page.next_page_token)
    assert refused.value.extra == {"field": "page_token"}


async def test_a_token_temporal_no_longer_takes_is_refused_naming_page_token() -> None:
    views, _ = views_of([row("job-0", memo(1000))])
    token = views._tokens.seal(JOBS, b"gone")
    with pytest.raises(InvalidField) as refused:
        await views.page(None, None, 3, token)
    assert refused.value.extra == {"field": "page_token"}
