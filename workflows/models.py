"""The job model shared by the API, the workflows and the activities.

Stdlib and pydantic only: no I/O, no clocks, no environment, so the workflow sandbox,
the API and the workers can all import it.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from workflows.container_models import ContainerSpec
from workflows.gate_models import GateKind, GateRef, GateSettings
from workflows.job_states import CANCELLED, JobStatus, ended_kind

TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
PARAMS_MAX_BYTES = 64 * 1024
META_MAX_BYTES = 8 * 1024
PARAMS_MAX_DEPTH = 32
MAX_RUNTIME_MS_LIMIT = 7 * 24 * 3600 * 1000
PRIORITY_LIMIT = 1_000_000
CHECKSUM_PATTERN = re.compile(r"[0-9a-fA-F]{64}")
SOLVER_URL_MAX_LEN = 2048
WORKER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
# Group and pool names (they name a gate workflow and go into visibility queries).
GATE_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
# A target: `name` or `tenant/name`.
TARGET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}(/[A-Za-z0-9][A-Za-z0-9._:@-]{0,63})?$"
# A tenant (docs/architecture.md, "Tenants"): one 004 path segment. A tenant's gates
# are named `<tenant>/<name>`, so a group or pool may carry that prefix too.
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
TENANT_GATE_PATTERN = TARGET_PATTERN
COST_UNITS_LIMIT = 1_000_000
# Epoch milliseconds accepted for a time field: 2000-01-01 .. 2200-01-01.
EPOCH_MS_MIN = 946_684_800_000
EPOCH_MS_MAX = 7_258_118_400_000
# Host pinning (docs/workers.md): a host id is a worker id or a worker's WORKER_HOST, and
# how long a pinned job waits for its host by default.
HOST_PATTERN = WORKER_ID_PATTERN
REQUIRE_HOST_WAIT_MS = 3_600_000
PREFERRED_HOST_WAIT_MS = 30_000
HOST_WAIT_MS_LIMIT = 7 * 24 * 3600 * 1000
# How long a job's granted attempt may wait for a worker to take it (docs/reliability.md,
# "Dispatch timeout"); the API's default is JOB_DISPATCH_TIMEOUT_MS.
DISPATCH_TIMEOUT_MS_MIN = 100
DISPATCH_TIMEOUT_MS_LIMIT = 7 * 24 * 3600 * 1000


class ListOrder(StrEnum):
    """The orders `GET /api/jobs` (and `jobforge list`) offer."""

    RECENT = "recent"
    PRIORITY = "priority"


def _epoch_ms(value: Any) -> Any:
    """A time given as epoch milliseconds or as an ISO 8601 string with a zone."""
    if isinstance(value, bool):
        raise ValueError("must be epoch milliseconds or an ISO 8601 string with a zone")
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00", 1))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time") from None
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no zone (add Z or +hh:mm)")
        return int(parsed.timestamp() * 1000)
    return value


EpochMs = Annotated[
    int, BeforeValidator(_epoch_ms), Field(strict=True, ge=EPOCH_MS_MIN, le=EPOCH_MS_MAX)
]
HostWaitMs = Annotated[int, Field(strict=True, ge=100, le=HOST_WAIT_MS_LIMIT)]


class WaitingFor(StrEnum):
    """Why a pending job is not running yet (`Job.waiting_for`)."""

    GROUP_PAUSED = "group_paused"
    GROUP_LIMIT = "group_limit"
    POOL_CAPACITY = "pool_capacity"
    TARGET_BUSY = "target_busy"
    TARGET_HALTED = "target_halted"
    START_TIME = "start_time"
    NO_WORKER = "no_worker"
    # A container job: no live container-capable worker serves its type.
    EXECUTOR = "executor"
    # Pinned to a host (require_host, or preferred_host within its wait) none of whose
    # workers has taken it yet.
    HOST = "host"


# What a job waits for while it waits at a gate of each kind.
WAITING_AT: dict[GateKind, WaitingFor] = {
    GateKind.TARGET: WaitingFor.TARGET_BUSY,
    GateKind.GROUP: WaitingFor.GROUP_LIMIT,
    GateKind.POOL: WaitingFor.POOL_CAPACITY,
}


# A solver reports progress with stderr lines `JOBFORGE_PROGRESS <fraction> [message]`.
PROGRESS_MARKER = "JOBFORGE_PROGRESS"
PROGRESS_MESSAGE_MAX = 500


class Progress(BaseModel):
    """How far a running attempt is, as its solver or agent last said (`at`: ms)."""

    fraction: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    message: str | None = None
    at: int | None = None

    @classmethod
    def from_line(cls, line: str, at: int) -> Progress | None:
        """A progress line's value, or None if the line is not one (or malformed)."""
        marker, _, rest = line.strip().partition(" ")
        if marker != PROGRESS_MARKER:
            return None
        value, _, message = rest.strip().partition(" ")
        try:
            return cls(fraction=float(value), message=message[:PROGRESS_MESSAGE_MAX] or None, at=at)
        except ValueError:
            return None


