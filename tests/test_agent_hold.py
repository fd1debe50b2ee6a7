"""An HTTP agent's hold on its attempt lasts until its report is answered: in process,
the agent heartbeats through its final log flush, and the bridge gives a claimer the
whole heartbeat timeout when the claim itself was slow. And the bridge's held `running`
report: sent once after the delay, never for an attempt that ended first."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.common.v1 import Payloads
from temporalio.api.workflowservice.v1 import PollActivityTaskQueueResponse
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.agent_bridge import Bridge, ClaimTiming, Delivery, Holding, QueuePump
from api.job_service import JobService
from engine.connection import DATA_CONVERTER, TemporalSettings
from worker.agent import Agent, AgentSettings
from worker.hub_client import HubSettings
from worker.settings import SolverSettings, WorkerSettings
from workflows.job_states import JobStatus
from workflows.models import AttemptInput, AttemptReport, ClaimedJob, Job
from workflows.names import REPORT_SIGNAL

HEARTBEAT_TIMEOUT_MS = 600
JOB_FIELDS: dict[str, Any] = {
    "id": "j1",
    "type": "t",
    "params": {},
    "max_runtime_ms": 60_000,
    "attempt": 1,
    "priority": 0,
    "created_at": 0,
    "max_attempts": 3,
}


# -- the agent -------------------------------------------------------------------------


@dataclass
class SlowFlushHub:
    """The hub's worker routes in process. Each log upload is answered only once a
    heartbeat arrived after it began, or after `wait_s`: whether one did is recorded."""

    wait_s: float = 10.0
    calls: list[str] = field(default_factory=list)
    uploads_heard: list[bool] = field(default_factory=list)
    _beat: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        route = request.url.path.rsplit("/", 1)[-1]
        self.calls.append(route)
        if route == "heartbeat":
            self._beat.set()
            return httpx.Response(204)
        if route == "logs":
            self._beat.clear()
            try:
                await asyncio.wait_for(self._beat.wait(), self.wait_s)
                self.uploads_heard.append(True)
            except TimeoutError:
                self.uploads_heard.append(False)
            offset = json.loads(request.content)["offset"]
            return httpx.Response(200, json={"next_offset": offset + 1})
        assert route == "result", request.url
        return httpx.Response(200, json={"id": "j1", "status": "completed"})


def agent_with(hub: SlowFlushHub, cache: Path) -> Agent:
    """An agent whose registered solver for type `t` prints one line and exits."""
    settings = AgentSettings(
        hub=HubSettings.model_validate({"HUB_URL": "http://hub"}),
        worker=WorkerSettings.model_validate(
            {
                "NODE_ID": "w1",
                "solvers": {"t": [sys.executable, "-c", "print('{}')"]},
                "PROGRESS_PUBLISH_MS": 100,
            }
        ),
    )
    agent = Agent(settings, SolverSettings(cache_dir=cache))
    agent._hub._http = httpx.AsyncClient(
        base_url="http://hub", transport=httpx.MockTransport(hub.handle)
    )
    return agent


@pytest.mark.process  # the agent runs a real solver process
async def test_an_agent_heartbeats_through_its_final_log_flush_until_it_reports(
    tmp_path: Path,
) -> None:
    hub = SlowFlushHub()
    job = ClaimedJob.model_validate(
        {
            **JOB_FIELDS,
            "job_id": "j1",
            "status": "assigned",
            "worker_id": "w1",
            "claimed_at": 0,
            "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
        }
    )
    agent = agent_with(hub, tmp_path / "cache")

    await agent._run_job(job, asyncio.Event())

    # The solver's line is flushed after it exited: that upload is answered only once a
    # heartbeat came meanwhile (the attempt would otherwise time out under a slow hub).
    assert hub.uploads_heard, hub.calls
    assert all(hub.uploads_heard), hub.calls
    assert hub.calls[0] == "heartbeat"
    assert hub.calls[-1] == "result"


# -- the bridge ------------------------------------------------------------------------


@dataclass
class FakeTemporal:
    """The client calls a bridge's hand-over makes: the claim update answers `job`;
    heartbeats by task token are counted."""

    job: Job
    heartbeats: int = 0
    data_converter: Any = DATA_CONVERTER

    def get_workflow_handle(self, workflow_id: str) -> FakeTemporal:
        assert workflow_id == self.job.id
        return self

    async def execute_update(self, *_: object, **__: object) -> Job:
        return self.job

    def get_async_activity_handle(self, *, task_token: bytes) -> FakeTemporal:
        assert task_token == b"token"
        return self

    async def heartbeat(self) -> None:
        self.heartbeats += 1


async def hand_over(polled_s_ago: float) -> tuple[ClaimedJob | None, FakeTemporal]:
    """A claim whose task the poll got `polled_s_ago` seconds ago."""
    job = Job.model_validate(
        {**JOB_FIELDS, "status": JobStatus.ASSIGNED, "worker_id": "w1", "claimed_at": 0}
    )
    fake = FakeTemporal(job)
    attempt = AttemptInput(job_id="j1", type="t", params={}, max_runtime_ms=60_000, attempt=1)
    (payload,) = await DATA_CONVERTER.encode([attempt])
    task = PollActivityTaskQueueResponse(
        task_token=b"token",
        input=Payloads(payloads=[payload]),
        heartbeat_timeout=Duration(nanos=HEARTBEAT_TIMEOUT_MS * 1_000_000),
    )
    bridge = Bridge(cast(Client, fake), TemporalSettings(), cast(JobService, None))
    delivery = Delivery(QueuePump("q"), task, at=time.monotonic() - polled_s_ago)
    return await bridge._hand_over("w1", delivery, "w1", ClaimTiming()), fake


async def test_a_claim_slower_than_a_quarter_of_the_heartbeat_timeout_heartbeats_its_attempt() -> (
    None
):
    claimed, temporal = await hand_over(polled_s_ago=HEARTBEAT_TIMEOUT_MS / 1000)
    assert claimed is not None
    assert temporal.heartbeats == 1
    # The answer's lease runs from that heartbeat, not from the claim.
    assert claimed.heartbeat_at is not None
    assert claimed.lease_expires_at == claimed.heartbeat_at + HEARTBEAT_TIMEOUT_MS
    assert claimed.heartbeat_at > claimed.claimed_at


async def test_a_quick_claim_costs_no_heartbeat() -> None:
    claimed, temporal = await hand_over(polled_s_ago=0)
    assert claimed is not None
    assert claimed.heartbeat_timeout_ms == HEARTBEAT_TIMEOUT_MS
    assert temporal.heartbeats == 0


# -- the held running report -------------------------------------------------------------


@dataclass
class FakeSignals:
    """A job's workflow as the held running report meets it: each signal is recorded,
    or refused with `refusal` (a closed workflow: NOT_FOUND)."""

    refusal: RPCError | None = None
    sent: list[AttemptReport] = field(default_factory=list)
    signalled: asyncio.Event = field(default_factory=asyncio.Event)

    def get_workflow_handle(self, workflow_id: str) -> FakeSignals:
        assert workflow_id == "j1"
        return self

    async def signal(self, name: str, report: AttemptReport) -> None:
        assert name == REPORT_SIGNAL
        self.signalled.set()
        if self.refusal is not None:
            raise self.refusal
        self.sent.append(report)


def held_bridge(fake: FakeSignals) -> tuple[Bridge, AttemptReport]:
    bridge = Bridge(cast(Client, fake), TemporalSettings(), cast(JobService, None))
    report = AttemptReport(
        attempt=1, worker_id="w1", phase="running", claimed_at=1000, started_at=1000
    )
    bridge._hold_running("j1", report)
    return bridge, report


async def test_a_held_running_report_goes_out_after_the_delay_once() -> None:
    fake = FakeSignals()
    bridge, report = held_bridge(fake)
    bridge._hold_running("j1", report.model_copy(update={"started_at": 2000}))

    await asyncio.wait_for(fake.signalled.wait(), 10)
    (held,) = bridge._reports.values()
    assert held.task is not None
    await held.task
    # One report, the first heartbeat's; the attempt's end then carries the time too.
    assert fake.sent == [report]
    assert await bridge._settle_report(Holding("j1", 1, JobStatus.RUNNING)) == 1000


async def test_an_attempt_that_ends_within_the_delay_sends_no_report_but_carries_its_start() -> (
    None
):
    fake = FakeSignals()
    bridge, _ = held_bridge(fake)
    (held,) = bridge._reports.values()

    task = held.task
    assert task is not None
    attempt = Holding("j1", 1, JobStatus.ASSIGNED)
    assert await bridge._settle_report(attempt) == 1000
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    # A result whose completion did not go through is retried with the same start.
    assert await bridge._settle_report(attempt) == 1000
    bridge._drop_report(attempt)  # it went through
    assert (fake.sent, bridge._reports) == ([], {})


async def test_a_held_report_that_fires_after_the_job_closed_is_dropped_quietly() -> None:
    # Its result reached another replica, and the workflow closed: NOT_FOUND.
    fake = FakeSignals(refusal=RPCError("closed", RPCStatusCode.NOT_FOUND, b""))
    bridge, _ = held_bridge(fake)
    (held,) = bridge._reports.values()
    assert held.task is not None

    await held.task  # no error: nothing left to report to

    assert fake.signalled.is_set()
    assert fake.sent == []
