"""The job a design's route names is checked by one dependency per design: another
design's job is a 404, and the job's attempt is read live (one describe) only by the
routes whose answer shows its heartbeat or lease. In process, over a stand-in job
service that counts those reads; no Temporal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from api.contract_settings import ContractSettings
from api.contracts.containers_003_views import SimulationIn
from api.deps import Services
from api.main import create_app
from api.settings import ApiSettings
from api.tenancy import Scope
from workflows.errors import JobNotFound
from workflows.job_states import JobStatus
from workflows.models import Job, JobSpec

SIMULATION = "a" * 32
INTENT = "b" * 32
TARGET_JOB = "c" * 32
TENANT = {"X-Tenant": "acme"}


def running(job_id: str, spec: JobSpec) -> Job:
    return Job(
        **spec.model_dump(),
        id=job_id,
        status=JobStatus.RUNNING,
        created_at=1,
        worker_id="w1",
        attempt=1,
    )


class CountingJobs:
    """The job service's calls these routes make, on three running jobs (one per
    design), counting the live reads."""

    def __init__(self) -> None:
        self.jobs = {
            SIMULATION: running(
                SIMULATION, SimulationIn(image="i:1", config_path="c").spec(SIMULATION, None)
            ),
            INTENT: running(INTENT, JobSpec(type="addon.x", group="addon", pool="system")),
            TARGET_JOB: running(TARGET_JOB, JobSpec(type="t", target="acme/site-1", tenant="acme")),
        }
        self.live_reads = 0

    async def get(self, job_id: str, scope: Scope | None = None) -> Job:
        if job_id not in self.jobs or (
            scope is not None and not scope.reaches(self.jobs[job_id].tenant)
        ):
            raise JobNotFound(job_id)
        return self.jobs[job_id]

    async def live(self, job: Job) -> Job:
        self.live_reads += 1
        return job

    async def stop(self, job_id: str, *_: Any, **__: Any) -> Job:
        return self.jobs[job_id]

    async def ops_fail(self, job_id: str, *_: Any, **__: Any) -> Job:
        return self.jobs[job_id]

    async def ops_requeue(self, job_id: str, *_: Any, **__: Any) -> Job:
        return self.jobs[job_id]


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, CountingJobs]]:
    """The app with every design open (no token), its services stood in for."""
    opened = ContractSettings(
        CONTRACT_AUTH_001="none", CONTRACT_AUTH_003="none", CONTRACT_AUTH_004="none"
    )
    app = create_app(ApiSettings(FORGE_INGEST_SECRET="checks"), contract_settings=opened)
    jobs = CountingJobs()
    others = {name: None for name in Services.__dataclass_fields__ if name != "jobs"}
    app.state.services = cast(Services, SimpleNamespace(jobs=jobs, **others))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        yield http, jobs


@pytest.mark.parametrize(
    ("method", "path", "status", "live_reads"),
    [
        ("GET", f"/status/{SIMULATION}", 200, 1),
        ("GET", f"/progress/{SIMULATION}", 200, 1),
        ("POST", f"/stop/{SIMULATION}", 200, 0),
        ("POST", f"/ops/jobs/{SIMULATION}/fail", 200, 0),
        ("POST", f"/ops/jobs/{SIMULATION}/requeue?force=true", 200, 0),
        ("DELETE", f"/job/{SIMULATION}", 409, 0),  # running: stop it first
        ("GET", f"/api/system/scheduler/queue/jobs/{INTENT}", 200, 0),
        ("POST", f"/api/system/scheduler/queue/jobs/{INTENT}/cancel", 200, 0),
        ("GET", f"/targets/site-1/jobs/{TARGET_JOB}", 200, 1),
        ("POST", f"/targets/site-1/jobs/{TARGET_JOB}/cancel/", 200, 0),
    ],
)
async def test_a_route_reads_the_attempt_live_only_when_its_answer_shows_it(
    served: tuple[httpx.AsyncClient, CountingJobs],
    method: str,
    path: str,
    status: int,
    live_reads: int,
) -> None:
    http, jobs = served

    answer = await http.request(method, path, headers=TENANT if path.startswith("/targets") else {})

    assert answer.status_code == status, answer.text
    assert jobs.live_reads == live_reads


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        (f"/status/{INTENT}", {}),
        (f"/stop/{TARGET_JOB}", {}),
        (f"/api/system/scheduler/queue/jobs/{SIMULATION}", {}),
        (f"/targets/site-1/jobs/{SIMULATION}", TENANT),
        (f"/targets/site-2/jobs/{TARGET_JOB}", TENANT),
    ],
)
async def test_a_job_of_another_design_or_target_is_a_404(
    served: tuple[httpx.AsyncClient, CountingJobs], path: str, headers: dict[str, str]
) -> None:
    http, jobs = served
    method = "POST" if path.startswith("/stop") else "GET"

    answer = await http.request(method, path, headers=headers)

    assert answer.status_code == 404, answer.text
    assert jobs.live_reads == 0