def gate_tenant(name: str) -> str | None:
    """The tenant a gate name belongs to: `<tenant>/<name>`'s, or None."""
    tenant, slash, _ = name.partition("/")
    return tenant if slash else None


def gate_name_problem(tenant: str | None, name: str, field: str) -> str | None:
    """Why a job of `tenant` may not name the gate `name` (its `field`), or None. A
    tenant's job names only its tenant's gates (`<tenant>/<name>`); a job without a
    tenant names groups and pools without a prefix (a target `x/name` stays open to it:
    the form 004 used before tenants)."""
    owner = gate_tenant(name)
    if tenant is not None and owner != tenant:
        return f"a job of tenant {tenant} names its {field} {tenant}/<name>"
    if tenant is None and owner is not None and field != "target":
        return f"a {field} named <tenant>/<name> is that tenant's: give its tenant"
    return None


def tenant_gate_problem(spec: JobSpec) -> tuple[str, str] | None:
    """The first gate of `spec` its tenant may not name: (field, why), or None. Checked
    where a job is made (the API), not in the model: a rule here would be checked again
    each time a workflow decodes its input, and a job that failed it would never run."""
    for field in ("group", "pool", "target"):
        name: str | None = getattr(spec, field)
        if name is not None and (problem := gate_name_problem(spec.tenant, name, field)):
            return field, problem
    return None


def _json_depth(value: Any, depth: int = 1) -> int:
    if isinstance(value, dict):
        return max((_json_depth(v, depth + 1) for v in value.values()), default=depth)
    if isinstance(value, list):
        return max((_json_depth(v, depth + 1) for v in value), default=depth)
    return depth


