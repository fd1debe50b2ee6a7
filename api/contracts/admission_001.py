"""001, the admission queue (`001_*` §3, §4 Model A): job intents with cost units,
admitted against one pool's capacity, fair between addons, run by the addons' own
workers.

- A job intent is a jobforge job of type `<addon_id>.<job_type>` in group `addon_id`
  (round-robin between addons) and pool `SCHEDULER_POOL` (its `cost_units` against the
  pool's capacity). `payload` is its params; `constraints`, `tags`,
  `expected_duration_sec` and `time_sensitive` are kept in its `meta`.
- Model A: an admitted intent (its leases granted, its attempt scheduled) is
  DISPATCHING and listed by `/dispatchable`. The addon's worker claims it through the
  agent bridge, which gives the attempt's lease (`lease_id`), then heartbeats, and
  reports it done or failed.
- `admission_only: true` is the design's MVP: approved now, or denied with
  `retry_after_sec` and nothing queued (the pool's `admission: reject`).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from api.auth import ByDep
from api.contracts.admission_001_metrics import QueueMetricsDep
from api.contracts.admission_001_reads import Dispatchable, IntentEvent, events
from api.contracts.units import epoch_ms, iso
from api.deps import BridgeDep, ClientDep, ConfigDep, GatesDep, JobsDep, WorkersDep
from api.routes.jobs import JobId
from api.tenancy import NO_TENANT
from engine.clock import now_ms
from workflows.contract_states import names, state_name, statuses_named
from workflows.errors import ErrorType, InvalidField, JobConflict, JobNotFound, PoolFull
from workflows.job_states import JobStatus, kinds_of
from workflows.models import (
    COST_UNITS_LIMIT,
    GATE_KEY_PATTERN,
    MAX_RUNTIME_MS_LIMIT,
    WORKER_ID_PATTERN,
    Job,
    JobSpec,
    WaitingFor,
)

DESIGN = "001"
BASE = "/api/system/scheduler/queue"
# The design's priority names, on jobforge's integer scale (all within -29..29, the
# priorities dispatched in exact order).
PRIORITIES = {"CRITICAL": 10, "HIGH": 5, "NORMAL": 0, "LOW": -5}
PRIORITY_NAMES = {value: name for name, value in PRIORITIES.items()}
JOB_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
# An expected duration is kept, not used: bounded only to stay a plain number.
MAX_DURATION_SEC = 365 * 24 * 3600.0
# jobforge's field → the design's, for a 422 that names the field the client sent.
FIELD_NAMES = {
    "type": "job_type",
    "params": "payload",
    "group": "addon_id",
    "max_runtime_ms": "max_runtime_sec",
    "meta": "constraints",
    "urgent_at": "deadline_at",
}
# The core statuses of each design state, to list by state (the phase then picks the
# rows): from the one table of state names.
STATE_STATUSES = {name: statuses_named(DESIGN, name) for name in names(DESIGN)}
State = Literal["QUEUED", "DISPATCHING", "RUNNING", "DONE", "FAILED", "CANCELED"]
AddonId = Annotated[str, Field(pattern=GATE_KEY_PATTERN)]
# The most intents a page of /dispatchable holds (each is one job read).
DISPATCHABLE_PAGE_MAX = 500


class IntentIn(BaseModel):
    """`POST …/jobs/submit`: the lease request's fields plus scheduling ones (§3.1)."""

    model_config = ConfigDict(extra="forbid")

    addon_id: AddonId
    job_type: Annotated[str, Field(pattern=JOB_TYPE_PATTERN)]
    cost_units: Annotated[int, Field(strict=True, ge=1, le=COST_UNITS_LIMIT)]
    priority: Literal["LOW", "NORMAL", "HIGH", "CRITICAL"] | int = "NORMAL"
    constraints: dict[str, JsonValue] = Field(default_factory=dict)
    expected_duration_sec: Annotated[float, Field(ge=0, le=MAX_DURATION_SEC)] | None = None
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    time_sensitive: bool = False
    earliest_start_at: datetime | None = None
    deadline_at: datetime | None = None
    max_runtime_sec: Annotated[float, Field(gt=0, le=MAX_RUNTIME_MS_LIMIT / 1000)] | None = None
    tags: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=100)
    admission_only: bool = Field(
        default=False, description="Approve now or deny with retry_after_sec; queue nothing"
    )

    @field_validator("tags", "constraints")
    @classmethod
    def _utf8(cls, value: Any) -> Any:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, ValueError):
            raise ValueError("not valid UTF-8 JSON (a lone surrogate?)") from None
        return value

    def spec(self, pool: str) -> JobSpec:
        """The jobforge job this intent is; a 422 names the design's field."""
        body: dict[str, Any] = {
            "type": f"{self.addon_id}.{self.job_type}",
            "params": self.payload,
            "priority": PRIORITIES.get(self.priority, self.priority)
            if isinstance(self.priority, str)
            else self.priority,
            "group": self.addon_id,
            "pool": pool,
            "cost_units": self.cost_units,
            "earliest_start_at": epoch_ms(self.earliest_start_at),
            # §7: a deadline makes the intent urgent at the pool; it does not fail it.
            "urgent_at": epoch_ms(self.deadline_at),
            "admission": "reject" if self.admission_only else "queue",
            "meta": {
                "constraints": self.constraints,
                "tags": self.tags,
                "expected_duration_sec": self.expected_duration_sec,
                "time_sensitive": self.time_sensitive,
            },
        }
        if self.max_runtime_sec is not None:
            body["max_runtime_ms"] = round(self.max_runtime_sec * 1000)
        try:
            return JobSpec.model_validate({k: v for k, v in body.items() if v is not None})
        except ValidationError as err:
            first = err.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "body"
            raise InvalidField(FIELD_NAMES.get(field, field), first["msg"]) from None


