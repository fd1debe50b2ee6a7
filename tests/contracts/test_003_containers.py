"""003, the container job system (`003_*`), against its own routes, state names and
units: a simulation submitted with `POST /run-simulation` is taken by the design's own
worker (tests/contracts/worker_003.py, written from §"Worker Responsibilities"), run in
a real container, reported `running` then `finished` with its log, progress and result
on the shared storage; a stop is requested, seen by the worker, and ends `stopped`; a
job whose worker goes silent goes stale and fails; ops override with `force`."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SECRET, Api, wait_until
from tests.container_image import INSTALL_HINT, Runtime, build_image, find_runtime, runtime_env
from tests.contracts.worker_003 import DesignWorker

pytestmark = [pytest.mark.usefixtures("session_worker"), pytest.mark.slow(90)]

IMAGE = "localhost/jobforge-test:c003"
# Seconds without a status update before a simulation is stale (JOB_STATUS_TTL).
TTL_S = 4


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared storage root (VM_SHARED_DATA), with one config."""
    root = tmp_path_factory.mktemp("opt-shared")
    (root / "configs").mkdir()
    (root / "configs" / "demo.yaml").write_text("steps: 2\n")
    return root


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api], shared: Path) -> Api:
    """An API whose attempt queues only this module claims from."""
    return start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c003-{uuid.uuid4().hex[:8]}-",
        VM_SHARED_DATA=str(shared),
        CONTAINER_VOLUME_PREFIXES=str(shared),
        JOB_STATUS_TTL=str(TTL_S),
    )


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    """The machine's container runtime with the test image; the executor's housekeeping
    calls read its config from this process's environment."""
    program = find_runtime()
    if program is None:
        pytest.skip(f"no container runtime (podman or docker) on PATH: {INSTALL_HINT}")
    found = runtime_env(program, tmp_path_factory.mktemp("c003-runtime"))
    image = build_image(found, tmp_path_factory.mktemp("c003-image"), IMAGE)
    probe = found.run("run", "--rm", image, "/bin/echo", "ok", check=False)
    assert (probe.returncode, probe.stdout.strip()) == (0, "ok"), probe.stderr
    before = {key: os.environ.get(key) for key in found.env}
    os.environ.update(found.env)
    yield found
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json()


class Sims:
    """Simulations through 003's routes; the ones left open are stopped at the end."""

    def __init__(self, hub: Api, shared: Path) -> None:
        self.hub, self.shared = hub, shared
        self.made: list[str] = []

    def run(self, **body: Any) -> dict[str, Any]:
        payload = {
            "image": IMAGE,
            "command": ["/bin/true"],
            "config_path": "configs/demo.yaml",
            "volumes": [{"host": str(self.shared), "container": "/data", "mode": "rw"}],
            **body,
        }
        job: dict[str, Any] = ok(self.hub.http.post("/run-simulation", json=payload), 201)
        self.made.append(job["job_id"])
        return job

    def status(self, job_id: str) -> dict[str, Any]:
        got: dict[str, Any] = ok(self.hub.http.get(f"/status/{job_id}"))
        return got

    def wait(self, job_id: str, *states: str, timeout: float = 60) -> dict[str, Any]:
        found: dict[str, Any] = wait_until(
            lambda: seen if (seen := self.status(job_id))["status"] in states else None,
            timeout=timeout,
            what=f"{job_id} {states}",
        )
        return found

    def next_job(self, worker_id: str, within: float = 10) -> dict[str, Any] | None:
        """Ask as the design's worker does (again after a 204) until `within` is over."""
        deadline = time.monotonic() + within
        while True:
            answer = self.hub.http.post("/api/agent/next-job", json={"worker_id": worker_id})
            if answer.status_code != 204:
                got: dict[str, Any] = ok(answer)
                return got
            if time.monotonic() >= deadline:
                return None

    def report(self, job_id: str, worker_id: str, status: str, **extra: Any) -> httpx.Response:
        body = {"job_id": job_id, "worker_id": worker_id, "status": status, **extra}
        return self.hub.http.post("/api/agent/job-status", json=body)

    def close(self) -> None:
        for job_id in self.made:
            self.hub.http.post(f"/stop/{job_id}")


@pytest.fixture
def sims(hub: Api, shared: Path) -> Iterator[Sims]:
    made = Sims(hub, shared)
    yield made
    made.close()


