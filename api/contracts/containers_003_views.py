"""003's shapes: the run-simulation body as a jobforge container job, and a job as the
design shows it (its status file, its job info, the payload its worker gets).

A simulation is a jobforge job of type `simulation` with a `container` spec, run once
(`max_attempts` 1: the design never retries), whose params carry `config_path` and
`job_name` and whose meta carries the container's name.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from workflows.contract_states import state_name
from workflows.errors import Failure, InvalidField
from workflows.job_states import ENDED, HELD, STOP_ASKED, JobStatus
from workflows.models import HOST_PATTERN, HOST_WAIT_MS_LIMIT, REQUIRE_HOST_WAIT_MS, Job, JobSpec

DESIGN = "003"
JOB_TYPE = "simulation"
# Where the design's containers see the shared storage root.
DATA_MOUNT = "/data"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
State = Literal[
    "queued", "dispatched", "running", "stop_requested", "finished", "failed", "canceled", "stopped"
]
EXIT_CODE = re.compile(r"exited with code (-?\d+)")


class VolumeIn(BaseModel):
    """A volume as the design writes it."""

    model_config = ConfigDict(extra="forbid")

    host: str
    container: str
    mode: Literal["rw", "ro"] = "rw"


class SimulationIn(BaseModel):
    """`POST /run-simulation`: the design's job payload, less what the server fills in."""

    model_config = ConfigDict(extra="forbid")

    image: Annotated[str, Field(min_length=1)]
    command: str | list[str] | None = Field(
        default=None,
        description="A shell-style string or an argv; `{job_id}` and `{config_path}` are "
        "filled in. Default: `--config /data/<config_path> --job_id <job_id>`",
    )
    container_name: Annotated[str | None, Field(pattern=NAME_PATTERN)] = None
    volumes: list[VolumeIn] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    config_path: Annotated[str, Field(min_length=1, max_length=1024)]
    job_name: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    preferred_host: Annotated[str | None, Field(pattern=HOST_PATTERN)] = None
    require_host: bool = Field(default=False, description="Only `preferred_host` may run it")
    require_host_wait_s: Annotated[
        float | None, Field(ge=0.1, le=HOST_WAIT_MS_LIMIT / 1000, allow_inf_nan=False)
    ] = Field(
        default=None,
        description="With require_host: how long the job waits for its host before it "
        f"ends canceled (host_unavailable). Default {REQUIRE_HOST_WAIT_MS // 1000} s (added)",
    )

    def spec(self, job_id: str, heartbeat_timeout_ms: int | None) -> JobSpec:
        """The jobforge job this simulation is; a 422 names the design's field."""
        path = PurePosixPath(self.config_path)
        if path.is_absolute() or ".." in path.parts:
            raise InvalidField("config_path", f"must be relative to {DATA_MOUNT}, without '..'")
        if self.require_host and self.preferred_host is None:
            raise InvalidField("require_host", "needs preferred_host, the host to require")
        if self.require_host_wait_s is not None and not self.require_host:
            raise InvalidField("require_host_wait_s", "needs require_host: true")
        body: dict[str, Any] = {
            "type": JOB_TYPE,
            "params": {"config_path": self.config_path, "job_name": self.job_name or path.stem},
            "max_attempts": 1,
            # dispatched -> queued when stale: a claim whose worker never reports running
            "requeue_stale_claims": True,
            # dispatched -> stop_requested: the worker may have started its container
            "stop_claimed": True,
            "container": {
                "image": self.image,
                "command": self._command(job_id),
                "env": self.env,
                "volumes": [
                    {"source": v.host, "target": v.container, "read_only": v.mode == "ro"}
                    for v in self.volumes
                ],
            },
            "meta": {"container_name": self.container_name or f"jobforge-{job_id}"},
        }
        if self.preferred_host is not None:
            body["require_host" if self.require_host else "preferred_host"] = self.preferred_host
        if self.require_host_wait_s is not None:
            body["require_host_wait_ms"] = round(self.require_host_wait_s * 1000)
        if heartbeat_timeout_ms is not None:
            body["heartbeat_timeout_ms"] = heartbeat_timeout_ms
        try:
            return JobSpec.model_validate(body)
        except ValidationError as err:
            first = err.errors()[0]
            raise InvalidField(design_field(first["loc"]), first["msg"]) from None

    def _command(self, job_id: str) -> list[str]:
        if self.command is None:
            return ["--config", f"{DATA_MOUNT}/{self.config_path}", "--job_id", job_id]
        if isinstance(self.command, str):
            try:
                argv = shlex.split(self.command)
            except ValueError as err:
                raise InvalidField("command", str(err)) from None
        else:
            argv = self.command
        return [
            arg.replace("{job_id}", job_id).replace("{config_path}", self.config_path)
            for arg in argv
        ]