class IntentSubmitted(BaseModel):
    """A queued intent: the answer to a submit that is not admission-only."""

    job_id: str
    state: str


class Decision(BaseModel):
    """The admission-only answer (the design's MVP shape)."""

    approved: bool
    job_id: str | None = None
    state: str | None = None
    reason: str | None = None
    retry_after_sec: int | None = None


class Intent(BaseModel):
    """A job intent (§2.1), with its audit events."""

    job_id: str
    addon_id: str
    job_type: str
    cost_units: int
    priority: str | int
    constraints: dict[str, JsonValue]
    expected_duration_sec: float | None
    created_at: str
    state: str
    attempts: int
    next_earliest_start_at: str | None
    lease_id: str | None
    payload: dict[str, JsonValue]
    time_sensitive: bool
    deadline_at: str | None
    max_runtime_sec: float
    tags: list[str]
    pid: int | None = None
    result: JsonValue = None
    events: list[IntentEvent]

    @classmethod
    def of(cls, job: Job, now_ms: int, waiting_now: WaitingFor | None = None) -> Intent:
        """The intent `job` is; `waiting_now`: its wait as its gate tells it (paused)."""
        meta = job.meta
        addon = job.group or ""
        shown = state_name(job, DESIGN)
        start = job.earliest_start_at
        waiting = job.status == JobStatus.PENDING and start is not None and start > now_ms
        return cls(
            job_id=job.id,
            addon_id=addon,
            job_type=job.type.removeprefix(f"{addon}."),
            cost_units=job.cost_units,
            priority=PRIORITY_NAMES.get(job.priority, job.priority),
            constraints=_dict(meta.get("constraints")),
            expected_duration_sec=_number(meta.get("expected_duration_sec")),
            created_at=iso(job.created_at) or "",
            state=shown,
            attempts=job.attempts,
            next_earliest_start_at=iso(start) if waiting else None,
            lease_id=lease_id(job) if shown in ("DISPATCHING", "RUNNING") else None,
            payload=job.params,
            time_sensitive=bool(meta.get("time_sensitive")),
            # Asked as urgent_at (from before: the core's deadline_at).
            deadline_at=iso(job.urgent_at if job.urgent_at is not None else job.deadline_at),
            max_runtime_sec=job.max_runtime_ms / 1000,
            tags=[str(tag) for tag in _list(meta.get("tags"))],
            result=job.result,
            events=events(job, waiting_now),
        )


class LeaseIn(BaseModel):
    """A report from the addon's worker about the attempt it holds."""

    model_config = ConfigDict(extra="forbid")

    lease_id: str


class DoneIn(LeaseIn):
    result: JsonValue = None


class FailedIn(LeaseIn):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class ClaimIn(BaseModel):
    """`POST …/jobs/claim`: the addon's worker takes the next admitted intent."""

    model_config = ConfigDict(extra="forbid")

    addon_id: AddonId
    worker_id: Annotated[str, Field(pattern=WORKER_ID_PATTERN)]
    job_types: list[Annotated[str, Field(pattern=JOB_TYPE_PATTERN)]] | None = None
    wait_sec: Annotated[float, Field(ge=0, le=60)] = 0


