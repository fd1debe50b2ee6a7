"""A worker for design 003, written from its §"Worker Responsibilities" alone: heartbeat,
ask for the next job, run its container with the given image, command, name, volumes
and env, stream the container's output to `<shared>/jobs/<id>/logs/<id>.log`, send
`running` updates, poll `GET /status/<id>` for a stop, and end with `finished`,
`failed` or `stopped`. Containers run through the container executor's runtime
(activities/container.py) for the stop; the run itself is the runtime's CLI."""

from __future__ import annotations

import asyncio
import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from activities.container import ContainerRuntime
from tests.container_image import Runtime


@dataclass
class DesignWorker:
    """One worker (`WORKER_ID`) on a thread of its own, until `close`."""

    url: str
    token: str
    worker_id: str
    shared: Path
    runtime: Runtime
    status_every_s: float = 0.5
    idle_s: float = 0.2
    # When set, the first `running` report waits for it after the container started (a
    # slow worker: a stop may land while the job is still dispatched).
    first_report_gate: threading.Event | None = None
    # (job id, status reported, HTTP status of the report), in order.
    reports: list[tuple[str, str, int]] = field(default_factory=list)
    stops_seen: list[str] = field(default_factory=list)
    error: BaseException | None = None
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> DesignWorker:
        self._thread = threading.Thread(target=self._run_thread, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def reported(self, job_id: str) -> list[tuple[str, int]]:
        return [(status, code) for job, status, code in self.reports if job == job_id]

    def _run_thread(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:  # surfaced by the test
            self.error = err

    async def _main(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30) as http:
            while not self._done.is_set():
                # 1. heartbeat; 2. next job; 3. 204: sleep and loop; 4. run it.
                beat = await http.post(
                    "/api/agent/heartbeat",
                    json={"worker_id": self.worker_id, "info": {"load": 0.5, "running_jobs": 0}},
                )
                beat.raise_for_status()
                got = await http.post("/api/agent/next-job", json={"worker_id": self.worker_id})
                if got.status_code == 204:
                    await asyncio.sleep(self.idle_s)
                    continue
                got.raise_for_status()
                await self._run_job(http, got.json())

    async def _report(self, http: httpx.AsyncClient, job_id: str, status: str, **extra: Any) -> int:
        body = {"job_id": job_id, "status": status, "worker_id": self.worker_id, **extra}
        answer = await http.post("/api/agent/job-status", json=body)
        self.reports.append((job_id, status, answer.status_code))
        return answer.status_code

    async def _run_job(self, http: httpx.AsyncClient, job: dict[str, Any]) -> None:
        job_id, name = job["job_id"], job["container_name"]
        home = self.shared / "jobs" / job_id
        for sub in ("logs", "progress", "results"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        if not (self.shared / job["config_path"]).is_file():
            await self._report(http, job_id, "failed", error=f"no config {job['config_path']}")
            return
        argv = ["run", "--rm", "--name", name]
        for volume in job["volumes"]:
            mode = ":ro" if volume["mode"] == "ro" else ""
            argv += ["--volume", f"{volume['host']}:{volume['container']}{mode}"]
        for key, value in job["env"].items():
            argv += ["--env", f"{key}={value}"]
        argv += [job["image"], *shlex.split(job["command"])]
        process = await asyncio.create_subprocess_exec(
            *self.runtime.cli(*argv),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **self.runtime.env},
        )
        if self.first_report_gate is not None:
            await asyncio.to_thread(self.first_report_gate.wait, 60)
        await self._report(http, job_id, "running", container_id=name, container_name=name)
        assert process.stdout is not None
        copy = asyncio.create_task(self._copy(process.stdout, home / "logs" / f"{job_id}.log"))
        stopped = False
        while True:
            try:
                await asyncio.wait_for(process.wait(), self.status_every_s)
                break
            except TimeoutError:
                pass
            await self._report(http, job_id, "running")
            seen = (await http.get(f"/status/{job_id}")).json()
            if seen["status"] == "stop_requested" or seen.get("stop_requested"):
                self.stops_seen.append(job_id)
                executor = ContainerRuntime(self.runtime.program, self.runtime.args)
                await executor.stop(name, 1)
                await process.wait()
                stopped = True
                break
        await copy
        code = process.returncode
        if stopped:
            await self._report(http, job_id, "stopped", exit_code=code)
        elif code == 0:
            await self._report(http, job_id, "finished", exit_code=0)
        else:
            await self._report(http, job_id, "failed", exit_code=code, error="container failed")

    @staticmethod
    async def _copy(stream: asyncio.StreamReader, path: Path) -> None:
        with path.open("ab") as log:
            while line := await stream.readline():
                log.write(line)
                log.flush()
