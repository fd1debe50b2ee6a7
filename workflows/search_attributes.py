"""Search attributes jobforge keeps on every job workflow, and their Temporal types."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from workflows.job_states import CANCELLED, JobStatus
from workflows.models import Job, events_memo
from workflows.names import EVENTS_MEMO, JOB_WORKFLOW

FAILED = JobStatus.FAILED.value

STATUS = SearchAttributeKey.for_keyword("JobforgeStatus")
TYPE = SearchAttributeKey.for_keyword("JobforgeType")
PRIORITY = SearchAttributeKey.for_int("JobforgePriority")
WORKER = SearchAttributeKey.for_keyword("JobforgeWorker")
UPDATED_AT = SearchAttributeKey.for_datetime("JobforgeUpdatedAt")
# Set at submit on a job that has them (docs/scheduling.md); never changed after.
GROUP = SearchAttributeKey.for_keyword("JobforgeGroup")
POOL = SearchAttributeKey.for_keyword("JobforgePool")
TARGET = SearchAttributeKey.for_keyword("JobforgeTarget")
# Whose job it is (docs/architecture.md, "Tenants"): set at submit, absent on a job
# without a tenant, never changed after.
TENANT = SearchAttributeKey.for_keyword("JobforgeTenant")

ALL = (STATUS, TYPE, PRIORITY, WORKER, UPDATED_AT, GROUP, POOL, TARGET, TENANT)

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
    TENANT.name: "Keyword",
}


# -- visibility queries over jobs (pure strings) ------------------------------------

JOBS = f"WorkflowType = '{JOB_WORKFLOW}'"
# A cancelled job reads `failed` (the spec) and its execution closes Canceled; no other
# `failed` job's does (a stopped one reads `stopped`), so this tells the two apart.
_FAILED_BY_CANCEL = f"{STATUS.name} = '{FAILED}' AND ExecutionStatus = 'Canceled'"
_FAILED_OTHERWISE = f"{STATUS.name} = '{FAILED}' AND ExecutionStatus != 'Canceled'"


def kinds_clause(kinds: Iterable[str]) -> str:
    """Jobs counted under one of `kinds` (workflows/job_states.py COUNT_KINDS): a
    status, or `cancelled`. `failed` alone leaves the cancelled jobs out; `failed` with
    `cancelled` is every failed job."""
    wanted = list(dict.fromkeys(kinds))
    every_failed = FAILED in wanted and CANCELLED in wanted
    plain = [kind for kind in wanted if kind != CANCELLED]
    if not every_failed and FAILED in plain:
        plain.remove(FAILED)
    parts = []
    if len(plain) == 1:
        parts.append(f"{STATUS.name} = '{plain[0]}'")
    elif plain:
        listed = ", ".join(f"'{one}'" for one in plain)
        parts.append(f"{STATUS.name} IN ({listed})")
    if not every_failed and FAILED in wanted:
        parts.append(_FAILED_OTHERWISE)
    if not every_failed and CANCELLED in wanted:
        parts.append(_FAILED_BY_CANCEL)
    if len(parts) == 1:
        return parts[0]
    return "(" + " OR ".join(f"({part})" for part in parts) + ")"


# `job_filter`'s tenant for jobs of any tenant or none ("*" is no tenant's name).
EVERY_TENANT = "*"


def tenant_clause(tenant: str | None) -> str:
    """Jobs of one tenant; None: jobs of no tenant (the attribute is never set on them)."""
    if tenant is None:
        return f"{TENANT.name} IS NULL"
    return f"{TENANT.name} = '{tenant}'"


def job_filter(
    status: str | None = None,
    job_type: str | None = None,
    *,
    statuses: Iterable[str] = (),
    group: str | None = None,
    pool: str | None = None,
    target: str | None = None,
    worker: str | None = None,
    id_prefix: str | None = None,
    tenant: str | None = EVERY_TENANT,
) -> str:
    """A visibility query for jobs counted under `status` (or one of `statuses`; see
    `kinds_clause`), of this type, group, pool, target and worker (the one holding, or
    that last held, the current attempt), whose id starts with `id_prefix` (each
    optional), of one tenant (None: of no tenant; EVERY_TENANT, the default: of any).
    Values are the validated names of workflows/models.py, which never hold a quote."""
    clauses = [JOBS]
    if tenant != EVERY_TENANT:
        clauses.append(tenant_clause(tenant))
    if status is not None:
        clauses.append(kinds_clause([status]))
    kinds = list(statuses)
    if kinds:
        clauses.append(kinds_clause(kinds))
    named = ((TYPE, job_type), (GROUP, group), (POOL, pool), (TARGET, target), (WORKER, worker))
    for key, value in named:
        if value is not None:
            clauses.append(f"{key.name} = '{value}'")
    if id_prefix is not None:
        # Served by visibility's WorkflowId index: a range read, never a scan.
        clauses.append(f"WorkflowId STARTS_WITH '{id_prefix}'")
    return " AND ".join(clauses)


def at_submit(
    job_type: str,
    priority: int,
    created_ms: int,
    *,
    group: str | None = None,
    pool: str | None = None,
    target: str | None = None,
    tenant: str | None = None,
) -> TypedSearchAttributes:
    """A just-submitted job's search attributes (the workflow upserts them after)."""
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(STATUS, "pending"),
        SearchAttributePair(TYPE, job_type),
        SearchAttributePair(PRIORITY, priority),
        SearchAttributePair(WORKER, ""),
        SearchAttributePair(UPDATED_AT, datetime.fromtimestamp(created_ms / 1000, UTC)),
    ]
    for key, value in ((GROUP, group), (POOL, pool), (TARGET, target), (TENANT, tenant)):
        if value is not None:
            pairs.append(SearchAttributePair(key, value))
    return TypedSearchAttributes(pairs)


def upsert_job(job: Job) -> None:
    """Mirror a job into its workflow's search attributes and memo (workflow code only:
    each call is two commands, so JobWorkflow makes at most one per workflow task)."""
    workflow.upsert_search_attributes(
        [
            STATUS.value_set(job.status.value),
            WORKER.value_set(job.worker_id or ""),
            UPDATED_AT.value_set(workflow.now()),
        ]
    )
    workflow.upsert_memo({EVENTS_MEMO: events_memo(job)})
