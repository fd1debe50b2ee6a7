"""Search attributes jobforge keeps on every job workflow, and their Temporal types."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

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
