"""Task queue backlogs on /metrics: the autoscaling gauges, from DescribeTaskQueue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.api.taskqueue.v1 import TaskQueueStats as StatsProto
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, DescribeTaskQueueResponse
from temporalio.client import Client

from api.task_queue_stats import QueueKind, TaskQueueMetricsSettings, TaskQueueStats
from engine.connection import TemporalSettings
from tests.conftest import Solver, Stack
from tests.procs import wait_until

BACKLOG = "jobforge_task_queue_backlog"
AGE = "jobforge_task_queue_backlog_age_seconds"
UNREPORTED = "jobforge_task_queue_types_unreported"

Series = dict[tuple[str, str, str], float]


def scrape(http: httpx.Client) -> dict[str, Series]:
    """GET /metrics: each gauge's samples by (task_queue, kind, job_type)."""
    response = http.get("/metrics")
    assert response.status_code == 200, response.text
    gauges: dict[str, Series] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = tuple(sample.labels.get(k, "") for k in ("task_queue", "kind", "job_type"))
            gauges.setdefault(sample.name, {})[cast(tuple[str, str, str], key)] = sample.value
    return gauges


def activity_series(gauges: dict[str, Series], name: str) -> Series:
    """The activity queues' samples of one gauge."""
    return {k: v for k, v in gauges.get(name, {}).items() if k[1] == "activity"}


def test_a_pending_types_queues_show_their_backlogs_and_their_oldest_tasks_wait(
    start_stack: Callable[..., Stack], job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    """5 jobs of a type no worker serves, and 2 that name a solver_url: its plain
    activity queue's backlog reaches 5 and its `#url` queue's 2, each with a positive
    age, beside JobWorkflow's own queue (kind workflow)."""
    stack = start_stack()
    queue = f"{stack.queues['TEMPORAL_ACTIVITY_QUEUE_PREFIX']}{job_type}"
    solver = make_solver("print('{}')\n")
    ids = [stack.api.submit(type=job_type) for _ in range(5)]
    ids += [stack.api.submit(**solver.spec(job_type)) for _ in range(2)]
    key = (queue, "activity", job_type)
    url_key = (f"{queue}#url", "activity", job_type)

    def settled() -> dict[str, Series] | None:
        gauges = scrape(stack.api.http)
        backlogs = gauges.get(BACKLOG, {})
        ages = gauges.get(AGE, {})
        waiting = (backlogs.get(key), backlogs.get(url_key)) == (5, 2)
        aged = ages.get(key, 0) > 0 and ages.get(url_key, 0) > 0
        return gauges if waiting and aged else None

    gauges = wait_until(settled, timeout=60, interval=0.2, what=f"{queue}'s backlogs of 5 and 2")
    workflow_queue = (stack.queues["TEMPORAL_TASK_QUEUE"], "workflow", "")
    assert workflow_queue in gauges[BACKLOG], gauges[BACKLOG]
    assert workflow_queue in gauges[AGE], gauges[AGE]
    assert set(activity_series(gauges, BACKLOG)) == {key, url_key}
    assert gauges[UNREPORTED][("", "", "")] == 0
    for job_id in ids:
        assert stack.api.http.delete(f"/api/jobs/{job_id}").status_code == 204


def test_no_more_activity_queues_than_the_cap_are_described(
    start_stack: Callable[..., Stack], job_type: str
) -> None:
    """Three types and METRICS_TASK_QUEUE_TYPES_MAX=2: the first two in the registry's
    order have series (of their plain and their `#url` queue), the third none, and the
    gauge of unreported types says 1."""
    stack = start_stack(METRICS_TASK_QUEUE_TYPES_MAX="2")
    prefix = stack.queues["TEMPORAL_ACTIVITY_QUEUE_PREFIX"]
    types = [f"{job_type}-{suffix}" for suffix in "abc"]
    ids = [stack.api.submit(type=t) for t in types]

    def settled() -> dict[str, Series] | None:
        gauges = scrape(stack.api.http)
        unreported = gauges.get(UNREPORTED, {}).get(("", "", ""))
        backlogs = activity_series(gauges, BACKLOG)
        return gauges if unreported == 1 and sorted(backlogs.values()) == [0, 0, 1, 1] else None

    gauges = wait_until(settled, timeout=60, interval=0.2, what="two described types of three")
    expected = {(f"{prefix}{t}{route}", "activity", t) for t in types[:2] for route in ("", "#url")}
    assert set(activity_series(gauges, BACKLOG)) == expected
    assert set(activity_series(gauges, AGE)) == expected
    for job_id in ids:
        assert stack.api.http.delete(f"/api/jobs/{job_id}").status_code == 204


class CountingService:
    """A stand-in for the workflow service: counts DescribeTaskQueue calls in flight."""

    def __init__(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def describe_task_queue(self, request: DescribeTaskQueueRequest) -> Any:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)  # a round trip: the others start meanwhile
        self.in_flight -= 1
        stats = StatsProto(approximate_backlog_count=len(request.task_queue.name))
        return DescribeTaskQueueResponse(stats=stats)


async def test_concurrent_scrapes_cost_one_set_of_at_most_cap_plus_one_calls() -> None:
    """60 types over a cap of 50, scraped 20 times at once: 101 describes (the plain and
    the `#url` activity queue of 50 types, and JobWorkflow's), all in flight together,
    and 10 types unreported."""
    service = CountingService()
    client = cast(Client, SimpleNamespace(namespace="default", workflow_service=service))
    types = ",".join(f"type-{i:02d}" for i in range(60))
    stats = TaskQueueStats(
        client,
        TemporalSettings(task_queue="wf", activity_queue_prefix="act-"),
        TaskQueueMetricsSettings(METRICS_TASK_QUEUE_TYPES=types),
        cache_ms=60_000,
    )
    answers = await asyncio.gather(*(stats.backlogs() for _ in range(20)))
    assert service.calls == 101
    assert service.most_in_flight == 101
    first = answers[0]
    assert all(answer is first for answer in answers)
    assert first.unreported_types == 10
    assert [q.kind for q in first.queues].count(QueueKind.WORKFLOW) == 1
    assert [q.job_type for q in first.queues if q.kind is QueueKind.ACTIVITY] == [
        f"type-{i:02d}" for i in range(50) for _ in range(2)
    ]
    assert [q.task_queue for q in first.queues[1:3]] == ["act-type-00", "act-type-00#url"]
    assert first.queues[1].backlog == len("act-type-00")


async def test_a_failing_extra_refresh_leaves_the_rest_of_the_scrape_standing() -> None:
    from api.metrics_registry import Metrics

    class Views:  # the core gauges' reads, answered at once
        async def counts(self, _job_type: str | None) -> dict[str, int]:
            return {"pending": 3}

        async def oldest_pending_age_s(self) -> float:
            return 1.5

    async def broken() -> None:
        raise RuntimeError("invalid search attribute")

    metrics = Metrics()
    metrics.add_refresher(broken)
    text = (await metrics.render(Views())).decode()  # type: ignore[arg-type]
    assert 'jobforge_jobs{status="pending"} 3.0' in text
    assert "jobforge_oldest_pending_age_seconds 1.5" in text
