"""002, the run queue (`002_*`): what `runforge-cli` and its daemon share. A workspace is
a pool (capacity: the design's `max_parallel`), a run is a job of the workspace's own
type `runforge.run.<pool>` (its own task queue: only that workspace's daemon polls it),
a group is a jobforge group; the sweep plan format and the design's exit codes and
`[RF:…]` tokens (docs/contracts.md)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.contract_states import names, status_name
from workflows.job_states import OPEN, JobStatus
from workflows.models import GATE_KEY_PATTERN

# Runs enqueued before each workspace had its own type: every daemon polled their one
# queue. A daemon moves its workspace's queued ones to its own type (`legacy_body`).
LEGACY_RUN_TYPE = "runforge.run"
# A run goes once: a failed run is `failed` until retry-failed queues it again.
RUN_MAX_ATTEMPTS = 1
# Runs (training, sweeps) are long; the API's ceiling rather than its 5 min default.
RUN_MAX_RUNTIME_MS = 7 * 24 * 3600 * 1000
PLAN_MAX_RUNS = 1000
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
# The daemon health rule: running, and heard from within this long.
HEALTHY_WITHIN_S = 30.0
# The daemon's worker tags: what `queue-status` finds it and its state by.
DAEMON_TAG = "runforge"
POOL_TAG = "rf-pool:"
PID_TAG = "rf-pid:"
STATE_TAG = "rf-state:"
DaemonState = Literal["running", "stopping", "stopped"]

RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]
GroupId = Annotated[str, Field(pattern=GATE_KEY_PATTERN)]

# The design runforge speaks, and its state names in the order `queue-status` counts them.
DESIGN = "002"
STATE_ORDER = tuple(names(DESIGN))


class Exit(IntEnum):
    """The design's exit codes."""

    SUCCESS = 0
    FAILED = 1
    CANCELED = 5
    INVALID_PLAN = 6


class InvalidPlanError(Exception):
    """A sweep plan that cannot be read or does not validate; the message is its first
    error."""


class RunforgeSettings(BaseSettings):
    """The daemon's run command (env `RUNFORGE_RUN_COMMAND`): each run starts it with
    `--params '{"run_id": …, "workspace": …}'`; and how long its workspace's lock stays
    its own without a renewal (`RUNFORGE_LOCK_TTL_S`; renewed at half that)."""

    model_config = SettingsConfigDict(env_prefix="RUNFORGE_", extra="ignore")

    run_command: str = ""
    lock_ttl_s: float = Field(default=HEALTHY_WITHIN_S, ge=1.0, le=3600.0)


class PlanRun(BaseModel):
    """One run of a sweep plan."""

    model_config = ConfigDict(extra="forbid")

    run_id: RunId
    priority: Annotated[int, Field(strict=True, ge=-1_000_000, le=1_000_000)] = 0


class SweepPlan(BaseModel):
    """A sweep plan: one group of runs, for one workspace (or the one `--workspace`
    names)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    group_id: GroupId
    workspace: Annotated[str, Field(min_length=1)] | None = None
    runs: Annotated[list[PlanRun], Field(min_length=1, max_length=PLAN_MAX_RUNS)]

    @model_validator(mode="after")
    def _unique_runs(self) -> SweepPlan:
        seen: set[str] = set()
        for index, run in enumerate(self.runs):
            if run.run_id in seen:
                raise ValueError(f"runs.{index}.run_id: {run.run_id!r} appears twice")
            seen.add(run.run_id)
        return self


def first_error(err: ValidationError) -> str:
    """A validation error's first problem as `where: what`."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load_plan(path: Path) -> SweepPlan:
    """Read and validate a sweep plan; `InvalidPlanError` names its first error."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise InvalidPlanError(f"cannot read it: {err.strerror}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InvalidPlanError(f"not JSON: {err}") from None
    try:
        return SweepPlan.model_validate(data)
    except ValidationError as err:
        raise InvalidPlanError(first_error(err)) from None


def workspace_path(workspace: str) -> Path:
    """The workspace as an absolute path: `.` and its full path are one workspace."""
    return Path(workspace).expanduser().resolve()


def pool_name(workspace: Path) -> str:
    """The workspace's pool: `rf-<its name>-<hash of its path>`, a valid pool name
    short enough for a worker tag."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "-", workspace.name)[:24] or "ws"
    digest = hashlib.sha256(str(workspace).encode()).hexdigest()[:8]
    return f"rf-{slug}-{digest}"


