"""The changes JobWorkflow shipped behind a marker, and the ones its input versions.

How a change ships is docs/architecture.md's "Versioning". Each id below is a
`workflow.patched` marker: histories from before it take the old branch, and a replay
test under tests/histories covers both. A marker costs a job one history event and the
SDK's `TemporalChangeVersion` upsert, so a change on every job's path is versioned by a
new field of `JobInput` instead (old inputs lack it), as `stop_waits_for_work` and
`dispatch_timeout_ms` are.
"""

from __future__ import annotations

# Jobs with a group, pool, target, start time or deadline take the scheduled path (gates,
# clocks); a job with none of them never reaches this marker.
SCHEDULING_PATCH = "scheduling-gates"
# Leases granted at submit (JobInput.granted): the job holds them from its first task and
# asks only the gates that queued it.
GRANTED_AT_SUBMIT_PATCH = "gates-granted-at-submit"
# A workflow cancel (the API's, after a stop) that reaches the job in the workflow task
# where its attempt ends, or while it gives its leases back: the attempt's own end
# stands, and the leases still go back.
CANCEL_MEETS_END_PATCH = "cancel-meets-attempt-end"
# A job cancelled or stopped through its update closes by itself if the API's workflow
# cancel request does not follow in time (JobInput.cancel_wait_ms).
CANCEL_WAIT_PATCH = "cancel-request-wait-bounded"
# Jobs with require_host or preferred_host wait a bounded time on their host's queue
# (then fail host_unavailable, or fall back to the shared queue); a job with neither
# never reaches this marker.
HOST_PINNING_PATCH = "host-pinning"
# A cancelled attempt ends when its work is gone (the worker killed the process group or
# removed the container, the agent reported it stopped, or its heartbeat timed out), not
# when the cancel is asked. A job started since says so in its input
# (`JobInput.stop_waits_for_work`); runs recorded while this was a patch (never
# released; tests/histories/*-v5) replay by its marker.
STOP_WAITS_FOR_WORK_PATCH = "stop-waits-for-the-work"
# A recall from a gate whose lease the job does not hold, and that it is not waiting
# for, is answered (a pause waited out its 30 s for it); only such a job records it.
RECALL_ANSWERED_PATCH = "recall-always-answered"
# A native worker that died holding an unreported attempt still took it.
NATIVE_DEATH_COUNTS_PATCH = "native-death-counts"
# An operator's re-queue of a pending job leaves its attempt be (before: cancelled and
# scheduled again): the second of two retries of an ended job, reaching the run the
# first started, makes no second re-queue. Only such a re-queue records it.
OPS_REQUEUE_PENDING_KEPT_PATCH = "ops-requeue-pending-kept"

JOB_PATCHES: tuple[str, ...] = (
    SCHEDULING_PATCH,
    GRANTED_AT_SUBMIT_PATCH,
    CANCEL_MEETS_END_PATCH,
    CANCEL_WAIT_PATCH,
    HOST_PINNING_PATCH,
    STOP_WAITS_FOR_WORK_PATCH,
    RECALL_ANSWERED_PATCH,
    NATIVE_DEATH_COUNTS_PATCH,
    OPS_REQUEUE_PENDING_KEPT_PATCH,
)
