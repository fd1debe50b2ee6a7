"""A job runs only on a worker that can run it (docs/architecture.md, "Routing"): the
session's catch-all worker (WORKER_TYPES empty, a solver registered for
REGISTERED_TYPE only) takes every type's solver_url jobs, and never a job of a type it
has no solver for; such a job waits, uncounted, for a worker or agent of its type."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import Client

from engine.clock import now_ms
from engine.connection import TemporalSettings
from engine.directory import register_job_type
from tests.conftest import Api, Solver, wait_until
from tests.procs import Proc
from workflows import search_attributes
from workflows.models import (
    PRIORITY_LEVELS,
    JobInput,
    JobSpec,
    events_memo,
    pending_job,
    priority_key,
)
from workflows.names import EVENTS_MEMO, JOB_WORKFLOW

# How long a job is watched not to be taken. The session worker serves a new type as
# soon as the registry records it (it follows the registry's history) and takes a task
# within milliseconds of polling its queue, so a worker that polled the job's queue
# would have taken it many times over; a bounded negative check, made only once the
# worker has seen the type.
UNTOUCHED_S = 3.0


@pytest.fixture(autouse=True)
def _worker(session_worker: Proc) -> Proc:
    return session_worker


def served_by(worker: Proc, job_type: str) -> None:
    """Wait until the worker has learnt of the type (it logs a line for it, which says
    what it serves of it)."""
    logged = re.compile(rf"serving job type {re.escape(job_type)}(:|$)", re.MULTILINE)
    wait_until(
        lambda: logged.search(worker.output()),
        timeout=30,
        what=f"the worker to serve {job_type}",
    )


def stays_untouched(api: Api, job_id: str) -> dict[str, Any]:
    """The job, read every 0.1 s for UNTOUCHED_S: each read finds it pending, waiting for
    a worker, with no attempt counted and no failure recorded."""
    deadline = time.monotonic() + UNTOUCHED_S
    while True:
        job = api.job(job_id)
        seen = (job["status"], job["waiting_for"], job["attempts"], job["fail_history"])
        assert seen == ("pending", "no_worker", 0, []), job
        assert (job["worker_id"], job["claimed_at"]) == (None, None), job
        if time.monotonic() > deadline:
            return job
        time.sleep(0.1)


async def attempt_queues(client: Client, job_id: str) -> list[str]:
    """The task queue of each attempt the job's workflow scheduled, in order."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.task_queue.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]


def test_a_job_no_worker_has_a_solver_for_waits_uncounted_until_an_agent_of_its_type_runs_it(
    api: Api, session_worker: Proc, job_type: str
) -> None:
    job_id = api.submit(type=job_type, params={"x": 2})
    served_by(session_worker, job_type)

    stays_untouched(api, job_id)

    agent = {"worker_id": f"agent-{uuid.uuid4().hex[:6]}"}
    claim = api.http.post("/api/jobs/claim", json={**agent, "types": [job_type], "wait": 10})
    assert claim.status_code == 200, claim.text
    assert (claim.json()["id"], claim.json()["attempts"]) == (job_id, 1)
    result = api.http.post(f"/api/jobs/{job_id}/result", json={**agent, "result": {"y": 4}})
    assert result.status_code == 200, result.text
    job = api.wait_status(job_id, "completed")
    assert (job["worker_id"], job["attempts"], job["fail_history"]) == (
        agent["worker_id"],
        1,
        [],
    )
    assert job["result"] == {"y": 4}


@pytest.mark.parametrize("design", ["002", "001"])
def test_a_job_of_a_type_a_contract_adapter_claims_is_not_touched_by_the_catch_all_worker(
    api: Api, session_worker: Proc, design: str
) -> None:
    """002's runs and 001's intents (`<addon>.<job_type>`) carry no solver_url; the
    catch-all worker has no solver for their types. (The 001 type is made here, not in
    the parameter: every xdist worker must collect the same test ids.)"""
    job_type = "runforge.run" if design == "002" else f"addon{uuid.uuid4().hex[:6]}.render"
    job_id = api.submit(type=job_type, params={"run_id": "r1", "workspace": "/nowhere"})
    served_by(session_worker, job_type)

    stays_untouched(api, job_id)

    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204