@pytest.fixture
def worker(hub: Api, shared: Path, runtime: Runtime) -> Iterator[DesignWorker]:
    started = DesignWorker(hub.url, SECRET, f"sim-{uuid.uuid4().hex[:6]}", shared, runtime).start()
    yield started
    started.close()
    assert started.error is None, started.error


def test_a_simulation_runs_in_its_container_to_finished_with_its_log_progress_and_result(
    sims: Sims, worker: DesignWorker, hub: Api
) -> None:
    script = (
        "echo starting {job_id}; cat /data/{config_path};"
        " echo '{\"percent\": 50}' > /data/jobs/{job_id}/progress/progress.json;"
        " echo step-1 >&2;"
        " echo '{\"energy\": 42}' > /data/jobs/{job_id}/results/result.json; echo done"
    )
    job = sims.run(
        command=["/bin/sh", "-c", script],
        env={"MODE": "full"},
        job_name="Demo-Run1",
        container_name=f"c003-{uuid.uuid4().hex[:8]}",
    )
    job_id = job["job_id"]
    assert (job["status"], job["job_name"], job["require_host"]) == ("queued", "Demo-Run1", False)
    assert job["volumes"] == [{"host": str(sims.shared), "container": "/data", "mode": "rw"}]

    finished = sims.wait(job_id, "finished", "failed")
    assert finished["status"] == "finished", (finished, worker.reported(job_id))
    assert finished["exit_code"] == 0 and finished["worker_id"] == worker.worker_id
    assert abs(finished["status_updated_at"] - time.time()) < 60  # epoch seconds
    reports = worker.reported(job_id)
    assert reports[0] == ("running", 200) and reports[-1] == ("finished", 200)

    result = ok(hub.http.get(f"/result/{job_id}"))
    assert (result["status"], result["exit_code"], result["result"]) == (
        "finished",
        0,
        {"energy": 42},
    )
    assert ok(hub.http.get(f"/progress/{job_id}"))["progress"] == {"percent": 50}
    text = hub.http.get(f"/file-logs/{job_id}").text
    # stdout in order; the runtime interleaves stderr as it comes.
    lines = text.splitlines()
    assert [line for line in lines if line != "step-1"] == [
        f"starting {job_id}",
        "steps: 2",
        "done",
    ]
    assert "step-1" in lines
    with hub.http.stream("GET", f"/logs/{job_id}") as streamed:
        assert streamed.status_code == 200
        assert "".join(streamed.iter_text()) == text  # the job ended: the stream ends
    info = ok(hub.http.get(f"/job-info/{job_id}"))
    assert (info["status"], info["target_host"], info["env"]) == (
        "finished",
        worker.worker_id,
        {"MODE": "full"},
    )
    shown = wait_until(
        lambda: next(
            (h for h in ok(hub.http.get("/hosts")) if h["worker_id"] == worker.worker_id), None
        ),
        timeout=30,
        what="the worker in /hosts",
    )
    assert shown["online"] is True


def test_a_stop_is_requested_seen_by_the_worker_and_ends_stopped(
    sims: Sims, worker: DesignWorker, runtime: Runtime
) -> None:
    name = f"c003-{uuid.uuid4().hex[:8]}"
    job = sims.run(
        command="/bin/sh -c 'echo started; while true; do sleep 0.2; done'", container_name=name
    )
    job_id = job["job_id"]
    sims.wait(job_id, "running")
    wait_until(
        lambda: "started" in (sims.shared / "jobs" / job_id / "logs" / f"{job_id}.log").read_text(),
        timeout=60,
        what="the container to start",
    )
    asked = ok(sims.hub.http.post(f"/stop/{job_id}"))
    assert (asked["status"], asked["stop_requested"]) == ("stop_requested", True)
    wait_until(
        lambda: ("stopped", 200) in worker.reported(job_id), timeout=60, what="stopped reported"
    )
    assert worker.stops_seen == [job_id]
    ended = sims.status(job_id)
    assert (ended["status"], ended["stop_requested"]) == ("stopped", True)
    left = runtime.run("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}")
    assert left.stdout.split() == []
    # Running again after the stop is not a valid transition.
    assert sims.report(job_id, worker.worker_id, "running").status_code == 409