def design_field(loc: tuple[int | str, ...] | str) -> str:
    """A jobforge field path (a pydantic loc, or `container.volumes[1].source`) in the
    design's words: `volumes[1].host`."""
    parts = (
        [str(p) for p in loc] if not isinstance(loc, str) else re.split(r"[.\[\]]+", loc.strip("]"))
    )
    if parts and parts[0] == "container":
        parts = parts[1:]
    if not parts:
        return "image"
    if parts[0] == "volumes" and len(parts) >= 2:
        tail = {"source": "host", "target": "container", "read_only": "mode"}
        rest = [tail.get(p, p) for p in parts[2:]]
        return ".".join([f"volumes[{parts[1]}]", *rest])
    if parts[0] == "require_host_wait_ms":
        return "require_host_wait_s"
    if parts[0] in ("require_host", "preferred_host"):
        return "preferred_host"
    return parts[0]


def renamed(err: InvalidField) -> InvalidField:
    """The same refusal, naming the design's field (the core names its own)."""
    field = str(err.extra.get("field", ""))
    message = str(err).removeprefix(f"{field}: ")
    return InvalidField(design_field(field), message)


def exit_code(job: Job) -> int | None:
    """0 for a finished job; a failed one's container exit code, if it had one."""
    if job.status == JobStatus.COMPLETED:
        return 0
    found = EXIT_CODE.search(job.fail_reason or "")
    return int(found.group(1)) if found and job.status != JobStatus.PENDING else None


def error(job: Job) -> str | None:
    """Why a job that ended otherwise than finished ended."""
    if job.status in ENDED and job.status != JobStatus.COMPLETED:
        return job.fail_reason
    return None


def failure(exit_code: int | None, message: str | None) -> str:
    """A worker's `failed` report as jobforge's fail reason."""
    if exit_code is None:
        return Failure(kind="agent_failure", message=message or "failed").reason
    text = f"container exited with code {exit_code}" + (f"; {message}" if message else "")
    return Failure(kind="solver_exit", message=text).reason


def updated_at(job: Job) -> float:
    """The latest status write, in epoch seconds: its last transition, or for a job a
    worker holds, its last status update (heartbeat) when later."""
    last = job.transitions[-1].ts if job.transitions else job.created_at
    if job.status in HELD and job.heartbeat_at:
        last = max(last, job.heartbeat_at)
    return last / 1000


class VolumeOut(BaseModel):
    host: str
    container: str
    mode: Literal["rw", "ro"]


class Status(BaseModel):
    """`jobs/<job_id>/status.json`, as `GET /status/{job_id}` answers it."""

    job_id: str
    status: str = Field(description="queued dispatched running stop_requested finished …")
    worker_id: str | None
    exit_code: int | None
    error: str | None
    stop_requested: bool = Field(description="A stop was asked (the job may have ended since)")
    status_updated_at: float = Field(description="Epoch seconds")

    @classmethod
    def of(cls, job: Job) -> Status:
        return cls(
            job_id=job.id,
            status=state_name(job, DESIGN),
            worker_id=job.worker_id,
            exit_code=exit_code(job),
            error=error(job),
            stop_requested=job.status in STOP_ASKED,
            status_updated_at=updated_at(job),
        )


class Payload(BaseModel):
    """The job payload `POST /api/agent/next-job` answers with."""

    job_id: str
    job_name: str
    config_path: str
    preferred_host: str | None
    require_host: bool
    image: str
    command: str = Field(description="The argv, shell-quoted")
    container_name: str
    volumes: list[VolumeOut]
    env: dict[str, str]

    @classmethod
    def fields_of(cls, job: Job) -> dict[str, Any]:
        spec = job.container
        assert spec is not None
        return {
            "job_id": job.id,
            "job_name": str(job.params.get("job_name") or ""),
            "config_path": str(job.params.get("config_path") or ""),
            "preferred_host": job.require_host or job.preferred_host,
            "require_host": job.require_host is not None,
            "image": spec.image,
            "command": shlex.join(spec.command),
            "container_name": str(job.meta.get("container_name") or f"jobforge-{job.id}"),
            "volumes": [
                VolumeOut(host=v.source, container=v.target, mode="ro" if v.read_only else "rw")
                for v in spec.volumes
            ],
            "env": spec.env,
        }

    @classmethod
    def of(cls, job: Job) -> Payload:
        return cls(**cls.fields_of(job))


class JobInfo(Payload):
    """`jobs/<job_id>/job_info.json` plus its status: `GET /job-info/{job_id}`, `/jobs`."""

    status: str
    target_host: str | None = Field(description="Where it runs or ran, else where it is pinned")
    worker_id: str | None
    exit_code: int | None
    error: str | None
    result: JsonValue = None
    submitted_at: float = Field(description="Epoch seconds")
    status_updated_at: float = Field(description="Epoch seconds")

    @classmethod
    def of(cls, job: Job) -> JobInfo:
        return cls(
            **Payload.fields_of(job),
            status=state_name(job, DESIGN),
            target_host=job.host or job.require_host or job.preferred_host,
            worker_id=job.worker_id,
            exit_code=exit_code(job),
            error=error(job),
            result=job.result,
            submitted_at=job.created_at / 1000,
            status_updated_at=updated_at(job),
        )


class QueueEntry(BaseModel):
    """`queue/<job_id>.json`: scheduling metadata only."""

    job_id: str
    preferred_host: str | None
    require_host: bool

    @classmethod
    def of(cls, job: Job) -> QueueEntry:
        return cls(
            job_id=job.id,
            preferred_host=job.require_host or job.preferred_host,
            require_host=job.require_host is not None,
        )