class JobSpec(BaseModel):
    """A job as a producer submits it (`POST /api/jobs`)."""

    model_config = ConfigDict(extra="forbid")

    type: Annotated[str, Field(pattern=TYPE_PATTERN, description="Job type; routes the job.")]
    params: dict[str, JsonValue] = Field(default_factory=dict)
    # Strict: a JSON `true` or `"5"` is a mistake, not 1 or 5.
    priority: Annotated[int, Field(strict=True, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)] = 0
    max_attempts: Annotated[int, Field(strict=True, ge=1, le=100)] = 3
    max_runtime_ms: Annotated[int, Field(strict=True, ge=100, le=MAX_RUNTIME_MS_LIMIT)] = 300_000
    solver_url: Annotated[str | None, Field(max_length=SOLVER_URL_MAX_LEN)] = None
    solver_checksum: str | None = None
    container: Annotated[
        ContainerSpec | None,
        Field(description="Run this container instead of a solver (docs/workers.md)"),
    ] = None
    tenant: Annotated[
        str | None,
        Field(
            pattern=TENANT_PATTERN,
            description="Whose job it is: a tenant's token stamps its own; only an admin "
            "names one here. Its gates are named `<tenant>/<name>`",
        ),
    ] = None
    # Scheduling (docs/scheduling.md): a job with none of these takes the plain path.
    group: Annotated[str | None, Field(pattern=TENANT_GATE_PATTERN, description="Group gate")] = (
        None
    )
    pool: Annotated[str | None, Field(pattern=TENANT_GATE_PATTERN, description="Pool gate")] = None
    cost_units: Annotated[int, Field(strict=True, ge=1, le=COST_UNITS_LIMIT)] = 1
    target: Annotated[str | None, Field(pattern=TARGET_PATTERN, description="Serial target")] = None
    # Host pinning (docs/workers.md): one of the two, each with its wait.
    require_host: Annotated[str | None, Field(pattern=HOST_PATTERN, description="Only here")] = None
    require_host_wait_ms: HostWaitMs | None = None
    preferred_host: Annotated[str | None, Field(pattern=HOST_PATTERN, description="Here first")] = (
        None
    )
    preferred_host_wait_ms: HostWaitMs | None = None
    earliest_start_at: EpochMs | None = None
    deadline_at: EpochMs | None = None
    urgent_at: Annotated[
        EpochMs | None,
        Field(
            description="From this time the job counts as urgent at its gates (ordering "
            "only, as deadline_at does): nothing fails it when the time passes"
        ),
    ] = None
    heartbeat_timeout_ms: Annotated[
        int | None,
        Field(strict=True, ge=1000, le=3_600_000, description="Default JOB_HEARTBEAT_TIMEOUT_S"),
    ] = None
    dispatch_timeout_ms: Annotated[
        int | None,
        Field(
            strict=True,
            ge=DISPATCH_TIMEOUT_MS_MIN,
            le=DISPATCH_TIMEOUT_MS_LIMIT,
            description="A granted attempt no worker takes within this gives its leases "
            "back and waits again, no attempt counted. Default JOB_DISPATCH_TIMEOUT_MS",
        ),
    ] = None
    requeue_stale_claims: Annotated[
        bool,
        Field(
            strict=True,
            description="A claim whose worker never reports running within the heartbeat "
            "timeout goes back to the queue, no attempt counted (003's dispatched -> queued)",
        ),
    ] = False
    stop_claimed: Annotated[
        bool,
        Field(
            strict=True,
            description="A stop of an assigned job (claimed, not yet running) asks its "
            "worker to stop it (stop_requested, then stopped when the work is gone) "
            "instead of cancelling it (003's dispatched, 004's RUNNING)",
        ),
    ] = False
    admission: Annotated[
        Literal["queue", "reject"],
        Field(description="reject: 201 if the pool takes the job now, else 429 (nothing made)"),
    ] = "queue"
    meta: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Free-form labels kept with the job and returned; nothing reads them",
    )

    @property
    def scheduled(self) -> bool:
        """Whether the job passes a gate or a clock (else: the plain path)."""
        return any(
            value is not None
            for value in (
                self.group,
                self.pool,
                self.target,
                self.earliest_start_at,
                self.deadline_at,
            )
        )

    @field_validator("params", "meta")
    @classmethod
    def _bounded_json(
        cls, value: dict[str, JsonValue], info: ValidationInfo
    ) -> dict[str, JsonValue]:
        name = info.field_name
        limit = PARAMS_MAX_BYTES if name == "params" else META_MAX_BYTES
        if _json_depth(value) > PARAMS_MAX_DEPTH:
            raise ValueError(f"{name} nests deeper than {PARAMS_MAX_DEPTH} levels")
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except ValueError as err:  # NaN or Infinity: not JSON
            raise ValueError(f"{name} is not representable as JSON: {err}") from None
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(
                f"{name} contains a lone surrogate, which is not valid UTF-8"
            ) from None
        if size > limit:
            raise ValueError(f"{name} is larger than {limit} bytes as JSON")
        return value

    @field_validator("solver_checksum")
    @classmethod
    def _hex_checksum(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not CHECKSUM_PATTERN.fullmatch(value):
            raise ValueError("solver_checksum must be 64 hex characters (sha256)")
        return value.lower()

    @model_validator(mode="after")
    def _checksum_with_url(self) -> JobSpec:
        if self.solver_url is not None and self.solver_checksum is None:
            raise ValueError("solver_checksum is required when solver_url is given")
        return self

    @field_validator("container")
    @classmethod
    def _container_or_solver(
        cls, value: ContainerSpec | None, info: ValidationInfo
    ) -> ContainerSpec | None:
        if value is not None and info.data.get("solver_url") is not None:
            raise ValueError("a job runs a container or a solver_url, not both")
        return value

    # Checks across fields, each on the later field so a 422 names it (fields are
    # validated in order: pool before cost_units, earliest_start_at before deadline_at).
    @field_validator("cost_units")
    @classmethod
    def _cost_needs_pool(cls, value: int, info: ValidationInfo) -> int:
        if value != 1 and info.data.get("pool") is None:
            raise ValueError("needs a pool (cost is counted against a pool)")
        return value

    @field_validator("deadline_at")
    @classmethod
    def _deadline_after_start(cls, value: int | None, info: ValidationInfo) -> int | None:
        start = info.data.get("earliest_start_at")
        if value is not None and start is not None and value <= start:
            raise ValueError("must be after earliest_start_at")
        return value

    @field_validator("dispatch_timeout_ms")
    @classmethod
    def _dispatch_timeout_needs_a_gate(cls, value: int | None, info: ValidationInfo) -> int | None:
        gated = any(info.data.get(name) is not None for name in ("group", "pool", "target"))
        if value is not None and not gated:
            raise ValueError(
                "needs a group, pool or target (it bounds how long the job holds their "
                "leases while no worker takes it)"
            )
        return value

    @field_validator("admission")
    @classmethod
    def _admission_needs_pool(cls, value: str, info: ValidationInfo) -> str:
        if value == "reject" and info.data.get("pool") is None:
            raise ValueError("reject needs a pool (it is the pool's answer)")
        if value == "reject" and info.data.get("earliest_start_at") is not None:
            raise ValueError("reject takes no earliest_start_at (it answers now)")
        return value

    @field_validator("require_host_wait_ms", "preferred_host_wait_ms")
    @classmethod
    def _wait_needs_its_host(cls, value: int | None, info: ValidationInfo) -> int | None:
        host = (info.field_name or "").removesuffix("_wait_ms")
        if value is not None and info.data.get(host) is None:
            raise ValueError(f"needs {host} (it bounds the wait for that host)")
        return value

    @field_validator("preferred_host")
    @classmethod
    def _one_host_field(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("require_host") is not None:
            raise ValueError("give require_host or preferred_host, not both")
        return value

    @property
    def pinned_host(self) -> str | None:
        """The host this job is pinned to, required or preferred."""
        return self.require_host or self.preferred_host

    @model_validator(mode="after")
    def _scheduling(self) -> JobSpec:
        if self.target is not None and "max_attempts" not in self.model_fields_set:
            # A serial target halts on a failure: one attempt unless the submitter asks.
            self.max_attempts = 1
        if self.require_host is not None and self.require_host_wait_ms is None:
            self.require_host_wait_ms = REQUIRE_HOST_WAIT_MS
        if self.preferred_host is not None and self.preferred_host_wait_ms is None:
            self.preferred_host_wait_ms = PREFERRED_HOST_WAIT_MS
        return self


class FailRecord(BaseModel):
    """One failed attempt, as the spec's fail_history entry."""

    reason: str
    worker_id: str | None = None
    ts: int


class Transition(BaseModel):
    """One recorded status change of a job; the event stream is derived from these."""

    seq: int
    status: JobStatus
    ts: int
    attempt: int
    attempts: int = 0
    worker_id: str | None = None
    reason: str | None = None
    # Who made the change when it was not the job's own course: the API's caller (a
    # token's "<name> (<id>)", or "bootstrap"), "ops: <caller>" for an override; "ops"
    # alone for an override recorded before callers were.
    by: str | None = None


class Wait(BaseModel):
    """One wait of a job at a gate: why, and since when (workflow time, ms)."""

    reason: WaitingFor
    at: int


def gate_deadline(deadline_at: int | None, urgent_at: int | None) -> int | None:
    """The time a gate orders a job by (`GateRequest.deadline_at`): the sooner of its
    deadline and its urgency time."""
    known = [t for t in (deadline_at, urgent_at) if t is not None]
    return min(known) if known else None


# Transitions kept in each job's memo, so the event stream reads them from a
# visibility listing; older ones are read with a query when a reader falls behind.
EVENTS_MEMO_KEEP = 16


class RunSpec(BaseModel):
    """What a worker needs to run a job: the part of it every attempt carries."""

    type: str
    params: dict[str, JsonValue]
    solver_url: str | None = None
    solver_checksum: str | None = None
    max_runtime_ms: int
    container: ContainerSpec | None = None


class JobIdentity(BaseModel):
    """What a job is, apart from its state: kept in its memo and on every event."""

    type: str
    priority: int
    created_at: int
    tenant: str | None = None


class Job(BaseModel):
    """A job as read: every column of the spec's `jobs` table plus its transitions
    (its `RunSpec` and `JobIdentity` fields among them, in the spec's order)."""

    id: str
    type: str
    params: dict[str, JsonValue]
    status: JobStatus
    priority: int
    worker_id: str | None = None
    result: JsonValue = None
    result_hash: str | None = None
    created_at: int
    claimed_at: int | None = None
    heartbeat_at: int | None = None
    completed_at: int | None = None
    attempts: int = 0
    max_attempts: int
    max_runtime_ms: int
    fail_reason: str | None = None
    fail_history: list[FailRecord] = Field(default_factory=list)
    solver_url: str | None = None
    solver_checksum: str | None = None
    container: ContainerSpec | None = None
    log_tail: str | None = None
    result_key: str | None = Field(
        default=None, description="Idempotency key of the accepted result"
    )
    tenant: str | None = Field(default=None, description="Whose job it is (null: no tenant's)")
    attempt: int = Field(default=0, description="Number of the current or last attempt")
    transitions: list[Transition] = Field(default_factory=list)
    group: str | None = None
    pool: str | None = None
    cost_units: int = 1
    target: str | None = None
    require_host: str | None = None
    require_host_wait_ms: int | None = None
    preferred_host: str | None = None
    preferred_host_wait_ms: int | None = None
    host: str | None = Field(
        default=None, description="Host id of the worker that holds or last held the job"
    )
    earliest_start_at: int | None = None
    deadline_at: int | None = None
    urgent_at: int | None = None
    admission: Literal["queue", "reject"] = "queue"
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    heartbeat_timeout_ms: int | None = None
    dispatch_timeout_ms: int | None = None
    requeue_stale_claims: bool = False
    stop_claimed: bool = False
    progress: Progress | None = Field(
        default=None, description="The running attempt's last progress (live, not stored)"
    )
    lease_expires_at: int | None = Field(
        default=None, description="heartbeat_at plus the heartbeat timeout (live)"
    )
    waiting_for: WaitingFor | None = Field(
        default=None, description="Why a pending job is not running yet"
    )
    waits: list[Wait] = Field(
        default_factory=list, description="Each wait at a gate, in order, with its reason"
    )

    @property
    def cancelled(self) -> bool:
        """Failed by a cancel (the spec's `failed` with fail_reason `cancelled`)."""
        return ended_kind(self.status, self.fail_reason) == CANCELLED

    def attempt_input(self) -> AttemptInput:
        """The input of this job's current attempt."""
        return AttemptInput(
            job_id=self.id, attempt=self.attempt, **self.model_dump(include=_RUN_FIELDS)
        )


class JobInput(BaseModel):
    """JobWorkflow's input: the spec plus what the API decided at submit time."""

    id: str
    spec: JobSpec
    created_at: int
    priority_key: int
    activity_task_queue: str
    heartbeat_timeout_ms: int
    # A quarantined job of a group or target stays open this long for a re-queue
    # (retry-failed, target resume); other jobs close at once.
    requeue_hold_ms: int = 0
    # The gates this job passes, in order, and the settings a gate starts with should
    # the job have to start it.
    gates: list[GateRef] = Field(default_factory=list)
    gate_defaults: GateSettings | None = None
    # The leases its gates granted at submit (their workflow ids), held from the start,
    # and a group's weight with them.
    granted: list[str] = Field(default_factory=list)
    gate_weight: float | None = None
    # How long a job cancelled or stopped through its update waits for the API's
    # workflow cancel request before it closes by itself (0: for ever).
    cancel_wait_ms: int = 0
    # A preferred host's own queue: attempts wait there up to preferred_host_wait_ms,
    # then go to activity_task_queue. (A required host's queue is activity_task_queue.)
    preferred_task_queue: str | None = None
    # The re-queue of a job whose execution had closed (it ended): the job as it ended,
    # whose id, transitions, attempts and fail_history go on in this run, and who
    # re-queued it. None for a submitted job.
    resumed: Job | None = None
    resumed_by: str | None = None
    # Who submitted it (the API's caller: a token's name and id), on its first
    # transition. None in every input from before.
    submitted_by: str | None = None
    # A cancelled attempt is awaited until its work is gone (workflows/job_patches.py,
    # STOP_WAITS_FOR_WORK_PATCH); False in every input from before.
    stop_waits_for_work: bool = False
    # A granted attempt no worker takes within this (ms) gives its leases back and the
    # job waits again, no attempt counted (workflows/job_workflow.py, "dispatch
    # timeout"). None in every input from before: such a job keeps its leases.
    dispatch_timeout_ms: int | None = None
    # Started by a schedule (workflows/schedule_models.py): one input for every firing,
    # so the job's id is its workflow's (the schedule's id and the firing's time) and it
    # was created when its workflow started, not `id` and `created_at`. False in every
    # input from before.
    from_schedule: bool = False


def as_fired(inp: JobInput, workflow_id: str, started_at: int) -> JobInput:
    """A schedule's input (`from_schedule`) as one firing's: the job's id is its
    workflow's, and it was created when its workflow started (epoch ms)."""
    return inp.model_copy(update={"id": workflow_id, "created_at": started_at})


def pending_job(inp: JobInput) -> Job:
    """A just-submitted job: what the workflow starts from and the API answers with."""
    return Job(
        **inp.spec.model_dump(),
        id=inp.id,
        status=JobStatus.PENDING,
        created_at=inp.created_at,
        transitions=[
            Transition(
                seq=1, status=JobStatus.PENDING, ts=inp.created_at, attempt=0, by=inp.submitted_by
            )
        ],
    )


class AttemptInput(RunSpec):
    """What a worker needs to run one attempt of a job (the run_job activity's input)."""

    job_id: str
    attempt: int
    # Claim with the `claim_attempt` update before starting the solver (a grouped job:
    # a pause may recall an attempt no worker has claimed).
    claim_first: bool = False


_RUN_FIELDS = set(RunSpec.model_fields)
_IDENTITY_FIELDS = set(JobIdentity.model_fields)


# A solver still running after this long is reported `running` (by the native worker
# and the HTTP bridge alike); a faster one is recorded running when its result arrives
# (one signal and one workflow task fewer per short job).
RUNNING_REPORT_DELAY_S = 0.5


class AttemptReport(BaseModel):
    """Signal from a worker: it claimed the attempt, or its solver process started."""

    attempt: int
    worker_id: str
    phase: Literal["assigned", "running"]
    claimed_at: int
    started_at: int | None = None
    # The claimer's host id (WORKER_HOST; an agent that sends none: its worker id).
    host: str | None = None


class AttemptResult(BaseModel):
    """A successful attempt's outcome."""

    worker_id: str
    result: JsonValue
    result_hash: str
    log_tail: str | None = None
    result_key: str | None = None
    # Set when no report reached the workflow before the result (a short job).
    claimed_at: int | None = None
    started_at: int | None = None
    host: str | None = None


class WorkerInfo(BaseModel):
    """A worker's registration (`POST /api/workers/register`), native or HTTP agent."""

    model_config = ConfigDict(extra="forbid")

    worker_id: Annotated[str, Field(pattern=WORKER_ID_PATTERN)]
    name: Annotated[str | None, Field(max_length=200)] = None
    # Strict, as in JobSpec: a JSON `false` or `"4"` is a mistake. None: not reported
    # (a 003 agent reports neither), shown as such rather than as a made-up default.
    cores: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = None
    ram_gb: Annotated[float, Field(strict=True, ge=0, le=1_000_000)] | None = None
    tags: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=64)] = Field(
        default_factory=list
    )
    kind: Literal["agent", "native"] = "agent"
    # Container jobs (docs/workers.md): the runtime it runs them with, and the types it
    # takes them of (empty: every type it serves).
    container_runtime: Literal["docker", "podman"] | None = None
    container_types: Annotated[
        list[Annotated[str, Field(pattern=TYPE_PATTERN)]], Field(max_length=256)
    ] = Field(default_factory=list)
    # Its node name (WORKER_HOST): a job's require_host or preferred_host may name it,
    # or the worker id.
    host: Annotated[str | None, Field(pattern=HOST_PATTERN)] = None
    # The types it has a solver of its own for (WORKER_SOLVERS): it takes their jobs
    # that name no solver_url (docs/architecture.md, "Routing").
    solver_types: Annotated[
        list[Annotated[str, Field(pattern=TYPE_PATTERN)]], Field(max_length=256)
    ] = Field(default_factory=list)
    # The tenant whose jobs it runs (WORKER_TENANT; a tenant's token registers it for
    # its own tenant): only that tenant's callers, and admins, list it.
    tenant: Annotated[str | None, Field(pattern=TENANT_PATTERN)] = None