def test_a_job_whose_worker_stops_sending_updates_goes_stale_and_fails(sims: Sims) -> None:
    job_id = sims.run()["job_id"]
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    payload = sims.next_job(ghost)
    assert payload is not None and payload["job_id"] == job_id
    assert ok(sims.report(job_id, ghost, "running"))["status"] == "running"
    running = sims.wait(job_id, "running")
    assert running["worker_id"] == ghost
    # Silence: after JOB_STATUS_TTL the job is stale.
    failed = sims.wait(job_id, "failed", timeout=TTL_S + 40)
    assert failed["error"] == "heartbeat_timeout" and failed["exit_code"] is None
    late = sims.report(job_id, ghost, "running")
    assert late.status_code == 409


def test_a_dispatched_job_whose_worker_never_reports_running_goes_back_to_the_queue(
    sims: Sims, hub: Api
) -> None:
    job_id = sims.run()["job_id"]
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    assert (sims.next_job(ghost) or {}).get("job_id") == job_id
    assert sims.status(job_id)["status"] == "dispatched"

    def requeued() -> dict[str, Any] | None:
        job: dict[str, Any] = ok(hub.http.get(f"/api/jobs/{job_id}"))
        reasons = [t["reason"] for t in job["transitions"]]
        return job if "dispatch_timeout" in reasons else None

    job = wait_until(requeued, timeout=TTL_S + 40, what="the stale claim back in the queue")
    assert (job["attempts"], job["fail_history"], job["worker_id"]) == (0, [], None)
    assert sims.status(job_id)["status"] == "queued"
    assert sims.report(job_id, ghost, "running").status_code == 409
    # Queued again: the next worker takes it, and it counts one attempt.
    taker = f"w-{uuid.uuid4().hex[:6]}"
    assert (sims.next_job(taker) or {}).get("job_id") == job_id
    assert ok(sims.report(job_id, taker, "running"))["status"] == "running"
    assert ok(hub.http.get(f"/api/jobs/{job_id}"))["attempts"] == 1


def test_reports_follow_the_designs_transitions_and_the_same_status_is_accepted(
    sims: Sims, hub: Api
) -> None:
    job_id = sims.run()["job_id"]
    worker = f"w-{uuid.uuid4().hex[:6]}"
    assert sims.next_job(worker) is not None
    assert sims.status(job_id)["status"] == "dispatched"
    early = sims.report(job_id, worker, "finished")
    assert early.status_code == 409 and "dispatched -> finished" in early.text
    assert sims.report(job_id, worker, "queued").status_code == 409
    bogus = sims.report(job_id, worker, "launched")
    assert bogus.status_code == 422 and "status" in bogus.json()["error"]
    assert sims.report(job_id, "someone-else", "running").status_code == 409
    for _ in range(2):  # the same status again is accepted
        assert ok(sims.report(job_id, worker, "running"))["status"] == "running"
    assert sims.report(job_id, worker, "stopped").status_code == 409
    ok(sims.report(job_id, worker, "finished", exit_code=0, result={"x": 1}))
    ok(sims.report(job_id, worker, "finished", exit_code=0))
    assert sims.report(job_id, worker, "failed", exit_code=1).status_code == 409
    assert ok(hub.http.get(f"/result/{job_id}"))["result"] == {"x": 1}

    broken = sims.run()["job_id"]
    assert sims.next_job(worker) is not None
    ok(sims.report(broken, worker, "running"))
    ok(sims.report(broken, worker, "failed", exit_code=3, error="boom"))
    failed = sims.status(broken)
    assert (failed["status"], failed["exit_code"]) == ("failed", 3)
    assert "boom" in failed["error"]


