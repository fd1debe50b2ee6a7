"""A page of jobs reads each job as `GET /api/jobs/{id}` does (api/job_history_reads.py), and
reads a waiting or completed job without its workflow: a page of them answers with no
workflow worker up, and so does a page of jobs only their workflow can answer for, from
their memo."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from temporalio.client import Client

from engine.clock import now_ms
from tests.conftest import Api, Solver, Stack, wait_until
from workflows import names, search_attributes
from workflows.models import JobInput, JobSpec, pending_job

# What only a live read adds (the running attempt's details, the gate's sharpening).
LIVE = ("waiting_for", "progress", "lease_expires_at")


def stored(job: dict[str, Any]) -> dict[str, Any]:
    """A job without what only a live read adds."""
    return {key: value for key, value in job.items() if key not in LIVE}


def listed(api: Api, **params: Any) -> dict[str, dict[str, Any]]:
    answer = api.http.get("/api/jobs", params={"limit": 50, **params})
    assert answer.status_code == 200, answer.text
    return {job["id"]: stored(job) for job in answer.json()}


def test_a_page_reads_jobs_as_their_workflows_hold_them_and_waiting_or_done_ones_without_replay(
    start_stack: Callable[..., Stack],
    start_api: Callable[..., Api],
    job_type: str,
    make_solver: Callable[[str], Solver],
) -> None:
    stack = start_stack()
    api = stack.api
    solver = make_solver('print(json.dumps({"ok": True}))\n')
    stack.worker(job_type, "reads-worker")
    done = [api.submit(**solver.spec(job_type, params={"n": n})) for n in range(2)]
    for job_id in done:
        api.wait_status(job_id, "completed")
    idle = f"{job_type}-idle"  # no worker serves it
    waiting = [api.submit(type=idle, params={"n": n}, priority=n) for n in range(3)]
    cancelled = api.submit(type=idle)
    assert api.http.delete(f"/api/jobs/{cancelled}").status_code == 204
    api.wait_status(cancelled, "failed")
    for job_id in waiting:  # its first attempt scheduled
        wait_until(lambda job_id=job_id: api.job(job_id)["attempt"] == 1, what="attempt 1")
    claimed_type = f"{job_type}-claimed"
    claimed = api.submit(type=claimed_type)
    claim = {"worker_id": "reads-agent", "types": [claimed_type], "wait": 10}
    assert api.http.post("/api/jobs/claim", json=claim).status_code == 200
    api.wait_status(claimed, "assigned")
    truth = {job_id: stored(api.job(job_id)) for job_id in [*done, *waiting, cancelled, claimed]}

    # A job is listed once visibility shows it, a moment after it is made.
    def every_one_listed() -> dict[str, Any] | None:
        page = listed(api, type=job_type) | listed(api, type=idle) | listed(api, type=claimed_type)
        return page if page.keys() == truth.keys() else None

    page = wait_until(every_one_listed, timeout=30, what="every job listed")
    assert page == truth
    # A pinned job waits for its host: its workflow says so, and so does its row.
    pinned = api.submit(type=f"{job_type}-pinned", require_host="nowhere")
    wait_until(lambda: api.job(pinned)["waiting_for"] == "host", what="waiting for its host")
    rows = wait_until(
        lambda: api.http.get("/api/jobs", params={"type": f"{job_type}-pinned"}).json(),
        timeout=30,
        what="the pinned job listed",
    )
    assert [(row["id"], row["waiting_for"]) for row in rows] == [(pinned, "host")]

    # Without a workflow worker, a query finds nobody to replay the job; a fresh API
    # (nothing kept yet) still lists the waiting and the completed jobs.
    stack.procs[1].stop(timeout=15)
    fresh = start_api(**stack.queues)
    stack.procs.append(fresh.proc)
    page = listed(fresh, type=job_type) | listed(fresh, type=idle, status="pending")
    assert page == {job_id: truth[job_id] for job_id in [*done, *waiting]}
    # A claimed job, or a cancelled one, is its workflow's to answer for. With no worker
    # to answer within ANSWER_WAIT_S, its row is read from its memo: the page answers
    # (not a 503 after the query's 10 s), with the job's state as last recorded.
    recorded = listed(fresh, type=claimed_type) | listed(fresh, type=idle, status="cancelled")
    assert set(recorded) == {claimed, cancelled}
    assert recorded[cancelled] == truth[cancelled]
    # Its claim time is its transition's; its heartbeat and host are its workflow's.
    [assigned] = [t for t in truth[claimed]["transitions"] if t["status"] == "assigned"]
    assert recorded[claimed] == truth[claimed] | {
        "claimed_at": assigned["ts"],
        "heartbeat_at": None,
        "host": None,
    }


async def test_a_run_no_worker_ever_took_is_listed_from_its_input_and_status_attribute(
    start_api: Callable[..., Api], client: Client, job_type: str
) -> None:
    """A job's run whose first workflow task never ran (no worker ever polled its queue)
    has no memo yet: its row is its input, with the status its search attribute shows."""
    inp = JobInput(
        id=f"never-{uuid.uuid4().hex}",
        spec=JobSpec(type=job_type, params={"n": 1}),
        created_at=now_ms(),
        priority_key=3,
        activity_task_queue=f"nobody-{job_type}",
        heartbeat_timeout_ms=60_000,
    )
    await client.start_workflow(
        names.JOB_WORKFLOW,
        inp,
        id=inp.id,
        task_queue=f"nobody-{job_type}",
        search_attributes=search_attributes.at_submit(job_type, 0, inp.created_at),
    )
    api = start_api(TEMPORAL_TASK_QUEUE=f"nobody-{job_type}")
    rows = await asyncio.to_thread(listed, api, type=job_type)
    assert rows == {inp.id: stored(pending_job(inp).model_dump(mode="json"))}