class WorkerRecord(BaseModel):
    """A registered worker as stored in its record workflow's memo."""

    info: WorkerInfo
    registered_at: int
    last_heartbeat: int | None = None


class ClaimedJob(Job):
    """What an HTTP claimer gets: the whole job (the spec's `Job`) as the claim left
    it, and the attempt it holds: `job_id`, `claim_first`, and the heartbeat timeout."""

    job_id: str
    status: JobStatus = JobStatus.ASSIGNED
    worker_id: str
    claimed_at: int
    heartbeat_timeout_ms: int = Field(description="Heartbeat at least three times per this")
    claim_first: bool = False

    @classmethod
    def of(cls, job: Job, inp: AttemptInput, *, heartbeat_timeout_ms: int) -> ClaimedJob:
        """The claim answer for `inp`'s attempt: `job` as its workflow answered the claim
        (assigned to the claimer), with the attempt's fields and the lease a read shows.
        Its fields are taken as they are, not validated again."""
        fields = dict(job)
        if job.heartbeat_at is not None:
            fields["lease_expires_at"] = job.heartbeat_at + heartbeat_timeout_ms
        # The attempt's own timeout, where the job's field is what its spec asked.
        fields.update(
            job_id=inp.job_id,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            claim_first=inp.claim_first,
        )
        return cls.model_construct(**fields)

    def attempt_input(self) -> AttemptInput:
        """The attempt this claim holds."""
        return AttemptInput(
            job_id=self.job_id,
            attempt=self.attempt,
            claim_first=self.claim_first,
            **self.model_dump(include=_RUN_FIELDS),
        )


