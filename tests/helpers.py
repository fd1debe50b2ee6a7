"""Helpers shared by tests: a job's statuses, a threaded reader of the event stream, and
a stand-in for the visibility listing the event feed reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import (
    ListWorkflowExecutionsRequest,
    ListWorkflowExecutionsResponse,
)
from temporalio.contrib.pydantic import pydantic_data_converter

from worker.hub_client import server_sent_events
from workflows.models import EventsMemo, Transition
from workflows.names import EVENTS_MEMO


def statuses(job: dict[str, Any]) -> list[str]:
    """The job's recorded status sequence."""
    return [t["status"] for t in job["transitions"]]


@dataclass
class Sse:
    """One parsed server-sent event."""

    event: str
    id: str
    data: dict[str, Any]

    @property
    def job_id(self) -> str:
        """The job the event is about."""
        job_id: str = self.data["id"]
        return job_id


def read_events(response: httpx.Response) -> Iterator[Sse]:
    """Parse an SSE body as it streams (with the CLI's parser)."""
    for event, event_id, data in server_sent_events(response.iter_lines()):
        yield Sse(event, event_id, data)


@dataclass
class Collector:
    """Reads `GET /api/jobs/events` in a thread until `done` says so, the connection
    ends, or the deadline passes; an error (a killed API) is kept for the test."""

    url: str
    params: dict[str, Any]
    done: Callable[[list[Sse]], bool]
    last_event_id: str | None = None
    # Sent with the request (a token, a tenant's principal); none: the open stream.
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Sse] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self, deadline_s: float) -> threading.Thread:
        """Start reading."""
        thread = threading.Thread(target=self._read, args=(deadline_s,), daemon=True)
        thread.start()
        return thread

    def _read(self, deadline_s: float) -> None:
        resume = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
        headers = {**self.headers, **resume}
        end = time.monotonic() + deadline_s
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(deadline_s, connect=10)) as http,
                http.stream("GET", self.url, params=self.params, headers=headers) as response,
            ):
                assert response.status_code == 200, response.read()
                self.connected.set()
                for sse in read_events(response):
                    self.events.append(sse)
                    if self.done(self.events) or time.monotonic() > end:
                        return
        except BaseException as err:  # surfaced by the test
            self.error = err
            self.connected.set()


@dataclass
class Listed:
    """A job as a visibility listing shows it."""

    id: str
    transitions: list[Transition]

    def info(self) -> WorkflowExecutionInfo:
        """The row as Temporal sends it."""
        memo = EventsMemo(type="t", priority=0, created_at=0, transitions=self.transitions)
        info = WorkflowExecutionInfo()
        info.execution.workflow_id = self.id
        payload = pydantic_data_converter.payload_converter.to_payloads([memo])[0]
        info.memo.fields[EVENTS_MEMO].CopyFrom(payload)
        return info


@dataclass
class Visibility:
    """Stands in for the client (its workflow service too): every listing shows `rows`,
    and is counted."""

    rows: list[Listed] = field(default_factory=list)
    listings: int = 0
    namespace: str = "default"
    data_converter: Any = pydantic_data_converter

    @property
    def workflow_service(self) -> Visibility:
        return self

    async def list_workflow_executions(
        self, _request: ListWorkflowExecutionsRequest, **_options: object
    ) -> ListWorkflowExecutionsResponse:
        self.listings += 1
        return ListWorkflowExecutionsResponse(executions=[row.info() for row in self.rows])
