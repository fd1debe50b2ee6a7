"""Bulk submit (`POST /api/jobs/batch`): many job specs in one request, each answered
on its own (docs/api.md, "Batches").

Every item passes what `POST /api/jobs` applies to one body: the spec's validation, the
caller's tenant (`Scope.stamp`) and `JobService`'s checks at submit. A bad item is
answered with an error naming its field (`jobs[3].priority`) and makes nothing; the
others are submitted. An item's `id` is its idempotency key, the same as the
`Idempotency-Key` of `POST /api/jobs`: a retried batch makes no job twice.

Starts are concurrent, bounded for the whole replica (`API_BATCH_CONCURRENCY`). Items
that name a group, pool or target go one after another in the batch's order, so each
gate sees them in that order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError
from temporalio.service import RPCError

from api.errors import http_status, is_unavailable, no_workflow_worker, validation_problem
from api.job_service import JobService, job_id_for_key
from api.tenancy import Scope
from workflows.errors import JobConflict, JobforgeError, PoolFull
from workflows.job_states import JobStatus
from workflows.models import JobSpec

log = logging.getLogger("jobforge.api")

# The most items one batch takes (more: a 422 naming `jobs`).
BATCH_MAX = 1000
# An item's `id` (an idempotency key), as the `Idempotency-Key` header takes it.
ITEM_ID_MAX = 200


class BatchItemSpec(JobSpec):
    """One item of a batch, as documented: a job spec and its optional `id`. (The route
    reads items as plain JSON, so that a bad item fails alone; this is their schema.)"""

    id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=ITEM_ID_MAX,
            description="Idempotency key: the same id and body give the same job, once "
            "(as `Idempotency-Key` on POST /api/jobs)",
        ),
    ] = None


class BatchRequest(BaseModel):
    """`POST /api/jobs/batch`'s body."""

    jobs: Annotated[
        list[Any],
        Field(
            min_length=1,
            max_length=BATCH_MAX,
            description=f"1 … {BATCH_MAX} job specs, each as POST /api/jobs takes it, "
            "with an optional `id`",
            # Any JSON per item: each is judged alone against `BatchItemSpec` (listed in
            # the schema's components), and one that does not fit it is answered with
            # its error in place while the others are made; so the body as a whole
            # fits whatever its items are.
            json_schema_extra={
                "items": {
                    "description": "A job spec, as `BatchItemSpec`; an item that does not "
                    "fit it is answered with its error, in place"
                }
            },
        ),
    ]