def run_type(pool: str) -> str:
    """The job type of a workspace's runs: its queue, `jobforge-runforge.run.<pool>`, is
    polled by that workspace's daemon only (a valid type: at most 49 characters)."""
    return f"{LEGACY_RUN_TYPE}.{pool}"


def run_job(run_id: str, workspace: Path, group_id: str | None, priority: int) -> dict[str, Any]:
    """The `POST /api/jobs` body of one run."""
    pool = pool_name(workspace)
    body: dict[str, Any] = {
        "type": run_type(pool),
        "params": {"run_id": run_id, "workspace": str(workspace)},
        "priority": priority,
        "pool": pool,
        "cost_units": 1,
        "max_attempts": RUN_MAX_ATTEMPTS,
        "max_runtime_ms": RUN_MAX_RUNTIME_MS,
    }
    if group_id is not None:
        body["group"] = group_id
    return body


def legacy_body(job: dict[str, Any]) -> dict[str, Any] | None:
    """The body that enqueues a queued run of the shared legacy type again as its
    workspace's type, or None when the job is not such a run."""
    params = job.get("params") or {}
    workspace, run_id = params.get("workspace"), params.get("run_id")
    if job.get("type") != LEGACY_RUN_TYPE or not isinstance(workspace, str) or not run_id:
        return None
    return run_job(str(run_id), Path(workspace), job.get("group"), int(job.get("priority", 0)))


def state_of(job: dict[str, Any]) -> str:
    """A job's state in 002's words (the one table, workflows/contract_states.py)."""
    return status_name(JobStatus(job["status"]), DESIGN)


def run_id_of(job: dict[str, Any]) -> str:
    """The run a job runs."""
    params = job.get("params") or {}
    return str(params.get("run_id", "?"))


def iso(ms: int | None) -> str:
    """A time in ms as the design's ISO 8601 (UTC, seconds), or `-`."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def started_at(job: dict[str, Any]) -> int | None:
    """When the run's last attempt started: its claim (None while queued)."""
    claimed: int | None = job.get("claimed_at")
    return claimed if job.get("attempts") else None


def finished_at(job: dict[str, Any]) -> int | None:
    """When the run ended (None while open): its completion, else the time of the
    transition that ended it (a cancel, a failure)."""
    if JobStatus(job["status"]) in OPEN:
        return None
    ended: int | None = job.get("completed_at")
    transitions = job.get("transitions") or []
    return ended or (transitions[-1]["ts"] if transitions else None)


def error_of(job: dict[str, Any]) -> str | None:
    """Why a failed or canceled run ended: its fail reason, else its last failed
    attempt's (None for a run that did not fail)."""
    if state_of(job) not in ("failed", "canceled"):
        return None
    history = job.get("fail_history") or []
    reason = job.get("fail_reason") or (history[-1]["reason"] if history else None)
    return str(reason) if reason else None


def daemon_tags(pool: str, pid: int, state: DaemonState) -> list[str]:
    """The worker tags a daemon registers with."""
    return [DAEMON_TAG, f"{POOL_TAG}{pool}", f"{PID_TAG}{pid}", f"{STATE_TAG}{state}"]


def tag_value(tags: list[str], prefix: str) -> str | None:
    """The value of the first `prefix…` tag."""
    return next((tag.removeprefix(prefix) for tag in tags if tag.startswith(prefix)), None)


def token(kind: str, value: str, *fields: str) -> str:
    """One `[RF:KIND=VALUE field…]` token."""
    return "[RF:" + " ".join((f"{kind}={value}", *fields)) + "]"