class IntentReported(BaseModel):
    """The answer to the worker's report on its lease."""

    job_id: str
    state: str
    lease_id: str | None = None


def lease_id(job: Job) -> str | None:
    """The attempt's lease: which attempt, held by which worker."""
    if job.worker_id is None:
        return None
    return f"{job.id}:{job.attempt}:{job.worker_id}"


def lease_holder(job_id: str, lease: str) -> tuple[int, str]:
    """The attempt and worker a lease id names; 422 if it is not one of this job's."""
    owner, attempt, worker = [*lease.split(":", 2), "", ""][:3]
    if owner != job_id or not attempt.isdigit() or not worker:
        raise InvalidField("lease_id", "not a lease of this job")
    return int(attempt), worker


def _dict(value: object) -> dict[str, JsonValue]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def scheduler_pool(config: ConfigDep) -> str:
    """The pool whose capacity the intents count against (`SCHEDULER_POOL`)."""
    return config.contracts.scheduler_pool


PoolDep = Annotated[str, Depends(scheduler_pool)]


async def intent_job(job_id: JobId, jobs: JobsDep, pool: PoolDep) -> Job:
    """The job the path names, if it is a job intent (a job of the pool, of an addon's
    group), else a 404. 001 shows nothing only a live read gives (no heartbeat, no
    lease expiry): the job as its workflow holds it."""
    job = await jobs.get(job_id, NO_TENANT)
    if job.pool != pool or job.group is None:
        raise JobNotFound(job_id)
    return job


IntentJob = Annotated[Job, Depends(intent_job)]


def dispatchable_reader(client: ClientDep, config: ConfigDep, pool: PoolDep) -> Dispatchable:
    """The addon's admitted intents, read from the gates (admission_001_reads.py)."""
    return Dispatchable(client, config.temporal.task_queue, pool)


router = APIRouter(prefix=BASE, tags=["001: admission queue"])


@router.post("/jobs/submit", response_model=IntentSubmitted | Decision)
async def submit(
    body: IntentIn, jobs: JobsDep, by: ByDep, pool: PoolDep, counted: QueueMetricsDep
) -> IntentSubmitted | Decision:
    """Submit a job intent; with `admission_only`, approve it now or deny it."""
    spec = body.spec(pool)
    try:
        job = await jobs.submit(spec, by=by)
    except PoolFull as err:
        if not body.admission_only:
            raise
        reason = str(err.extra.get("reason") or ErrorType.POOL_FULL.value)
        counted.decisions.labels("denied", reason).inc()
        return Decision(approved=False, reason=reason, retry_after_sec=err.retry_after_s)
    shown = state_name(job, DESIGN)
    if body.admission_only:
        counted.decisions.labels("approved", "admitted").inc()
        return Decision(approved=True, job_id=job.id, state=shown)
    counted.decisions.labels("queued", "submitted").inc()
    return IntentSubmitted(job_id=job.id, state=shown)


@router.get("/jobs/{job_id}", response_model=Intent)
async def get_intent(job: IntentJob, gates: GatesDep) -> Intent:
    """A job intent, its state and its audit events."""
    waiting_now = None
    if job.waiting_for == WaitingFor.GROUP_LIMIT:
        waiting_now = (await gates.explain(job)).waiting_for  # a paused group
    return Intent.of(job, now_ms(), waiting_now)


@router.post("/jobs/{job_id}/cancel", response_model=Intent)
async def cancel(job: IntentJob, jobs: JobsDep, by: ByDep) -> Intent:
    """Cancel an intent that has not started; a running one is stopped."""
    return Intent.of(await jobs.stop(job.id, by=by), now_ms())


@router.get("/jobs", response_model=list[Intent])
async def list_intents(
    jobs: JobsDep,
    response: Response,
    pool: PoolDep,
    state: State | None = None,
    limit: Annotated[int, Query(ge=1)] = 50,
    page_token: str | None = None,
) -> list[Intent]:
    """Intents, newest first, of one state if asked (a page holds at most `limit`)."""
    statuses = kinds_of(STATE_STATUSES[state]) if state else ()
    page = await jobs.list_jobs(
        None, None, limit=limit, page_token=page_token, statuses=statuses, pool=pool
    )
    if page.next_page_token:
        response.headers["Next-Page-Token"] = page.next_page_token
    now = now_ms()
    return [
        Intent.of(job, now)
        for job in page.jobs
        if state is None or state_name(job, DESIGN) == state
    ]


