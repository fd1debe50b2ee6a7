"""API settings, under the spec's environment variable names where it has them: the
same concept as worker/settings.py, for the other kind of process."""

from __future__ import annotations

import secrets
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.hosts import HostSettings
from workflows.container_models import split_list
from workflows.gate_models import GateSettings
from workflows.models import (
    COST_UNITS_LIMIT,
    DISPATCH_TIMEOUT_MS_LIMIT,
    DISPATCH_TIMEOUT_MS_MIN,
    PRIORITY_LEVELS,
    PRIORITY_LEVELS_MAX,
)

# The first split of the priority order's counts (api/visibility_queries.py): lower bounds of
# ranges where priorities cluster (>= 10, 1 … 9, 0, -9 … -1, below; 001's named
# priorities are 10, 5, 0 and -5). A listing heuristic, measured by bench.list_at_scale.
PRIORITY_LIST_SPLIT = (10, 1, 0, -9)


class ApiSettings(BaseSettings):
    """The API's knobs (the solver-URL policy it applies at submit is
    `engine.solver_urls.SolverUrlSettings`, the workers' own)."""

    model_config = SettingsConfigDict(extra="ignore")

    forge_ingest_secret: str = Field(default="", validation_alias="FORGE_INGEST_SECRET")
    max_body_bytes: int = Field(default=256 * 1024, validation_alias="API_MAX_BODY_BYTES")
    heartbeat_timeout_s: float = Field(
        default=60.0, gt=0, validation_alias="JOB_HEARTBEAT_TIMEOUT_S"
    )
    # A worker not heard from this long leaves the fleet (GET /api/workers): its record
    # is ended, and it registers again if it comes back. Ten times the default
    # JOB_HEARTBEAT_TIMEOUT_S, after which it already reads dead.
    worker_expire_s: float = Field(default=600.0, gt=0, validation_alias="WORKER_EXPIRE_S")
    # The task queues' `matching.priorityLevels`: each priority in priority_range(levels)
    # gets a Temporal priority key of its own (docs/api.md, "Priority").
    priority_levels: int = Field(
        default=PRIORITY_LEVELS,
        ge=1,
        le=PRIORITY_LEVELS_MAX,
        validation_alias="JOB_PRIORITY_LEVELS",
    )
    # Counts and the oldest pending age (dashboard chips, /metrics) are reused this long:
    # N scrapers within it cost one set of visibility calls. 0: no cache.
    metrics_cache_ms: int = Field(
        default=2000, ge=0, le=600_000, validation_alias="METRICS_CACHE_MS"
    )
    events_require_token: bool = Field(default=False, validation_alias="EVENTS_REQUIRE_TOKEN")
    # /metrics without a token shows every tenant's counts and task queues (the
    # operator's scrape); true: it needs a token, and a tenant's shows its own only.
    metrics_require_token: bool = Field(default=False, validation_alias="METRICS_REQUIRE_TOKEN")
    # While an SSE client is connected, the event feed looks at visibility at least every
    # EVENTS_POLL_MS, and sooner when a transition comes out of the settle window, but
    # never twice within EVENTS_POLL_GAP_MS (at most 1000 / EVENTS_POLL_GAP_MS listings a
    # second); with none, every EVENTS_IDLE_POLL_MS (its counters and charts need every
    # transition, not within the second).
    events_poll_ms: int = Field(default=100, ge=10, le=10_000, validation_alias="EVENTS_POLL_MS")
    events_idle_poll_ms: int = Field(
        default=1000, ge=10, le=60_000, validation_alias="EVENTS_IDLE_POLL_MS"
    )
    events_poll_gap_ms: int = Field(
        default=25, ge=5, le=10_000, validation_alias="EVENTS_POLL_GAP_MS"
    )
    events_settle_ms: int = Field(default=100, ge=0, le=60_000, validation_alias="EVENTS_SETTLE_MS")
    # `job:progress` on the event stream: while a client is connected, the heartbeat of
    # at most this many running jobs is read per PROGRESS_PUBLISH_MS (the workers' own
    # setting: their progress reaches Temporal at most that often); beyond it the running
    # jobs are read in turns (api/event_feed.py).
    progress_publish_ms: int = Field(
        default=1000, ge=100, le=60_000, validation_alias="PROGRESS_PUBLISH_MS"
    )
    events_progress_max_jobs: int = Field(
        default=100, ge=1, le=1000, validation_alias="EVENTS_PROGRESS_MAX_JOBS"
    )
    # API tokens (api/token_table.py): how often each replica reads the token table (a token
    # revoked anywhere is refused within 5 s whatever this is), and how often it sends
    # the registry its tokens' last uses.
    tokens_refresh_ms: int = Field(
        default=2000, ge=100, le=2000, validation_alias="TOKENS_REFRESH_MS"
    )
    tokens_use_flush_s: float = Field(
        default=30.0, ge=0.1, le=3600, validation_alias="TOKENS_USE_FLUSH_S"
    )
    # `POST /api/jobs/batch`: jobs this replica starts at once for all batches together
    # (each start waits for a place), so batches queue behind one another and a single
    # POST never waits behind a batch's thousand starts.
    batch_concurrency: int = Field(
        default=32, ge=1, le=1000, validation_alias="API_BATCH_CONCURRENCY"
    )
    temporal_retry_ms: int = Field(
        default=2000, ge=0, le=60_000, validation_alias="API_TEMPORAL_RETRY_MS"
    )
    # Scheduling (docs/scheduling.md).
    pool_default_capacity: int = Field(
        default=100, ge=0, le=COST_UNITS_LIMIT, validation_alias="POOL_DEFAULT_CAPACITY"
    )
    pool_deadline_urgency_s: float = Field(
        default=60.0, ge=0, validation_alias="POOL_DEADLINE_URGENCY_S"
    )
    # A quarantined job of a group or target stays re-queueable this long.
    requeue_hold_s: float = Field(
        default=7 * 24 * 3600.0, ge=0, le=365 * 24 * 3600.0, validation_alias="JOB_REQUEUE_HOLD_S"
    )
    gate_ping_s: float = Field(default=300.0, ge=1, validation_alias="GATE_PING_S")
    # A granted attempt no worker takes within this gives its leases back and its job
    # waits again (a job's `dispatch_timeout_ms` overrides it).
    dispatch_timeout_ms: int = Field(
        default=30_000,
        ge=DISPATCH_TIMEOUT_MS_MIN,
        le=DISPATCH_TIMEOUT_MS_LIMIT,
        validation_alias="JOB_DISPATCH_TIMEOUT_MS",
    )
    # A job cancelled or stopped through its update whose workflow cancel request never
    # follows (the API killed between the two calls) closes by itself after this long.
    job_cancel_wait_s: float = Field(
        default=300.0, ge=1, le=7 * 24 * 3600.0, validation_alias="JOB_CANCEL_WAIT_S"
    )
    # AVAILABLE_HOSTS: the hosts a job may be pinned to and a worker may serve as.
    hosts: HostSettings = Field(default_factory=HostSettings, exclude=True)

    # Container jobs (docs/workers.md, Containers): a volume's source must lie under one
    # of these prefixes (none: no volumes); with globs set, the image must match one.
    # The workers apply the same rules with their own settings of the same names.
    container_volume_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="CONTAINER_VOLUME_PREFIXES"
    )
    container_image_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="CONTAINER_IMAGE_ALLOW"
    )

    @field_validator("container_volume_prefixes", "container_image_allow", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return split_list(value)

    @model_validator(mode="after")
    def _expire_after_dead(self) -> ApiSettings:
        # A worker leaves the fleet only once it reads dead.
        if self.worker_expire_s < self.heartbeat_timeout_s:
            raise ValueError(
                f"WORKER_EXPIRE_S ({self.worker_expire_s:g}) is below "
                f"JOB_HEARTBEAT_TIMEOUT_S ({self.heartbeat_timeout_s:g})"
            )
        return self

    def gate_defaults(self) -> GateSettings:
        """The settings a new group, pool or target starts with."""
        return GateSettings(
            capacity=self.pool_default_capacity,
            deadline_urgency_s=self.pool_deadline_urgency_s,
            ping_after_s=self.gate_ping_s,
        )

    def with_secret(self) -> ApiSettings:
        """A copy that has a secret, generating one if none was set."""
        if self.forge_ingest_secret:
            return self
        return self.model_copy(update={"forge_ingest_secret": secrets.token_urlsafe(24)})
