"""Container jobs with real containers: a busybox image imported without a registry
(tests/container_image.py), run by real workers through the runtime's CLI (podman
here; docker takes the same options). Every test ends by asking the runtime, with
`ps -a`, that no container of its jobs is left."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Api, Stack, base_env, wait_until
from tests.container_image import INSTALL_HINT, Runtime, build_image, find_runtime, runtime_env
from tests.procs import Proc
from tests.test_stop import watch_stop
from worker.devserver import DevServer

pytestmark = pytest.mark.slow(120)


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    """The machine's container runtime, with the test image imported."""
    program = find_runtime()
    if program is None:
        pytest.skip(f"no container runtime (podman or docker) on PATH: {INSTALL_HINT}")
    workdir = tmp_path_factory.mktemp("containers")
    found = runtime_env(program, workdir)
    image = build_image(found, workdir)
    # Installed but unable to run a container is a failure, not a skip.
    probe = found.run("run", "--rm", image, "/bin/echo", "ok", check=False)
    assert (probe.returncode, probe.stdout.strip()) == (0, "ok"), probe.stderr
    return found


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one directory the API lets container jobs mount from (one for the module, so
    its tests share one stack: start_stack keeps stacks by their API env)."""
    return tmp_path_factory.mktemp("volumes")


@pytest.fixture
def volumes(allowed: Path) -> Path:
    """The test's own directory under `allowed`, the one its workers allow."""
    root = allowed / uuid.uuid4().hex[:8]
    root.mkdir()
    return root


@pytest.fixture
def stack(start_stack: Callable[..., Stack], allowed: Path) -> Stack:
    """An isolated API that allows volumes under `allowed` and images of the test's tag."""
    return start_stack(
        CONTAINER_VOLUME_PREFIXES=str(allowed),
        CONTAINER_IMAGE_ALLOW="localhost/jobforge-test:*",
    )


def container_worker(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str, node_id: str, **env: str
) -> Proc:
    """A native worker of `job_type` that runs container jobs (STOP_GRACE_S 1 s)."""
    settings = {"CONTAINER_VOLUME_PREFIXES": str(volumes), "STOP_GRACE_S": "1", **env}
    return stack.worker(job_type, node_id, **runtime.worker_env, **settings)


def container(script: str, **extra: Any) -> dict[str, Any]:
    """A container spec that runs a shell script in the test image."""
    return {"image": "localhost/jobforge-test:1", "command": ["/bin/sh", "-c", script], **extra}


def log_lines(api: Api, job_id: str, **query: Any) -> list[tuple[str, str]]:
    answer = api.http.get(f"/api/jobs/{job_id}/logs", params=query)
    assert answer.status_code == 200, answer.text
    return [(line["stream"], line["text"]) for line in answer.json()["lines"]]


def left_of(runtime: Runtime, job_id: str) -> list[str]:
    """The containers of a job that still exist, running or not."""
    return runtime.names(f"jobforge.job={job_id}")


def node() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


# The container's memory limit, on stderr (cgroup v2 or v1).
MEMORY = "(cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"


