"""Host telemetry a worker sends with its registry heartbeat, and the heartbeat's
shapes: the agent's request body and the WorkerRecord signal input.

Stdlib and pydantic only, like workflows/models.py (the sandbox, the API and the
workers import it). The telemetry signal's name and the unknown-worker error live here
with the models they belong to.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from workflows.errors import JobforgeError

# WorkerRecord's signal for a heartbeat with telemetry (REGISTER_SIGNAL and SEEN_SIGNAL
# are in workflows/names.py); it also counts as seen.
TELEMETRY_SIGNAL = "telemetry"

# A heartbeat's other keys (HostInfo.extra), kept small: the record's memo holds them.
EXTRA_KEYS_MAX = 32
EXTRA_BYTES_MAX = 4096

# Strict numbers, as in WorkerInfo: a JSON `"4"` or `true` is a mistake, not a count.
Bytes = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]
Load = Annotated[float, Field(strict=True, ge=0, le=1e9, allow_inf_nan=False)]


class HostInfo(BaseModel):
    """One sample of a worker's host. A field the host cannot tell (no /proc, say) is
    null; a worker that cannot read any still sends its version and running jobs."""

    model_config = ConfigDict(extra="forbid")

    cpu_percent: Annotated[float | None, Field(strict=True, ge=0, le=100)] = Field(
        default=None, description="CPU busy over the last interval, all cores, 0-100"
    )
    mem_used_bytes: Bytes | None = Field(default=None, description="Total minus available")
    mem_total_bytes: Bytes | None = None
    disk_free_bytes: Bytes | None = Field(
        default=None, description="Free to this user on the solver-cache (or working) dir"
    )
    load_avg: tuple[Load, Load, Load] | None = Field(
        default=None, description="1, 5 and 15 minute load averages"
    )
    running_jobs: Annotated[int, Field(strict=True, ge=0, le=1_000_000)] = 0
    version: Annotated[str | None, Field(max_length=64)] = Field(
        default=None, description="The jobforge version the worker runs"
    )
    # Left out of every dump while unset: the record's memo and /api/workers read as
    # before it existed.
    extra: dict[str, JsonValue] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Other keys, kept as sent: a 003 worker's own heartbeat info "
        f"(at most {EXTRA_KEYS_MAX} keys, {EXTRA_BYTES_MAX} bytes as JSON)",
    )

    @field_validator("extra")
    @classmethod
    def _small(cls, value: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        if value is None:
            return None
        if len(value) > EXTRA_KEYS_MAX:
            raise ValueError(f"at most {EXTRA_KEYS_MAX} keys")
        if any(not 1 <= len(key) <= 64 for key in value):
            raise ValueError("keys are 1 to 64 characters")
        if len(json.dumps(value, separators=(",", ":"))) > EXTRA_BYTES_MAX:
            raise ValueError(f"at most {EXTRA_BYTES_MAX} bytes as JSON")
        return value


class WorkerHeartbeat(BaseModel):
    """`POST /api/workers/{worker_id}/heartbeat`: an agent's registry heartbeat."""

    model_config = ConfigDict(extra="forbid")

    info: HostInfo


class TelemetryReport(BaseModel):
    """The telemetry signal's input: a heartbeat at `ts` (ms) with the host's sample."""

    ts: int
    info: HostInfo


class WorkerNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """A heartbeat from a worker with no running record: it must register (again)."""

    def __init__(self, worker_id: str) -> None:
        super().__init__(
            f"worker {worker_id} is not registered; POST /api/workers/register first",
            worker_id=worker_id,
        )