class BatchItem(BaseModel):
    """One item's answer, at its `index` in the batch: the job (`id`, `status`,
    `created`), or why it was refused (`code`, `error`, `field`)."""

    index: int
    id: str | None = Field(default=None, description="The job's id")
    status: JobStatus | None = Field(default=None, description="The job's status")
    created: bool | None = Field(
        default=None,
        description="true: this item made the job; false: its `id` named one that was there",
    )
    duplicate_of: int | None = Field(
        default=None, description="The earlier item of this batch with the same `id`"
    )
    code: int | None = Field(
        default=None, description="The item's HTTP status, had it been sent alone (4xx, 5xx)"
    )
    error: str | None = None
    field: str | None = Field(default=None, description="The field it names: `jobs[3].priority`")
    retry_after_s: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the item names a job."""
        return self.code is None


class BatchAnswer(BaseModel):
    """Every item's answer, in the batch's order, and their totals."""

    created: int = Field(description="Items that made a job")
    existing: int = Field(description="Items whose `id` named a job that was there")
    failed: int = Field(description="Items refused (nothing made for them)")
    results: list[BatchItem]


@dataclass
class _Item:
    """An item that passed validation: its job spec, stamped, and its key."""

    index: int
    spec: JobSpec
    key: str | None


def _refused(index: int, code: int, message: str, field: str | None, **extra: Any) -> BatchItem:
    """An item's error, its field named as in the batch (`jobs[3].priority`); `field`
    None or "body": the item as a whole."""
    named = f"jobs[{index}]" if field in (None, "body") else f"jobs[{index}].{field}"
    if field is not None:
        message = message.removeprefix(f"{field}: ")
    return BatchItem(
        index=index,
        code=code,
        error=f"{named}: {message}",
        field=named if field is not None else None,
        **extra,
    )


def _domain_refusal(index: int, err: JobforgeError) -> BatchItem:
    field = err.extra.get("field")
    extra: dict[str, Any] = {}
    if isinstance(err, PoolFull):
        extra["retry_after_s"] = err.retry_after_s
    if isinstance(err, JobConflict):
        # A submission's only conflict: its key used before with another body. The
        # answer names the job that key made.
        extra["id"] = err.extra.get("id")
        return _refused(index, 409, "was already used with a different job body", "id", **extra)
    return _refused(index, http_status(err), err.message, field, **extra)


def _parse(index: int, raw: object, scope: Scope) -> _Item | BatchItem:
    """An item as `POST /api/jobs` would take it, or its error."""
    if not isinstance(raw, dict):
        return _refused(index, 422, "Input should be a JSON object (a job spec)", "body")
    body = dict(raw)
    key = body.pop("id", None)
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= ITEM_ID_MAX):
        return _refused(index, 422, f"should be a string of 1 … {ITEM_ID_MAX} characters", "id")
    try:
        spec = scope.stamp(JobSpec.model_validate(body))
    except ValidationError as err:
        field, message = validation_problem(err)
        return _refused(index, 422, message, field)
    except JobforgeError as err:
        return _domain_refusal(index, err)
    return _Item(index, spec, key)


class JobBatches:
    """Submits batches through the job service, at most `concurrency` starts at once for
    every batch of this replica together."""

    def __init__(self, jobs: JobService, concurrency: int) -> None:
        self._jobs = jobs
        self._starts = asyncio.Semaphore(concurrency)

    async def submit(self, raw_items: list[Any], scope: Scope, by: str | None) -> BatchAnswer:
        """Submit every valid item; answer each, in order."""
        results: list[BatchItem | None] = [None] * len(raw_items)
        firsts: dict[str, _Item] = {}  # a job id → the first item that names it
        later: list[tuple[_Item, _Item]] = []  # (an item, the earlier one of its id)
        plain: list[_Item] = []
        gated: list[_Item] = []
        for index, raw in enumerate(raw_items):
            parsed = _parse(index, raw, scope)
            if isinstance(parsed, BatchItem):
                results[index] = parsed
                continue
            if parsed.key is not None:
                job_id = job_id_for_key(parsed.key, parsed.spec.tenant)
                first = firsts.setdefault(job_id, parsed)
                if first is not parsed:
                    later.append((parsed, first))
                    continue
            spec = parsed.spec
            is_gated = spec.group is not None or spec.pool is not None or spec.target is not None
            (gated if is_gated else plain).append(parsed)

        async def one(item: _Item) -> None:
            results[item.index] = await self._submit(item, by)

        async def in_order(items: list[_Item]) -> None:
            for item in items:
                await one(item)

        work: list[Awaitable[None]] = [one(item) for item in plain]
        work.append(in_order(gated))
        await asyncio.gather(*work)
        for item, first in later:
            results[item.index] = _duplicate(item, first, results[first.index])
        done = [result for result in results if result is not None]
        assert len(done) == len(raw_items)
        return BatchAnswer(
            created=sum(1 for r in done if r.created),
            existing=sum(1 for r in done if r.ok and not r.created),
            failed=sum(1 for r in done if not r.ok),
            results=done,
        )

    async def _submit(self, item: _Item, by: str | None) -> BatchItem:
        index = item.index
        try:
            async with self._starts:
                submitted = await self._jobs.submit_one(item.spec, item.key, by, read_back=False)
        except JobforgeError as err:
            return _domain_refusal(index, err)
        except RPCError as err:
            if is_unavailable(err) or no_workflow_worker(err):
                return _refused(index, 503, f"Temporal is unavailable, try again: {err}", None)
            return _refused(index, 502, f"Temporal call failed: {err}", None)
        except Exception as err:
            # One item's failure is its own answer: the batch answers every item.
            if is_unavailable(err):
                return _refused(index, 503, f"Temporal is unavailable, try again: {err}", None)
            log.exception("batch item %d failed", index, exc_info=err)
            return _refused(index, 500, "internal error", None)
        job = submitted.job
        return BatchItem(index=index, id=job.id, status=job.status, created=submitted.made)


def _duplicate(item: _Item, first: _Item, answer: BatchItem | None) -> BatchItem:
    """A later item with an earlier item's `id`: that item's job if the bodies are the
    same (nothing made twice), else a conflict naming its `id`."""
    index = item.index
    if item.spec != first.spec:
        return _refused(
            index,
            409,
            f"the same id as jobs[{first.index}] with a different job body",
            "id",
            duplicate_of=first.index,
        )
    assert answer is not None
    if not answer.ok:
        return _refused(
            index,
            answer.code or 500,
            f"the same id as jobs[{first.index}], which was refused",
            "id",
            duplicate_of=first.index,
        )
    return BatchItem(
        index=index, id=answer.id, status=answer.status, created=False, duplicate_of=first.index
    )