async def test_a_solver_url_job_of_a_new_type_runs_on_the_catch_all_worker_from_its_url_queue(
    api: Api, client: Client, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    """Unpinned, on `jobforge-<type>#url`; pinned to the worker, on its host's `#url`
    queue."""
    solver = make_solver('print(json.dumps({"n": params["n"]}))\n')
    free = api.submit(**solver.spec(job_type, params={"n": 1}))
    pinned = api.submit(**solver.spec(job_type, params={"n": 2}, require_host="session-worker"))

    for job_id, n in ((free, 1), (pinned, 2)):
        job = api.wait_status(job_id, "completed", "quarantined")
        assert (job["status"], job["result"], job["worker_id"]) == (
            "completed",
            {"n": n},
            "session-worker",
        )
        assert (job["attempts"], job["fail_history"]) == (1, [])
    assert await attempt_queues(client, free) == [f"jobforge-{job_type}#url"]
    assert await attempt_queues(client, pinned) == [f"jobforge-{job_type}@session-worker#url"]


@pytest.fixture(scope="module")
def unserved(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues no worker polls (the session worker still runs its
    jobs' workflows, on the default workflow queue)."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"routing-{uuid.uuid4().hex[:8]}-")


def test_a_claim_with_solver_types_takes_the_solver_url_jobs_and_only_those_types_others(
    unserved: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    """What `jobforge agent` sends: `solver_types` are its WORKER_SOLVERS types."""
    plain = unserved.submit(type=job_type)
    with_url = unserved.submit(**make_solver("print('{}')\n").spec(job_type))
    body = {"worker_id": "agent-s", "types": [job_type], "solver_types": [], "wait": 10}

    def claim(**changes: Any) -> str | None:
        answer = unserved.http.post("/api/jobs/claim", json={**body, **changes})
        if answer.status_code == 204:
            return None
        assert answer.status_code == 200, answer.text
        job_id: str = answer.json()["id"]
        done = unserved.http.post(
            f"/api/jobs/{job_id}/result", json={"worker_id": "agent-s", "result": {}}
        )
        assert done.status_code == 200, done.text
        return job_id

    assert claim() == with_url
    assert claim(wait=1) is None  # it has no solver of its own for the type
    job = unserved.job(plain)
    assert (job["status"], job["attempts"], job["fail_history"]) == ("pending", 0, [])
    assert claim(solver_types=[job_type]) == plain


async def test_a_solver_url_job_queued_before_routing_is_rerouted_by_an_ops_fail_and_requeue(
    api: Api, client: Client, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    """docs/operations.md, "Upgrading to routing by capability": a job that names a
    solver_url, started as the API did before (on `jobforge-<type>`), waits there; the
    catch-all worker never polls that queue. An ops fail closes it, and the requeue
    starts it again on `#url`, where the worker runs it."""
    temporal = TemporalSettings()
    spec = JobSpec.model_validate(make_solver('print("{}")\n').spec(job_type))
    created = now_ms()
    inp = JobInput(
        id=uuid.uuid4().hex,
        spec=spec,
        created_at=created,
        priority_key=priority_key(spec.priority, PRIORITY_LEVELS),
        activity_task_queue=temporal.activity_queue(job_type),  # the queue it had then
        heartbeat_timeout_ms=60_000,
        stop_waits_for_work=True,
    )
    await client.start_workflow(
        JOB_WORKFLOW,
        inp,
        id=inp.id,
        task_queue=temporal.task_queue,
        search_attributes=search_attributes.at_submit(job_type, spec.priority, created),
        memo={EVENTS_MEMO: events_memo(pending_job(inp))},
    )
    await register_job_type(client, temporal, job_type)
    wait_until(lambda: api.job(inp.id)["attempt"] == 1, what="its attempt scheduled")

    failed = api.http.post(f"/api/ops/jobs/{inp.id}/fail", json={"reason": "rerouted"})
    assert failed.status_code == 200, failed.text
    # The quarantine closes the execution a moment later; until then a requeue is a 409.
    wait_until(
        lambda: api.http.post(f"/api/ops/jobs/{inp.id}/requeue").status_code == 200,
        what="the requeue of the closed job",
    )

    job = api.wait_status(inp.id, "completed", "quarantined")
    assert (job["status"], job["worker_id"], job["attempts"]) == ("completed", "session-worker", 1)
    assert [f["reason"] for f in job["fail_history"]] == ["rerouted"]
    assert await attempt_queues(client, inp.id) == [f"jobforge-{job_type}#url"]
