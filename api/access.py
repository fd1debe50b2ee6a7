"""Which roles may make which call: the one route table (docs/security.md shows it).

Every route behind the token is here, by method and path as the router declares it
(a design's own path, without the `CONTRACT_PREFIX_<NNN>` it may be mounted under).
A route missing from the table is the admin's only, and tests/test_access.py fails
until it is listed.

- admin: everything.
- producer: submit, read, cancel, stop and resume jobs; read groups, pools, targets;
  make, change and fire its schedules.
- worker: the agent protocol (register, claim, heartbeats, result, fail, log upload),
  each design's worker routes, and the calls of 002's `runforge-cli daemon`.
- reader: reads only (GET and the event stream).
"""

from __future__ import annotations

from workflows.token_models import Role

Access = frozenset[Role]

ADMIN: Access = frozenset({"admin"})
READ: Access = frozenset({"admin", "producer", "reader"})
WRITE: Access = frozenset({"admin", "producer"})
WORK: Access = frozenset({"admin", "worker"})
# Calls a worker makes besides the agent protocol, named where they are used.
READ_OR_WORK: Access = READ | WORK
WRITE_OR_WORK: Access = WRITE | WORK
ADMIN_OR_WORK: Access = ADMIN | WORK
ANY: Access = READ | WORK

# Routes that take no token at all (never behind the check; listed so the table is whole).
OPEN = frozenset({"GET /healthz", "GET /metrics", "GET /", "GET /favicon.ico"})