def test_ops_override_the_designs_transitions_only_with_force(sims: Sims, hub: Api) -> None:
    queued = sims.run()["job_id"]
    refused = hub.http.post(f"/ops/jobs/{queued}/fail")
    assert refused.status_code == 409 and "force" in refused.text
    not_a_flag = hub.http.post(f"/ops/jobs/{queued}/fail", json={"force": 1})
    assert not_a_flag.status_code == 422 and "force" in not_a_flag.text
    forced = ok(hub.http.post(f"/ops/jobs/{queued}/fail", params={"force": "true"}))
    assert forced["status"] == "failed"

    job_id = sims.run()["job_id"]
    worker = f"w-{uuid.uuid4().hex[:6]}"
    assert sims.next_job(worker) is not None
    assert hub.http.post(f"/ops/jobs/{job_id}/cancel").status_code == 409
    ok(hub.http.post(f"/ops/jobs/{job_id}/requeue"))  # dispatched → queued
    sims.wait(job_id, "queued")
    again = sims.next_job(worker)
    assert again is not None and again["job_id"] == job_id
    ok(sims.report(job_id, worker, "running"))
    sims.wait(job_id, "running")
    assert hub.http.post(f"/ops/jobs/{job_id}/requeue").status_code == 409
    ok(hub.http.post(f"/ops/jobs/{job_id}/requeue", json={"force": True}))
    sims.wait(job_id, "queued")
    third = sims.next_job(worker)
    assert third is not None and third["job_id"] == job_id
    ok(sims.report(job_id, worker, "running"))
    sims.wait(job_id, "running")
    ok(hub.http.post(f"/ops/jobs/{job_id}/cancel", json={"force": True}))
    assert sims.wait(job_id, "stopped")["stop_requested"] is True
    assert ok(hub.http.post("/ops/queue/cleanup")) == {"removed": 0, "deleted": 0}


def test_run_simulation_maps_the_designs_body_and_names_its_fields_when_refused(
    sims: Sims, hub: Api, shared: Path
) -> None:
    host = f"gpu-{uuid.uuid4().hex[:6]}"
    job = sims.run(
        command="--config /data/{config_path} --job_id {job_id}",
        preferred_host=host,
        require_host=True,
        volumes=[{"host": str(shared / "configs"), "container": "/configs", "mode": "ro"}],
    )
    job_id = job["job_id"]
    assert job["command"] == f"--config /data/configs/demo.yaml --job_id {job_id}"
    assert (job["preferred_host"], job["require_host"], job["job_name"]) == (host, True, "demo")
    assert job["volumes"] == [
        {"host": str(shared / "configs"), "container": "/configs", "mode": "ro"}
    ]
    # The lists are read from visibility, which shows a job a moment after its start.
    entry = wait_until(
        lambda: next((e for e in ok(hub.http.get("/queue")) if e["job_id"] == job_id), None),
        timeout=15,
        what=f"{job_id} in /queue",
    )
    assert entry == {"job_id": job_id, "preferred_host": host, "require_host": True}
    assert job_id in [row["job_id"] for row in ok(hub.http.get("/jobs"))]
    assert sims.next_job(f"other-{uuid.uuid4().hex[:6]}", within=1) is None  # pinned elsewhere
    payload = sims.next_job(host)
    assert payload is not None and payload["job_id"] == job_id
    assert payload["config_path"] == "configs/demo.yaml" and payload["require_host"] is True
    assert hub.http.delete(f"/job/{job_id}").status_code == 409  # not ended
    assert ok(hub.http.post(f"/stop/{job_id}"))["status"] == "stop_requested"  # dispatched
    ok(sims.report(job_id, host, "stopped"))
    sims.wait(job_id, "stopped")
    assert ok(hub.http.delete(f"/job/{job_id}"))["artefacts_removed"] is True

    bad = {
        "volumes": [{"host": str(shared), "container": "/data", "mode": "rwx"}],
        "require_host": True,
        "config_path": "../etc/passwd",
        "image": "-bad",
        "surprise": 1,
    }
    names = {
        "volumes": "volumes",
        "require_host": "require_host",
        "config_path": "config_path",
        "image": "image",
        "surprise": "surprise",
    }
    base = {"image": IMAGE, "config_path": "configs/demo.yaml"}
    for key, value in bad.items():
        answer = hub.http.post("/run-simulation", json={**base, key: value})
        assert answer.status_code == 422, (key, answer.text)
        assert answer.json()["error"].startswith(names[key]), answer.text
    outside = hub.http.post(
        "/run-simulation",
        json={**base, "volumes": [{"host": "/etc", "container": "/etc2"}]},
    )
    assert outside.status_code == 422 and outside.json()["error"].startswith("volumes[0].host")
    assert hub.http.get(f"/status/{uuid.uuid4().hex}").status_code == 404
    assert httpx.get(f"{hub.url}/status/{job_id}").status_code == 401


