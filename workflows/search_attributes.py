"""Search attributes jobforge keeps on every job workflow, and their Temporal types."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from workflows.names import JOB_WORKFLOW

STATUS = SearchAttributeKey.for_keyword("JobforgeStatus")
TYPE = SearchAttributeKey.for_keyword("JobforgeType")
PRIORITY = SearchAttributeKey.for_int("JobforgePriority")
WORKER = SearchAttributeKey.for_keyword("JobforgeWorker")
UPDATED_AT = SearchAttributeKey.for_datetime("JobforgeUpdatedAt")

ALL = (STATUS, TYPE, PRIORITY, WORKER, UPDATED_AT)

# The names the `temporal` CLI and operator service take when registering them.
REGISTRATION: dict[str, str] = {
    STATUS.name: "Keyword",
    TYPE.name: "Keyword",
    PRIORITY.name: "Int",
    WORKER.name: "Keyword",
    UPDATED_AT.name: "Datetime",
}


# -- visibility queries over jobs (pure strings) ------------------------------------

JOBS = f"WorkflowType = '{JOB_WORKFLOW}'"


def job_filter(status: str | None = None, job_type: str | None = None) -> str:
    """A visibility query for jobs with this status and type (both optional)."""
    clauses = [JOBS]
    if status is not None:
        clauses.append(f"{STATUS.name} = '{status}'")
    if job_type is not None:
        clauses.append(f"{TYPE.name} = '{job_type}'")
    return " AND ".join(clauses)


def at_submit(job_type: str, priority: int, created_ms: int) -> TypedSearchAttributes:
    """A just-submitted job's search attributes (the workflow upserts them after)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(STATUS, "pending"),
            SearchAttributePair(TYPE, job_type),
            SearchAttributePair(PRIORITY, priority),
            SearchAttributePair(WORKER, ""),
            SearchAttributePair(UPDATED_AT, datetime.fromtimestamp(created_ms / 1000, UTC)),
        ]
    )
