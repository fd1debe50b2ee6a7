"""The backlog of each task queue jobforge uses, from Temporal's `DescribeTaskQueue`
with stats: what an autoscaler scales workers on (docs/operations.md, "Autoscaling").

The queues are JobWorkflow's (workflow tasks) and two activity queues per job type
(`TemporalSettings.activity_queue`): its plain queue and its `#url` queue (the jobs that
name a solver_url; docs/architecture.md, "Routing"). The cost is bounded whatever the
number of jobs or types: one describe of the type registry, then at most 2N + 1
`DescribeTaskQueue` calls made at once (N = `METRICS_TASK_QUEUE_TYPES_MAX`), the answer
cached `METRICS_CACHE_MS` (any number of scrapers within it cost one set of calls).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from api.ttl_cache import TtlCache
from engine.connection import Route, TemporalSettings
from engine.directory import known_job_types

log = logging.getLogger("jobforge.api.task_queues")

DEFAULT_TYPES_MAX = 50
# Each type's queues reported: the plain one (its registered solvers' and its own
# agents' jobs) and the solver_url jobs' (any worker of the type).
REPORTED_ROUTES = (Route.PLAIN, Route.URL)


class TaskQueueMetricsSettings(BaseSettings):
    """Which task queues `/metrics` describes (env `METRICS_TASK_QUEUE_*`)."""

    model_config = SettingsConfigDict(extra="ignore")

    # At most this many job types' activity queues (two each) per refresh (JobWorkflow's
    # queue is always described on top). Over it, the first ones in the registry's
    # (sorted) order.
    types_max: int = Field(
        default=DEFAULT_TYPES_MAX, ge=0, le=500, validation_alias="METRICS_TASK_QUEUE_TYPES_MAX"
    )
    # The job types to report, comma-separated, in place of every type ever submitted
    # (the type registry's list); still cut to `types_max`.
    types: str = Field(default="", validation_alias="METRICS_TASK_QUEUE_TYPES")

    def chosen(self) -> list[str]:
        """The types named in `METRICS_TASK_QUEUE_TYPES`, once each, in order."""
        named = (part.strip() for part in self.types.split(","))
        return list(dict.fromkeys(t for t in named if t))


class QueueKind(StrEnum):
    """What a queue holds: JobWorkflow's workflow tasks, or one type's attempts."""

    WORKFLOW = "workflow"
    ACTIVITY = "activity"


_TEMPORAL_TYPE = {
    QueueKind.WORKFLOW: TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    QueueKind.ACTIVITY: TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}


@dataclass(frozen=True)
class QueueBacklog:
    """One queue's backlog: its approximate task count and its oldest task's wait."""

    task_queue: str
    kind: QueueKind
    job_type: str  # "" for JobWorkflow's queue
    backlog: int
    age_s: float


@dataclass(frozen=True)
class Backlogs:
    """The queues described in one refresh, and how many types the cap left out."""

    queues: list[QueueBacklog]
    unreported_types: int


class TaskQueueStats:
    """Backlogs of JobWorkflow's queue and each job type's activity queues, cached."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        settings: TaskQueueMetricsSettings,
        cache_ms: int,
    ) -> None:
        self._client = client
        self._temporal = temporal
        self._settings = settings
        self._cache = TtlCache(cache_ms)

    async def backlogs(self) -> Backlogs:
        """Every reported queue's backlog (cached `METRICS_CACHE_MS`)."""
        return await self._cache.get("task-queues", self._backlogs)

    async def _backlogs(self) -> Backlogs:
        types = self._settings.chosen() or await known_job_types(
            self._client, self._temporal.task_queue
        )
        reported = types[: self._settings.types_max]
        targets = [(self._temporal.task_queue, QueueKind.WORKFLOW, "")] + [
            (self._temporal.activity_queue(t, route), QueueKind.ACTIVITY, t)
            for t in reported
            for route in REPORTED_ROUTES
        ]
        answers = await asyncio.gather(
            *(self._describe(*target) for target in targets), return_exceptions=True
        )
        queues: list[QueueBacklog] = []
        for (name, _, _), answer in zip(targets, answers, strict=True):
            if isinstance(answer, QueueBacklog):
                queues.append(answer)
            elif isinstance(answer, RPCError):
                # One queue's failure leaves the others' series; its own are dropped.
                log.warning("DescribeTaskQueue %s failed: %s", name, answer)
            else:
                raise answer
        return Backlogs(queues=queues, unreported_types=len(types) - len(reported))

    async def _describe(self, name: str, kind: QueueKind, job_type: str) -> QueueBacklog:
        request = DescribeTaskQueueRequest(
            namespace=self._client.namespace,
            task_queue=TaskQueue(name=name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=_TEMPORAL_TYPE[kind],
            report_stats=True,
        )
        # `stats` sums every priority key (and, with worker versioning, every version).
        stats = (await self._client.workflow_service.describe_task_queue(request)).stats
        age = stats.approximate_backlog_age
        return QueueBacklog(
            task_queue=name,
            kind=kind,
            job_type=job_type,
            backlog=stats.approximate_backlog_count,
            age_s=age.seconds + age.nanos / 1e9,
        )
