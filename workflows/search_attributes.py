"""Search attributes jobforge keeps on every job workflow, and their Temporal types."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from workflows.names import JOB_WORKFLOW

STATUS = SearchAttributeKey.for_keyword("JobforgeStatus")
TYPE = SearchAttributeKey.for_keyword("JobforgeType")
PRIORITY = SearchAttributeKey.for_int("JobforgePriority")
WORKER = SearchAttributeKey.for_keyword("JobforgeWorker")
UPDATED_AT = SearchAttributeKey.for_datetime("JobforgeUpdatedAt")
# Set at submit on a job that has them (docs/scheduling.md); never changed after.
GROUP = SearchAttributeKey.for_keyword("JobforgeGroup")
POOL = SearchAttributeKey.for_keyword("JobforgePool")
TARGET = SearchAttributeKey.for_keyword("JobforgeTarget")

ALL = (STATUS, TYPE, PRIORITY, WORKER, UPDATED_AT, GROUP, POOL, TARGET)

# The names the `temporal` CLI and operator service take when registering them.
REGISTRATION: dict[str, str] = {
    STATUS.name: "Keyword",
    TYPE.name: "Keyword",
    PRIORITY.name: "Int",
    WORKER.name: "Keyword",
    UPDATED_AT.name: "Datetime",
    GROUP.name: "Keyword",
    POOL.name: "Keyword",
    TARGET.name: "Keyword",
}


# -- visibility queries over jobs (pure strings) ------------------------------------

JOBS = f"WorkflowType = '{JOB_WORKFLOW}'"


def job_filter(
    status: str | None = None,
    job_type: str | None = None,
    *,
    statuses: tuple[str, ...] = (),
    group: str | None = None,
    pool: str | None = None,
    target: str | None = None,
) -> str:
    """A visibility query for jobs with this status (or one of `statuses`), type,
    group, pool and target (each optional). Values are the validated names of
    workflows/models.py, which never hold a quote."""
    clauses = [JOBS]
    if status is not None:
        clauses.append(f"{STATUS.name} = '{status}'")
    if statuses:
        listed = ", ".join(f"'{one}'" for one in statuses)
        clauses.append(f"{STATUS.name} IN ({listed})")
    for key, value in ((TYPE, job_type), (GROUP, group), (POOL, pool), (TARGET, target)):
        if value is not None:
            clauses.append(f"{key.name} = '{value}'")
    return " AND ".join(clauses)


def at_submit(
    job_type: str,
    priority: int,
    created_ms: int,
    *,
    group: str | None = None,
    pool: str | None = None,
    target: str | None = None,
) -> TypedSearchAttributes:
    """A just-submitted job's search attributes (the workflow upserts them after)."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(STATUS, "pending"),
        SearchAttributePair(TYPE, job_type),
        SearchAttributePair(PRIORITY, priority),
        SearchAttributePair(WORKER, ""),
        SearchAttributePair(UPDATED_AT, datetime.fromtimestamp(created_ms / 1000, UTC)),
    ]
    for key, value in ((GROUP, group), (POOL, pool), (TARGET, target)):
        if value is not None:
            pairs.append(SearchAttributePair(key, value))
    return TypedSearchAttributes(pairs)