def test_the_agent_heartbeat_keeps_its_known_telemetry_and_hosts_show_it(hub: Api) -> None:
    worker = f"hb-{uuid.uuid4().hex[:6]}"
    info = {"load": 0.5, "cpu_percent": 12.5, "gpu": {"util": 0.3}, "active_jobs": 1}
    beat = ok(hub.http.post("/api/agent/heartbeat", json={"worker_id": worker, "info": info}))
    assert beat == {"worker_id": worker, "kept": sorted(info)}
    # The snapshot is read from visibility: the new worker, then its telemetry, shows
    # within moments (its registration and its first beat are two updates).
    shown: dict[str, Any] = wait_until(
        lambda: next(
            (h for h in ok(hub.http.get("/hosts")) if h["worker_id"] == worker and h["info"]),
            None,
        ),
        timeout=30,
        what=f"{worker} in /hosts",
    )
    assert shown["online"] is True and shown["info"]["cpu_percent"] == 12.5
    # The design's own keys are kept as sent, next to jobforge's.
    assert {k: shown["info"][k] for k in ("load", "gpu", "active_jobs")} == {
        "load": 0.5,
        "gpu": {"util": 0.3},
        "active_jobs": 1,
    }
    assert abs(shown["last_heartbeat"] - time.time()) < 60
    wrong = hub.http.post(
        "/api/agent/heartbeat", json={"worker_id": worker, "info": {"cpu_percent": "high"}}
    )
    assert wrong.status_code == 422 and wrong.json()["error"].startswith("info.cpu_percent")
    huge = hub.http.post(
        "/api/agent/heartbeat", json={"worker_id": worker, "info": {"blob": "x" * 5000}}
    )
    assert huge.status_code == 422 and huge.json()["error"].startswith("info"), huge.text


def test_a_stop_of_a_dispatched_job_is_seen_by_its_worker_which_ends_it_stopped(
    sims: Sims, hub: Api
) -> None:
    # The worker took the job and may have started its container; it has not reported
    # running yet. The stop is not a cancel: the worker must hear of it.
    job_id = sims.run()["job_id"]
    taker = f"w-{uuid.uuid4().hex[:6]}"
    assert (sims.next_job(taker) or {}).get("job_id") == job_id
    assert sims.status(job_id)["status"] == "dispatched"
    asked = ok(hub.http.post(f"/stop/{job_id}"))
    assert (asked["status"], asked["stop_requested"]) == ("stop_requested", True)
    # Its running update is refused from the stop on; its status says why.
    assert sims.report(job_id, taker, "running").status_code == 409
    seen = sims.status(job_id)
    assert (seen["status"], seen["stop_requested"], seen["worker_id"]) == (
        "stop_requested",
        True,
        taker,
    )
    assert ok(sims.report(job_id, taker, "stopped"))["status"] == "stopped"
    ended = sims.wait(job_id, "stopped")
    assert ended["stop_requested"] is True
    job = ok(hub.http.get(f"/api/jobs/{job_id}"))
    assert [t["status"] for t in job["transitions"]][-3:] == [
        "assigned",
        "stop_requested",
        "stopped",
    ]


def test_a_dispatched_job_stopped_before_its_worker_reports_has_its_container_killed(
    sims: Sims, hub: Api, shared: Path, runtime: Runtime
) -> None:
    # The design's own worker, slowed down between starting its container and its first
    # running report: the stop lands while the job is dispatched.
    name = f"c003-{uuid.uuid4().hex[:8]}"
    job_id = sims.run(
        command="/bin/sh -c 'echo started; while true; do sleep 0.2; done'", container_name=name
    )["job_id"]
    gate = threading.Event()
    slow = DesignWorker(
        hub.url, SECRET, f"slow-{uuid.uuid4().hex[:6]}", shared, runtime, first_report_gate=gate
    )
    slow.start()
    try:
        wait_until(
            lambda: name in runtime.run("ps", "--format", "{{.Names}}").stdout.split(),
            timeout=60,
            what="the container to start",
        )
        assert sims.status(job_id)["status"] == "dispatched"
        assert ok(hub.http.post(f"/stop/{job_id}"))["status"] == "stop_requested"
        gate.set()
        wait_until(
            lambda: ("stopped", 200) in slow.reported(job_id), timeout=60, what="stopped reported"
        )
        assert slow.stops_seen == [job_id]
        assert sims.wait(job_id, "stopped")["status"] == "stopped"
        left = runtime.run("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}")
        assert left.stdout.split() == []
    finally:
        gate.set()
        slow.close()
    assert slow.error is None, slow.error