def test_a_container_jobs_stdout_is_its_result_with_its_env_params_volumes_and_logs(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    container_worker(stack, runtime, volumes, job_type, node())
    inbox, outbox = volumes / "in", volumes / "out"
    inbox.mkdir()
    outbox.mkdir()
    (inbox / "data.txt").write_text("from the host")
    script = (
        'echo "starting in $(pwd)" >&2;'
        f" {MEMORY} >&2;"
        " cat data.txt > /out/copy.txt;"
        " if (echo x > /in/written) 2>/dev/null; then echo in-is-writable >&2;"
        " else echo in-is-read-only >&2; fi;"
        ' printf \'{"greeting": "%s", "params": %s}\' "$GREETING" "$JOBFORGE_PARAMS"'
    )
    spec = container(
        script,
        env={"GREETING": "hello there"},
        volumes=[
            {"source": str(inbox), "target": "/in", "read_only": True},
            {"source": str(outbox), "target": "/out"},
        ],
        workdir="/in",
        memory_mb=64,
    )
    job_id = stack.api.submit(type=job_type, params={"n": 3, "s": "a b"}, container=spec)
    job = stack.api.wait_status(job_id, "completed", "quarantined")
    assert job["status"] == "completed", job
    assert job["result"] == {"greeting": "hello there", "params": {"n": 3, "s": "a b"}}
    assert job["container"]["image"] == "localhost/jobforge-test:1"
    assert (outbox / "copy.txt").read_text() == "from the host"
    assert not (inbox / "written").exists()
    stderr = [text for stream, text in log_lines(stack.api, job_id) if stream == "stderr"]
    assert stderr[0] == "starting in /in"
    assert str(64 * 1024 * 1024) in stderr  # the job's memory limit, as the container sees it
    assert "in-is-read-only" in stderr
    stdout = '{"greeting": "hello there", "params": {"n":3,"s":"a b"}}'
    assert ("stdout", stdout) in log_lines(stack.api, job_id)
    assert left_of(runtime, job_id) == []


def test_a_non_zero_exit_fails_the_attempt_with_its_code_and_the_workers_memory_default(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    container_worker(stack, runtime, volumes, job_type, node(), CONTAINER_MEMORY_MB="96")
    spec = container(f"{MEMORY} >&2; echo broken >&2; exit 3")
    job_id = stack.api.submit(type=job_type, max_attempts=2, container=spec)
    job = stack.api.wait_status(job_id, "quarantined", "completed")
    assert job["status"] == "quarantined"
    assert job["attempts"] == 2
    assert job["fail_reason"] == "solver_exit: container exited with code 3"
    assert [f["reason"] for f in job["fail_history"]] == [job["fail_reason"]] * 2
    assert "broken" in job["log_tail"]
    assert str(96 * 1024 * 1024) in job["log_tail"]
    for attempt in (1, 2):
        assert ("stderr", "broken") in log_lines(stack.api, job_id, attempt=attempt)
    assert left_of(runtime, job_id) == []


def test_a_volume_outside_the_allowed_prefixes_is_a_422_naming_the_field_and_nothing_is_made(
    stack: Stack, allowed: Path, volumes: Path, job_type: str
) -> None:
    api = stack.api
    inside = {"source": str(volumes), "target": "/data"}
    cases = [
        (
            {"volumes": [inside, {"source": "/etc", "target": "/etc"}]},
            "container.volumes[1].source",
        ),
        (
            {"volumes": [{"source": f"{allowed}-evil", "target": "/x"}]},
            "container.volumes[0].source",
        ),
        (
            {"volumes": [{"source": f"{volumes}/../../etc", "target": "/x"}]},
            "container.volumes[0].source",
        ),
        ({"volumes": [{"source": str(volumes), "target": "data"}]}, "container.volumes[0].target"),
        ({"image": "docker.io/library/alpine:3"}, "container.image"),
        ({"env": {"JOBFORGE_PARAMS": "{}"}}, "container.env.JOBFORGE_PARAMS"),
    ]
    for extra, field in cases:
        answer = api.http.post(
            "/api/jobs", json={"type": job_type, "container": container("true", **extra)}
        )
        assert answer.status_code == 422, (extra, answer.text)
        assert answer.json()["field"] == field
        assert answer.json()["error"].startswith(field)
    for body in (
        {"image": "--privileged"},
        {"image": "localhost/jobforge-test:1", "privileged": True},
        {"image": "localhost/jobforge-test:1", "env": {"BAD NAME": "x"}},
    ):
        answer = api.http.post("/api/jobs", json={"type": job_type, "container": body})
        assert answer.status_code == 422, (body, answer.text)
    both = {
        "type": job_type,
        "container": container("true"),
        "solver_url": "http://x/y",
        "solver_checksum": "0" * 64,
    }
    answer = api.http.post("/api/jobs", json=both)
    assert answer.status_code == 422 and "container" in answer.text
    listed = api.http.get("/api/jobs", params={"type": job_type})
    assert listed.status_code == 200 and listed.json() == []


def test_a_worker_refuses_a_volume_its_own_policy_does_not_allow(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    narrow = volumes / "narrow"
    narrow.mkdir()
    container_worker(
        stack, runtime, volumes, job_type, node(), CONTAINER_VOLUME_PREFIXES=str(narrow)
    )
    spec = container("true", volumes=[{"source": str(volumes), "target": "/data"}])
    job_id = stack.api.submit(type=job_type, container=spec)  # the API's policy allows it
    job = stack.api.wait_status(job_id, "quarantined", "completed")
    assert job["attempts"] == 1  # not retried
    assert job["fail_reason"].startswith("container_refused: container.volumes[0].source")
    assert left_of(runtime, job_id) == []


def test_stop_removes_the_container_before_the_job_reads_stopped(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    container_worker(stack, runtime, volumes, job_type, node())
    # sh as PID 1 ignores SIGTERM: the runtime kills it after STOP_GRACE_S.
    job_id = stack.api.submit(type=job_type, container=container("echo up; sleep 300"))
    stack.api.wait_status(job_id, "running")
    wait_until(lambda: left_of(runtime, job_id), timeout=30, what="the container")
    answer = stack.api.http.post(f"/api/jobs/{job_id}/stop")
    assert answer.status_code == 202, answer.text
    seen = watch_stop(
        lambda: stack.api.job(job_id)["status"],
        lambda: bool(left_of(runtime, job_id)),
        timeout=30,
    )
    assert ("stopped", True) not in seen, f"read stopped with its container listed: {seen}"
    assert seen[("stop_requested", True)] > 0, seen
    assert left_of(runtime, job_id) == []
    job = stack.api.job(job_id)
    assert job["fail_reason"] == "stopped"
    assert ("stdout", "up") in log_lines(stack.api, job_id)


def test_max_runtime_kills_the_container(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    container_worker(stack, runtime, volumes, job_type, node())
    job_id = stack.api.submit(
        type=job_type, max_runtime_ms=2000, container=container("echo up; sleep 300")
    )
    job = stack.api.wait_status(job_id, "quarantined", "completed", timeout=60)
    assert job["status"] == "quarantined"
    assert job["fail_reason"].startswith("max_runtime_exceeded")
    assert job["attempts"] == 1
    assert left_of(runtime, job_id) == []


ONCE = (
    "if [ -f /work/ran ]; then printf '\"second\"'; else touch /work/ran; echo first; sleep 300; fi"
)


# Runs until killed, and notes a SIGTERM in /work/termed (sh as the container's init
# ignores the signal unless it traps it).
TRAPS_TERM = "trap 'touch /work/termed' TERM; echo up; while :; do sleep 0.2; done"


def test_a_killed_workers_container_is_removed_when_the_worker_restarts(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    node_id = node()
    worker = container_worker(stack, runtime, volumes, job_type, node_id)
    spec = container(TRAPS_TERM, volumes=[{"source": str(volumes), "target": "/work"}])
    # A long heartbeat timeout: no second attempt comes before the restart's sweep.
    job_id = stack.api.submit(type=job_type, heartbeat_timeout_ms=120_000, container=spec)
    stack.api.wait_status(job_id, "running")
    wait_until(lambda: left_of(runtime, job_id), timeout=30, what="the container")
    worker.kill()
    # The runtime's client died with the worker; its container did not.
    leftover = left_of(runtime, job_id)
    assert leftover == [f"jobforge-{job_id}-1"]
    assert runtime.names(f"jobforge.worker={node_id}") == leftover
    container_worker(stack, runtime, volumes, job_type, node_id)
    wait_until(lambda: not left_of(runtime, job_id), timeout=15, what="the leftover removed")
    # Killed at once, not asked to stop: its attempt was over.
    assert not (volumes / "termed").exists()
    assert stack.api.job(job_id)["attempts"] == 1  # removed by the restart, not an attempt
    assert stack.api.http.post(f"/api/jobs/{job_id}/stop").status_code == 202
    # Its attempt is still held by the dead worker as far as Temporal knows: the job
    # reads stop_requested until that attempt's heartbeat timeout (120 s) ends it.
    assert stack.api.wait_status(job_id, "stop_requested")["attempts"] == 1
    assert left_of(runtime, job_id) == []


def test_a_killed_workers_container_is_removed_by_the_next_attempt(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    worker = container_worker(stack, runtime, volumes, job_type, node())
    spec = container(ONCE, volumes=[{"source": str(volumes), "target": "/work"}])
    job_id = stack.api.submit(type=job_type, heartbeat_timeout_ms=3000, container=spec)
    stack.api.wait_status(job_id, "running")
    wait_until(lambda: left_of(runtime, job_id), timeout=30, what="the container")
    worker.kill()
    assert left_of(runtime, job_id) == [f"jobforge-{job_id}-1"]
    # Another worker (another id: its start-up sweep leaves the leftover alone; the next
    # attempt, which it may take at once, removes it).
    other = node()
    second = container_worker(stack, runtime, volumes, job_type, other)
    job = stack.api.wait_status(job_id, "completed", "quarantined", timeout=60)
    assert job["status"] == "completed", job
    assert job["result"] == "second"
    assert job["attempts"] == 2
    assert job["fail_history"][0]["reason"].startswith("heartbeat_timeout")
    assert job["worker_id"] == other
    assert left_of(runtime, job_id) == []
    said = second.output()
    assert f"removing 1 leftover container(s) with jobforge.job={job_id}" in said, said
    assert "with jobforge.worker=" not in said, said


def test_only_container_workers_take_container_jobs_and_one_waits_for_an_executor(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    plain = node()
    # No CONTAINER_RUNTIME: it never polls the container queue.
    stack.worker(job_type, plain, WORKER_SOLVERS=json.dumps({job_type: "printf {}"}))
    job_id = stack.api.submit(type=job_type, container=container("printf 42"))
    plain_job = stack.api.submit(type=job_type)  # a plain job of the same type still runs
    done = stack.api.wait_status(plain_job, "completed", "quarantined")
    assert (done["status"], done["worker_id"]) == ("completed", plain)
    job = stack.api.job(job_id)
    assert (job["status"], job["waiting_for"]) == ("pending", "executor")
    # A container worker of another type that runs container jobs of this one.
    capable = node()
    container_worker(
        stack,
        runtime,
        volumes,
        "some-other-type",
        capable,
        WORKER_CONTAINER_TYPES=job_type,
        ready="serving container jobs of type",
    )
    job = stack.api.wait_status(job_id, "completed", "quarantined")
    assert (job["status"], job["result"], job["worker_id"]) == ("completed", 42, capable)
    workers = {w["worker_id"]: w for w in stack.api.http.get("/api/workers").json()}
    assert workers[capable]["container_runtime"] == runtime.program
    assert workers[capable]["container_types"] == [job_type]
    assert workers[plain]["container_runtime"] is None
    assert workers[plain]["solver_types"] == [job_type]


def test_an_agent_with_a_runtime_runs_container_jobs_and_uploads_their_logs(
    stack: Stack,
    runtime: Runtime,
    volumes: Path,
    job_type: str,
    spawn: Callable[..., Proc],
    temporal: DevServer,
    tmp_path: Path,
) -> None:
    agent = spawn(
        ["agent"],
        base_env(
            temporal,
            **runtime.worker_env,
            HUB_URL=stack.api.url,
            NODE_ID=node(),
            WORKER_TYPES=job_type,
            JOB_POLL_INTERVAL_MS="2000",
            SOLVER_CACHE_DIR=str(tmp_path / "agent-cache"),
        ),
    )
    stack.procs.append(agent)
    wait_until(lambda: "ready" in agent.output(), timeout=30, what="agent to start")
    spec = container('echo "to the log" >&2; printf \'{"ok": %s}\' "$JOBFORGE_PARAMS"')
    job_id = stack.api.submit(type=job_type, params={"x": 1}, container=spec)
    job = stack.api.wait_status(job_id, "completed", "quarantined")
    assert job["status"] == "completed", job
    assert job["result"] == {"ok": {"x": 1}}
    assert ("stderr", "to the log") in log_lines(stack.api, job_id)
    failing = stack.api.submit(type=job_type, max_attempts=1, container=container("exit 5"))
    job = stack.api.wait_status(failing, "quarantined", "completed")
    assert job["fail_reason"] == "solver_exit: container exited with code 5"
    assert left_of(runtime, job_id) == left_of(runtime, failing) == []


def test_a_container_job_pinned_to_a_host_runs_only_on_that_hosts_container_worker(
    stack: Stack, runtime: Runtime, volumes: Path, job_type: str
) -> None:
    idle = node()
    container_worker(stack, runtime, volumes, job_type, idle)  # capable, but not the host
    job_id = stack.api.submit(
        type=job_type, container=container("printf 7"), require_host="pinned-host"
    )
    wait_until(
        lambda: (
            (stack.api.job(job_id)["status"], stack.api.job(job_id)["waiting_for"])
            == ("pending", "host")
        ),
        timeout=30,
        what="the job waiting for its host",
    )
    pinned = node()
    container_worker(stack, runtime, volumes, job_type, pinned, WORKER_HOST="pinned-host")
    job = stack.api.wait_status(job_id, "completed", "quarantined")
    assert (job["status"], job["result"], job["worker_id"]) == ("completed", 7, pinned)
    assert job["host"] == "pinned-host"
    assert left_of(runtime, job_id) == []
