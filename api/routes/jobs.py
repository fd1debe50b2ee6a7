"""Job management routes of the spec (section 2): submit, list, read, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response, status
from pydantic import BaseModel

from api.auth import ByDep
from api.deps import Authorized, BatchesDep, GatesDep, JobsDep, MetricsDep, ScopeDep
from api.job_batch import BATCH_MAX, BatchAnswer, BatchRequest
from api.job_service import LIST_LIMIT_MAX
from api.routes.segments import segment_except
from workflows.job_states import CountKind, JobStatus
from workflows.models import (
    TARGET_PATTERN,
    TENANT_GATE_PATTERN,
    TYPE_PATTERN,
    WORKER_ID_PATTERN,
    Job,
    JobSpec,
    ListOrder,
)
from workflows.schedule_models import FIRED_JOB_ID_PATTERN

router = APIRouter(prefix="/api/jobs", tags=["jobs"], dependencies=[Authorized])

# A schedule's firing is named `<schedule id>-<time>` by Temporal, a ':' among its
# characters (workflows/schedule_models.py).
JobId = Annotated[str, Path(pattern=FIRED_JOB_ID_PATTERN, description="Job id")]
# A list's status filter: what the counts name (a status, or `cancelled`).
StatusFilter = Annotated[
    CountKind | None,
    Query(description="A status, or `cancelled`; `failed` leaves cancelled jobs out"),
]
# The list's other filters, each served by visibility's index (a search attribute, or
# the workflow id for a prefix).
PoolFilter = Annotated[str | None, Query(pattern=TENANT_GATE_PATTERN, description="Its pool")]
GroupFilter = Annotated[str | None, Query(pattern=TENANT_GATE_PATTERN, description="Its group")]
TargetFilter = Annotated[str | None, Query(pattern=TARGET_PATTERN, description="Its serial target")]
WorkerFilter = Annotated[
    str | None,
    Query(pattern=WORKER_ID_PATTERN, description="The worker of its current or last attempt"),
]
IdPrefixFilter = Annotated[
    str | None,
    Query(pattern=FIRED_JOB_ID_PATTERN, description="Its id starts with this"),
]

# Routes of their own under /api/jobs/. A job id path segment (`{job_id:job_id}`) never
# takes these names, so each such path is served by its own route for every method:
# `DELETE /api/jobs/counts` is a 405, and the `Allow` of `OPTIONS /api/jobs/counts` names
# only that route's methods.
RESERVED_JOB_PATHS = ("batch", "bulk", "claim", "counts", "events", "page")


segment_except("job_id", RESERVED_JOB_PATHS)


class Submitted(BaseModel):
    """Answer to a submission."""

    id: str
    status: JobStatus


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Submitted)
async def submit_job(
    spec: JobSpec,
    jobs: JobsDep,
    metrics: MetricsDep,
    scope: ScopeDep,
    by: ByDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=200,
            description="Same key and body → the same job, created once.",
        ),
    ] = None,
) -> Submitted:
    """Enqueue a job. Returns its id and status. A tenant's token stamps its tenant on
    the job (a different `tenant` in the body is a 403); an admin may name one."""
    job = await jobs.submit(scope.stamp(spec), idempotency_key, by)
    metrics.submissions.inc()
    return Submitted(id=job.id, status=job.status)


@router.post(
    "/batch",
    response_model=BatchAnswer,
    response_model_exclude_none=True,
    responses={
        200: {"description": "Every item's answer, in order: its job, or its own error"},
        422: {
            "description": f"`jobs` missing, empty or over {BATCH_MAX} items (named)",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        },
    },
)
async def submit_batch(
    body: BatchRequest, batches: BatchesDep, metrics: MetricsDep, scope: ScopeDep, by: ByDep
) -> BatchAnswer:
    """Enqueue up to 1,000 jobs at once (docs/api.md, "Batches"). 200 whatever
    each item's fate: an item is answered `{index, id, status, created}`, or `{index,
    code, error, field}` with the status and message `POST /api/jobs` would have given
    it (its field named `jobs[3].priority`); a refused item makes nothing, the others
    are made. An item's `id` is its idempotency key (`Idempotency-Key`): a retried batch
    makes nothing twice; a later item with an earlier one's `id` is answered with that
    item's job (`duplicate_of`), or a 409 if its body differs."""
    answer = await batches.submit(body.jobs, scope, by)
    metrics.submissions.inc(answer.created)
    return answer


@router.get(
    "",
    response_model=list[Job],
    responses={
        200: {
            "description": "A page of jobs; `Next-Page-Token` and `Link: rel=next` name the next",
            "headers": {
                "Next-Page-Token": {"schema": {"type": "string"}},
                "Link": {"schema": {"type": "string"}},
            },
        }
    },
)
async def list_jobs(
    request: Request,
    response: Response,
    jobs: JobsDep,
    scope: ScopeDep,
    status: StatusFilter = None,
    type: Annotated[str | None, Query(pattern=TYPE_PATTERN)] = None,
    pool: PoolFilter = None,
    group: GroupFilter = None,
    target: TargetFilter = None,
    worker: WorkerFilter = None,
    id_prefix: IdPrefixFilter = None,
    limit: Annotated[
        int, Query(ge=1, description=f"Page size; above {LIST_LIMIT_MAX} it is cut to it")
    ] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    order: ListOrder = ListOrder.RECENT,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> list[Job]:
    """A page of jobs, of one status if asked: `cancelled` is a job failed by a cancel
    (status `failed`, fail_reason `cancelled`), and `failed` leaves those out, as the
    counts do (`GET /api/jobs/counts`). `order=recent` (the default): open jobs newest
    first, then closed ones most recently closed first, visibility's own order.
    `order=priority`: priority descending, then oldest first (the claim order), found
    with counts. Either costs O(offset + limit) whatever the number of jobs. `pool`,
    `group` and `target` narrow the list to the jobs submitted with that name (search
    attributes set at submit, so no index beyond the listing's own is read); `worker`
    to the jobs whose current or last attempt that worker holds or held (a search
    attribute kept on every transition); `id_prefix` to the jobs whose id starts with
    it (visibility's `WorkflowId STARTS_WITH`, a range of its index). A tenant's caller
    lists only its tenant's jobs; an admin lists one tenant's with `X-Tenant`."""
    listed = await jobs.list_jobs(
        None,
        type,
        statuses=(status,) if status is not None else (),
        limit=min(limit, LIST_LIMIT_MAX),
        offset=offset,
        order=order,
        page_token=page_token,
        group=group,
        pool=pool,
        target=target,
        worker=worker,
        id_prefix=id_prefix,
        scope=scope,
    )
    if listed.next_page_token:
        following = request.url.remove_query_params("offset").include_query_params(
            page_token=listed.next_page_token
        )
        response.headers["Next-Page-Token"] = listed.next_page_token
        response.headers["Link"] = f'<{following}>; rel="next"'
    return listed.jobs


@router.get("/{job_id:job_id}", response_model=Job)
async def get_job(job_id: JobId, jobs: JobsDep, gates: GatesDep, scope: ScopeDep) -> Job:
    """One job with its attempts, fail_history and transitions; a pending one says what
    it waits for (`waiting_for`). Another tenant's job is a 404."""
    return await gates.explain(await jobs.live(await jobs.get(job_id, scope)))


@router.post(
    "/{job_id:job_id}/stop",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Job,
    responses={409: {"description": "The job has ended otherwise; body has its status"}},
)
async def stop_job(job_id: JobId, jobs: JobsDep, scope: ScopeDep, by: ByDep) -> Job:
    """Stop a job. Pending or assigned: cancelled (failed, fail_reason cancelled).
    Running: `stop_requested`, then `stopped` once its worker has been told (within a
    heartbeat interval; SIGTERM, then SIGKILL after STOP_GRACE_S). A repeated stop is a
    202 and changes nothing."""
    return await jobs.stop(job_id, scope, by)


@router.delete(
    "/{job_id:job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={409: {"description": "The job is past assigned; body has its status"}},
)
async def cancel_job(job_id: JobId, jobs: JobsDep, scope: ScopeDep, by: ByDep) -> Response:
    """Cancel a pending or assigned job (status failed, fail_reason cancelled)."""
    await jobs.cancel(job_id, scope, by)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