class EventsMemo(JobIdentity):
    """What a job's memo holds for the event stream and the job table."""

    # A job's memo holds its submission at least; one without is not a job's.
    transitions: list[Transition] = Field(min_length=1)


def events_memo(job: Job) -> dict[str, JsonValue]:
    """The memo value for a job: its identity and its latest transitions."""
    # Built without validation: every value comes from a validated Job (this runs once
    # per workflow task on the job path).
    memo = EventsMemo.model_construct(
        **job.model_dump(include=_IDENTITY_FIELDS), transitions=job.transitions[-EVENTS_MEMO_KEEP:]
    )
    dumped: dict[str, JsonValue] = memo.model_dump(mode="json")
    if dumped.get("tenant") is None:
        # A job without a tenant keeps the memo it had before tenants.
        dumped.pop("tenant", None)
    return dumped


class JobSummary(JobIdentity):
    """A row of the jobs table, built from the job's memo (no query per job)."""

    id: str
    status: JobStatus
    attempts: int
    worker_id: str | None
    fail_reason: str | None
    updated_at: int
    # The latest transition's number: of two transitions in the same millisecond, the
    # one with the higher `seq` is the later (an event's `seq` says where it stands).
    seq: int = 0

    @classmethod
    def of(cls, job_id: str, memo: EventsMemo) -> JobSummary:
        """The table row for a job, from its latest transitions."""
        last = memo.transitions[-1]
        reason = next((t.reason for t in reversed(memo.transitions) if t.reason), None)
        return cls(
            **memo.model_dump(include=_IDENTITY_FIELDS),
            id=job_id,
            status=last.status,
            attempts=last.attempts,
            worker_id=last.worker_id,
            fail_reason=reason,
            updated_at=last.ts,
            seq=last.seq,
        )


# Temporal's matching keeps one backlog per priority key, up to its `maxPriorityLevels`
# (60; server 1.32 does not enforce it, but its draining and sticky-queue bookkeeping
# assume it). jobforge configures PRIORITY_LEVELS (`matching.priorityLevels`) on the dev
# server and in docker-compose, an odd number so that priority 0 sits on the middle key,
# the server's default.
PRIORITY_LEVELS_MAX = 60
PRIORITY_LEVELS = 59


def priority_range(levels: int) -> tuple[int, int]:
    """The priorities that `levels` Temporal keys serve one to one (lowest, highest):
    priority 0 on the server's default key, (levels + 1) // 2; -29..29 for 59 levels."""
    default = (levels + 1) // 2
    return default - levels, default - 1


def priority_key(priority: int, levels: int) -> int:
    """The Temporal priority key (1 = served first) of the spec's integer priority
    (higher first), for a task queue of `levels` keys (`matching.priorityLevels`).

    Each priority in `priority_range(levels)` has a key of its own; a priority above
    the range shares the first key with the range's highest, one below shares the last
    with its lowest (within a key, tasks are served in arrival order).
    """
    low, high = priority_range(levels)
    return (levels + 1) // 2 - min(max(priority, low), high)