@router.get("/dispatchable", response_model=list[Intent])
async def dispatchable(
    jobs: JobsDep,
    lister: Annotated[Dispatchable, Depends(dispatchable_reader)],
    response: Response,
    addon_id: Annotated[str, Query(pattern=GATE_KEY_PATTERN)],
    limit: Annotated[int, Query(ge=1, le=DISPATCHABLE_PAGE_MAX)] = 50,
    page_token: str | None = None,
) -> list[Intent]:
    """Every admitted intent of the addon, oldest first, in pages of at most
    `limit`: a worker may claim them now (Model A). `Next-Page-Token` is set while
    more may follow."""
    found, after = await lister.page(jobs.get, addon_id, limit, page_token)
    if after is not None:
        response.headers["Next-Page-Token"] = after
    now = now_ms()
    return [Intent.of(job, now) for job in found]


@router.post(
    "/jobs/claim",
    response_model=Intent,
    responses={204: {"description": "Nothing to run within `wait_sec`"}},
)
async def claim(
    request: Request, body: ClaimIn, jobs: JobsDep, bridge: BridgeDep, workers: WorkersDep
) -> Intent | Response:
    """The addon's worker takes the next admitted intent and holds its lease."""
    bridge.hosts_of(body.worker_id, None)  # refused before any wait
    await workers.seen(body.worker_id)
    prefix = f"{body.addon_id}."
    deadline = time.monotonic() + body.wait_sec
    while True:
        # The addon's types, looked up again each second: a first submit of a new
        # type during the wait is found.
        if body.job_types is not None:
            types = [prefix + job_type for job_type in body.job_types]
        else:
            types = [t for t in await jobs.known_types() if t.startswith(prefix)]
        left = deadline - time.monotonic()
        slice_s = min(max(left, 0.1), 1.0)
        if types:
            claimed = await bridge.claim(
                body.worker_id, types, slice_s, gone=request.is_disconnected
            )
            if claimed is not None:
                break
        else:
            await asyncio.sleep(slice_s)
        if time.monotonic() >= deadline or await request.is_disconnected():
            return Response(status_code=status.HTTP_204_NO_CONTENT)
    job = await jobs.get(claimed.id)
    # Claimed: the job is assigned (its signal may not be applied yet).
    lease = f"{job.id}:{claimed.attempt}:{body.worker_id}"
    return Intent.of(job, now_ms()).model_copy(update={"state": "DISPATCHING", "lease_id": lease})


def lease_worker(job: Job, lease: str) -> str:
    """The worker that holds `lease` on the job's current attempt; 422 if the lease is
    not one of this job's, 409 if its attempt has ended."""
    attempt, worker = lease_holder(job.id, lease)
    if attempt != job.attempt:
        raise JobConflict(
            f"lease {lease} has ended (the job is on attempt {job.attempt})",
            id=job.id,
            state=state_name(job, DESIGN),
        )
    return worker


@router.post("/jobs/{job_id}/heartbeat", response_model=IntentReported)
async def heartbeat(job: IntentJob, body: LeaseIn, bridge: BridgeDep) -> IntentReported:
    """Keep the lease; the first heartbeat makes the intent RUNNING."""
    await bridge.heartbeat(job.id, lease_worker(job, body.lease_id), None)
    return IntentReported(job_id=job.id, state="RUNNING", lease_id=body.lease_id)


@router.post("/jobs/{job_id}/done", response_model=IntentReported)
async def done(job: IntentJob, body: DoneIn, bridge: BridgeDep) -> IntentReported:
    """The addon's report: the intent ran to completion (DONE)."""
    await bridge.result(job.id, lease_worker(job, body.lease_id), body.result, None, None)
    return IntentReported(job_id=job.id, state="DONE")


@router.post("/jobs/{job_id}/failed", response_model=IntentReported)
async def failed(job: IntentJob, body: FailedIn, bridge: BridgeDep) -> IntentReported:
    """The addon's report: the attempt failed. Queued again while attempts remain
    (QUEUED), FAILED after the last one."""
    ended = await bridge.fail(job.id, lease_worker(job, body.lease_id), body.reason)
    shown = {JobStatus.QUARANTINED: "FAILED", JobStatus.PENDING: "QUEUED"}
    return IntentReported(job_id=job.id, state=shown.get(ended, ended.value.upper()))