ROUTES: dict[str, Access] = {
    # -- 000: the API's own routes -------------------------------------------------------
    # Jobs. The 002 daemon reads its runs, and moves its workspace's legacy runs (a
    # submit under its own type, then a cancel of the old job).
    "POST /api/jobs": WRITE_OR_WORK,
    # Bulk submit: producers (the daemon moves its runs one at a time, above).
    "POST /api/jobs/batch": WRITE,
    # Bulk actions by filter: a producer cancels or stops its tenant's jobs (re-queue is
    # the admin's, as the single route: checked by action in api/bulk_service.py).
    "POST /api/jobs/bulk": WRITE,
    "POST /api/jobs/bulk/count": WRITE,
    "GET /api/jobs/bulk/{op_id}": WRITE,
    "GET /api/jobs": READ_OR_WORK,
    "GET /api/jobs/{job_id}": READ_OR_WORK,
    "DELETE /api/jobs/{job_id}": WRITE_OR_WORK,
    "POST /api/jobs/{job_id}/stop": WRITE,
    "GET /api/jobs/{job_id}/logs": READ,
    # The event stream (the daemon follows it) and its short-lived stream token.
    "GET /api/jobs/events": READ_OR_WORK,
    "POST /api/events/token": READ_OR_WORK,
    # The dashboard's reads.
    "GET /api/jobs/page": READ,
    "GET /api/jobs/counts": READ,
    "GET /api/config": READ,
    # Who changed which job and when (the transitions with `by` set).
    "GET /api/audit": READ,
    # The charts: every tenant's jobs over the last hour (as /metrics' event counters).
    "GET /api/stats/series": ADMIN,
    # Who the token is (its role and tenant, what the dashboard may show): any token.
    "GET /api/whoami": ANY,
    # The agent protocol.
    "POST /api/workers/register": WORK,
    "POST /api/workers/{worker_id}/heartbeat": WORK,
    "GET /api/workers": READ,
    "POST /api/jobs/claim": WORK,
    "POST /api/jobs/{job_id}/heartbeat": WORK,
    "POST /api/jobs/{job_id}/result": WORK,
    "POST /api/jobs/{job_id}/fail": WORK,
    "POST /api/jobs/{job_id}/logs": WORK,
    # Groups: read by producers, changed by the admin.
    "GET /api/groups": READ,
    "GET /api/groups/{group}": READ,
    "PATCH /api/groups/{group}": ADMIN,
    "POST /api/groups/{group}/pause": ADMIN,
    "POST /api/groups/{group}/resume": ADMIN,
    "POST /api/groups/{group}/retry-failed": ADMIN,
    "POST /api/groups/{group}/cancel": ADMIN,
    # Pools. The 002 daemon sets its workspace's capacity and holds its lock.
    "GET /api/pools": READ,
    "GET /api/pools/{pool}": READ,
    "PUT /api/pools/{pool}": ADMIN_OR_WORK,
    "POST /api/pools/{pool}/lock": ADMIN_OR_WORK,
    "DELETE /api/pools/{pool}/lock": ADMIN_OR_WORK,
    # Serial targets: resuming one re-queues (or skips) the job that halted it.
    "GET /api/targets": READ,
    "GET /api/targets/{target}": READ,
    "POST /api/targets/{target}/resume": WRITE,
    # Recurring jobs: a producer makes and changes its tenant's schedules.
    "POST /api/schedules": WRITE,
    "GET /api/schedules": READ,
    "GET /api/schedules/{schedule_id}": READ,
    "PATCH /api/schedules/{schedule_id}": WRITE,
    "DELETE /api/schedules/{schedule_id}": WRITE,
    "POST /api/schedules/{schedule_id}/pause": WRITE,
    "POST /api/schedules/{schedule_id}/resume": WRITE,
    "POST /api/schedules/{schedule_id}/trigger": WRITE,
    "POST /api/schedules/{schedule_id}/backfill": WRITE,
    # Operator overrides and tokens.
    "POST /api/ops/jobs/{job_id}/requeue": ADMIN,
    "POST /api/ops/jobs/{job_id}/fail": ADMIN,
    "POST /api/ops/jobs/{job_id}/cancel": ADMIN,
    "POST /api/ops/cleanup": ADMIN,
    "POST /api/tokens": ADMIN,
    "GET /api/tokens": ADMIN,
    "DELETE /api/tokens/{token_id}": ADMIN,
    # -- 001: admission queue -------------------------------------------------------------
    "POST /api/system/scheduler/queue/jobs/submit": WRITE,
    "GET /api/system/scheduler/queue/jobs/{job_id}": READ,
    "POST /api/system/scheduler/queue/jobs/{job_id}/cancel": WRITE,
    "GET /api/system/scheduler/queue/jobs": READ,
    # The addon's worker: what it may claim, the claim, its lease.
    "GET /api/system/scheduler/queue/dispatchable": READ_OR_WORK,
    "POST /api/system/scheduler/queue/jobs/claim": WORK,
    "POST /api/system/scheduler/queue/jobs/{job_id}/heartbeat": WORK,
    "POST /api/system/scheduler/queue/jobs/{job_id}/done": WORK,
    "POST /api/system/scheduler/queue/jobs/{job_id}/failed": WORK,
    # -- 002: a CLI over the API's routes above (its daemon's calls are marked there) -----
    # -- 003: container job system --------------------------------------------------------
    "POST /run-simulation": WRITE,
    "GET /status/{job_id}": READ,
    "GET /job-info/{job_id}": READ,
    "GET /jobs": READ,
    "GET /queue": READ,
    "GET /hosts": READ,
    "GET /file-logs/{job_id}": READ,
    "GET /logs/{job_id}": READ,
    "GET /progress/{job_id}": READ,
    "GET /result/{job_id}": READ,
    "POST /stop/{job_id}": WRITE,
    "DELETE /job/{job_id}": WRITE,
    "POST /api/agent/next-job": WORK,
    "POST /api/agent/job-status": WORK,
    "POST /api/agent/heartbeat": WORK,
    "POST /ops/jobs/{job_id}/requeue": ADMIN,
    "POST /ops/jobs/{job_id}/fail": ADMIN,
    "POST /ops/jobs/{job_id}/cancel": ADMIN,
    "POST /ops/queue/cleanup": ADMIN,
    # -- 004: tenant lease queue (its workers are the API's: the agent protocol above) ----
    "POST /targets/{target_id}/jobs": WRITE,
    "GET /targets/{target_id}/jobs": READ,
    "GET /targets/{target_id}/jobs/{job_id}": READ,
    "POST /targets/{target_id}/jobs/{job_id}/cancel": WRITE,
    "POST /targets/{target_id}/jobs/{job_id}/resume": WRITE,
}


def route_key(method: str, path: str) -> str:
    """The table's key of a call: HEAD reads as GET, a trailing slash is dropped."""
    verb = "GET" if method == "HEAD" else method
    return f"{verb} {path.rstrip('/') or '/'}"


def allowed(role: Role, method: str, path: str) -> bool:
    """Whether `role` may call `method` on the route declared as `path`."""
    return role in ROUTES.get(route_key(method, path), ADMIN)