def test_the_required_hosts_wait_is_set_through_003(sims: Sims, hub: Api) -> None:
    host = f"gone-{uuid.uuid4().hex[:6]}"
    job = sims.run(preferred_host=host, require_host=True, require_host_wait_s=1)
    ended = sims.wait(job["job_id"], "canceled", timeout=30)
    assert ended["error"] == "host_unavailable"
    pinned = ok(
        hub.http.get(f"/api/jobs/{sims.run(preferred_host=host, require_host=True)['job_id']}")
    )
    assert pinned["require_host_wait_ms"] == 3_600_000  # the default, one hour
    base = {"image": IMAGE, "config_path": "configs/demo.yaml"}
    for body in (
        {"require_host_wait_s": 5},
        {"preferred_host": host, "require_host": True, "require_host_wait_s": 0},
    ):
        refused = hub.http.post("/run-simulation", json={**base, **body})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"].startswith("require_host_wait_s"), refused.text


def test_the_designs_staleness_settings_map_onto_jobforges(
    start_api: Callable[..., Api], shared: Path
) -> None:
    # A worker offline HOST_HEARTBEAT_TTL + WORKER_STALE_GRACE_SECONDS loses its jobs:
    # a simulation's stale limit is at most that, though JOB_STATUS_TTL is longer.
    api = start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c003s-{uuid.uuid4().hex[:8]}-",
        CONTAINER_VOLUME_PREFIXES=str(shared),
        JOB_STATUS_TTL="60",
        HOST_HEARTBEAT_TTL="2",
        WORKER_STALE_GRACE_SECONDS="1.5",
        QUEUE_CLAIM_TTL="30",
    )
    sims = Sims(api, shared)
    try:
        job_id = sims.run()["job_id"]
        assert ok(api.http.get(f"/api/jobs/{job_id}"))["heartbeat_timeout_ms"] == 3500
        # /hosts: online while heard from within HOST_HEARTBEAT_TTL, then offline.
        worker = f"hb-{uuid.uuid4().hex[:6]}"
        ok(api.http.post("/api/agent/heartbeat", json={"worker_id": worker, "info": {}}))

        def shown() -> dict[str, Any] | None:
            rows = ok(api.http.get("/hosts"))
            return next((h for h in rows if h["worker_id"] == worker), None)

        assert wait_until(shown, timeout=30, what=f"{worker} in /hosts")["online"] is True
        wait_until(
            lambda: (h := shown()) is not None and h["online"] is False,
            timeout=30,
            what=f"{worker} offline after HOST_HEARTBEAT_TTL",
        )
    finally:
        sims.close()


def test_a_claim_not_reported_running_within_queue_claim_ttl_goes_back_to_the_queue(
    start_api: Callable[..., Api], shared: Path
) -> None:
    # QUEUE_CLAIM_TTL (2 s) is far shorter than JOB_STATUS_TTL (300 s): a dispatched job
    # goes back to the queue at the first; a running one is kept.
    api = start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c003c-{uuid.uuid4().hex[:8]}-",
        CONTAINER_VOLUME_PREFIXES=str(shared),
        JOB_STATUS_TTL="300",
        QUEUE_CLAIM_TTL="2",
    )
    sims = Sims(api, shared)
    try:
        both = {sims.run()["job_id"], sims.run()["job_id"]}
        runner, ghost = f"w-{uuid.uuid4().hex[:6]}", f"ghost-{uuid.uuid4().hex[:6]}"
        # Two jobs run milliseconds apart may be claimed in either order (docs/api.md).
        kept = (sims.next_job(runner) or {}).get("job_id")
        assert kept in both
        assert ok(sims.report(kept, runner, "running"))["status"] == "running"
        (left,) = both - {kept}
        assert (sims.next_job(ghost) or {}).get("job_id") == left
        assert sims.status(left)["status"] == "dispatched"

        def requeued() -> dict[str, Any] | None:
            job: dict[str, Any] = ok(api.http.get(f"/api/jobs/{left}"))
            reasons = [t["reason"] for t in job["transitions"]]
            return job if "dispatch_timeout" in reasons else None

        job = wait_until(requeued, timeout=60, what="the expired claim back in the queue")
        assert (job["attempts"], job["fail_history"], job["worker_id"]) == (0, [], None)
        assert sims.status(left)["status"] == "queued"
        assert sims.report(left, ghost, "running").status_code == 409
        # The running job, claimed earlier, still runs: its claim was reported.
        assert sims.status(kept)["status"] == "running"
        assert ok(sims.report(kept, runner, "running"))["status"] == "running"
    finally:
        sims.close()
