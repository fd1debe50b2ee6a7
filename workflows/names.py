"""Every name that crosses a layer: workflow types and ids, activity, signal, update,
query and memo names. The workflows define handlers under these names; the API, the
activities and the workers address them by the same constants.

Pure strings and string functions: the workflow sandbox, the API and the workers all
import this module.
"""

from __future__ import annotations

# -- JobWorkflow: one per job, workflow id = job id ----------------------------------
JOB_WORKFLOW = "JobWorkflow"
RUN_JOB_ACTIVITY = "run_job"
REPORT_SIGNAL = "attempt_report"
CANCEL_UPDATE = "cancel"
STOP_UPDATE = "stop"
# Operator overrides (POST /api/ops/jobs/{id}/...), audited as `by: "ops: <caller>"`
# (`OPS_BY` alone when the update names no caller, as every one before did).
OPS_FAIL_UPDATE = "ops_fail"
OPS_REQUEUE_UPDATE = "ops_requeue"
OPS_BY = "ops"
# A worker about to run a grouped job's attempt asks first (a pause may recall it).
CLAIM_UPDATE = "claim_attempt"
# The HTTP bridge's claim of any attempt: answered with the job as the claim left it.
CLAIM_JOB_UPDATE = "claim_job"
JOB_QUERY = "job"
EVENTS_MEMO = "events"
# On a schedule's jobs: the schedule that fired it and its cron as given (Temporal keeps
# a cron as calendar ranges only).
SCHEDULE_MEMO = "schedule"

# -- JobTypeRegistry: the durable set of job types -----------------------------------
TYPE_REGISTRY_WORKFLOW = "JobTypeRegistry"
ADD_TYPE_SIGNAL = "add_type"
TYPES_QUERY = "types"
TYPES_MEMO = "types"

# -- WorkerRecord: one per registered worker ------------------------------------------
WORKER_RECORD_WORKFLOW = "WorkerRecord"
REGISTER_SIGNAL = "register"
SEEN_SIGNAL = "seen"
RECORD_MEMO = "worker"

# -- TokenRegistry: the API tokens of a deployment (workflows/token_registry.py) ------
TOKEN_REGISTRY_WORKFLOW = "TokenRegistry"
CREATE_TOKEN_UPDATE = "create_token"
REVOKE_TOKEN_UPDATE = "revoke_token"
TOKENS_USED_SIGNAL = "tokens_used"
TOKENS_QUERY = "tokens"
TOKENS_MEMO = "tokens"


def token_registry_workflow_id(task_queue: str) -> str:
    """The token registry of the jobforge deployment on `task_queue` (it runs there)."""
    return f"jobforge-tokens-{task_queue}"


# The HTTP bridge polls attempts under this identity prefix (api/agent_bridge.py); the
# workflow tells a bridge-held attempt from a native worker's by it.
BRIDGE_IDENTITY_PREFIX = "jobforge-bridge@"


def registry_workflow_id(task_queue: str) -> str:
    """The registry of the jobforge deployment whose JobWorkflows run on `task_queue`
    (the registry runs there too, so it lives and dies with that deployment)."""
    return f"jobforge-job-types-{task_queue}"


REGISTRY_WORKFLOW_ID = registry_workflow_id("jobforge")


def worker_workflow_id(worker_id: str) -> str:
    """Workflow id of a worker's record."""
    return f"jobforge-worker-{worker_id}"


def attempt_activity_id(attempt: int) -> str:
    """Activity id of one attempt; a late report for another attempt is ignored."""
    return f"attempt-{attempt}"


# -- GateWorkflow: one per group, pool or target (workflows/gate_workflow.py) ---------
GATE_WORKFLOW = "GateWorkflow"
ENQUEUE_SIGNAL = "enqueue"
ACQUIRE_SIGNAL = "acquire"
RELEASE_SIGNAL = "release"
CONFIGURE_UPDATE = "configure"
PAUSE_UPDATE = "pause"
RESUME_UPDATE = "resume"
RESERVE_UPDATE = "reserve"
ADMIT_UPDATE = "admit"
# A gate held by one owner at a time (a workspace's single daemon), with a lease.
LOCK_UPDATE = "lock"
UNLOCK_UPDATE = "unlock"
GATE_QUERY = "gate"
# The jobs a gate holds a lease for or queues (ids).
GATE_JOBS_QUERY = "gate_jobs"
GATE_MEMO = "gate"
# A gate's latest operator changes (GateChange list), written only after one happens.
GATE_CHANGES_MEMO = "gate_changes"
# JobWorkflow's side of the lease protocol.
GRANT_SIGNAL = "gate_grant"
RECALL_SIGNAL = "gate_recall"
REQUEUE_UPDATE = "requeue"
PING_SIGNAL = "gate_ping"


def gate_workflow_id(task_queue: str, kind: str, key: str) -> str:
    """The gate of one group, pool or target of the deployment on `task_queue`."""
    prefix = "jobforge-gate" if task_queue == "jobforge" else f"jobforge-gate@{task_queue}"
    return f"{prefix}-{kind}-{key}"


# -- BulkWorkflow: one per bulk action (POST /api/jobs/bulk), id = operation id -------
BULK_WORKFLOW = "BulkWorkflow"
BULK_LIST_ACTIVITY = "bulk_list"
BULK_APPLY_ACTIVITY = "bulk_apply"
BULK_PROGRESS_QUERY = "progress"
# Its memo: the operation as it was started (its filter, action and tenant).
BULK_MEMO = "bulk"
# Its workflow ids, and the API's task queue suffix for its activities and workflow.
BULK_ID_PREFIX = "bulk-"
BULK_QUEUE_SUFFIX = "-bulk"
