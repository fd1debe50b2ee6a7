"""Screenshots of the dashboard: a fresh dev stack, jobs in every state, headless Chromium.

Writes docs/dashboard.png and docs/dashboard-detail.png (a job's detail panel open);
run it from the repository root:

    .venv/bin/python -m bench.dashboard_screenshot [--out docs/dashboard.png]

Needs /usr/bin/chromium (Debian's) and the `playwright` package; downloads nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from hashlib import sha256
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect, sync_playwright

from bench.harness import start_dev_server
from tests.ports import free_port
from tests.procs import CHROMIUM, CHROMIUM_ARGS, ROOT, Proc, jobforge, spawn, wait_until
from worker.devserver import env_with, wait_for_port

SECRET = "screenshot-secret"
# A registered agent that never heartbeats shows as dead after this long.
ALIVE_WINDOW_S = 20
SOLVERS = {
    "quick": 'import json, sys, time\ntime.sleep(0.3)\nprint(json.dumps({"ok": True, '
    '"params": json.loads(sys.argv[2]), "score": 0.93}))\n',
    "slow": "import time\ntime.sleep(600)\n",
    "broken": 'import sys\nprint("solver: matrix is singular", file=sys.stderr)\nsys.exit(2)\n',
}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dashboard_screenshot", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--chromium", default=str(CHROMIUM))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jf-shot-"))
    server = start_dev_server(work / "temporal")
    procs: list[Proc] = []
    env = env_with(
        TEMPORAL_ADDRESS=server.address,
        TEMPORAL_UI_URL="http://127.0.0.1:8233",
        FORGE_INGEST_SECRET=SECRET,
        SOLVER_URL_SCHEMES="file",
        SOLVER_ALLOW_PRIVATE_NETWORKS="true",
        WORKER_TYPE_POLL_MS="100",
        JOB_HEARTBEAT_TIMEOUT_S=str(ALIVE_WINDOW_S),
        SOLVER_CACHE_DIR=str(work / "cache"),
    )

    def start(*args: str, **extra: str) -> Proc:
        proc = spawn(jobforge(*args), work / f"{args[0]}-{len(procs)}.log", {**env, **extra})
        procs.append(proc)
        return proc

    try:
        port = free_port()
        wait_for_port(port, 30, start("api", "--port", str(port)).process)
        url = f"http://127.0.0.1:{port}"
        http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=30)
        start("worker", NODE_ID="node-a.lab", WORKER_CORES="4", WORKER_TAGS="cpu,avx2")
        http.post(
            "/api/workers/register",
            json={
                "worker_id": "gpu-box-7",
                "name": "gpu-box-7",
                "cores": 32,
                "ram_gb": 128,
                "tags": ["gpu", "cuda"],
                "kind": "agent",
            },
        ).raise_for_status()

        solvers = {}
        for name, body in SOLVERS.items():
            path = work / f"{name}.py"
            path.write_text(f"#!{sys.executable}\n{body}")
            path.chmod(0o755)
            solvers[name] = {
                "solver_url": path.as_uri(),
                "solver_checksum": sha256(path.read_bytes()).hexdigest(),
            }

        def submit(job_type: str, solver: str, **spec: Any) -> str:
            response = http.post("/api/jobs", json={"type": job_type, **solvers[solver], **spec})
            response.raise_for_status()
            job_id: str = response.json()["id"]
            return job_id

        def reach(job_id: str, *statuses: str) -> None:
            def reached() -> bool:
                return http.get(f"/api/jobs/{job_id}").json()["status"] in statuses

            wait_until(reached, interval=0.2, what=f"job {job_id} to be {'/'.join(statuses)}")

        done = [
            submit(t, "quick", params={"frame": i}, priority=p)
            for i, (t, p) in enumerate(
                [("render", 0), ("solve", 5), ("ingest", 0), ("render", 0), ("solve", 0)]
            )
        ]
        broken = submit("solve", "broken", params={"matrix": "m-17"}, max_attempts=2)
        for job_id in [*done, broken]:
            reach(job_id, "completed", "quarantined")
        slow = [submit("render", "slow", params={"scene": s}) for s in ("forest", "city")]
        for job_id in slow:
            reach(job_id, "running")
        # The scheduling panels: a group at max_parallel 1 behind a pool of 2, a target, and
        # a schedule.
        http.put("/api/pools/gpu", json={"capacity": 2}).raise_for_status()
        http.patch("/api/groups/nightly-renders", json={"max_parallel": 1}).raise_for_status()
        grouped = [
            submit("render", "slow", params={"shot": s}, group="nightly-renders", pool="gpu")
            for s in ("a", "b")
        ]
        reach(grouped[0], "running")
        submit("ingest", "quick", params={"site": 1}, tenant="acme", target="acme/site-1")
        http.post(
            "/api/schedules",
            json={"id": "hourly-ingest", "cron": "0 * * * *", "job": {"type": "ingest"}},
        ).raise_for_status()
        queued = [submit(t, "quick", params={"batch": i}) for i, t in enumerate(["ingest"] * 3)]
        http.delete(f"/api/jobs/{queued[0]}").raise_for_status()
        reach(queued[0], "failed")

        def agent_dead() -> bool:
            listed = http.get("/api/workers").json()
            return any(w["worker_id"] == "gpu-box-7" and not w["alive"] for w in listed)

        wait_until(agent_dead, timeout=ALIVE_WINDOW_S + 30, interval=0.5, what="gpu-box-7 dead")

        def charted() -> bool:
            # The charts' hour, rebuilt from visibility (the first read starts it) with
            # the jobs that ended above, and a queue depth sampled.
            series = http.get("/api/stats/series").json()
            return bool(
                series["rebuilt"]
                and sum(series["completed"]) >= len(done)
                and series["hour"]["run_p50_ms"] is not None
                and series["queue_depth"]
            )

        wait_until(charted, interval=0.5, what="the charts' hour")

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1440, "height": 620})
            page.goto(url)
            page.locator("#token-input").fill(SECRET)
            page.locator("#login-button").click()
            expect(page.locator("#jobs-body tr")).to_have_count(len(done) + 1 + 2 + 2 + 1 + 3)
            expect(page.locator('#fleet-list .worker[data-alive="false"]')).to_have_count(1)
            expect(page.locator("#stream-status")).to_have_text("live")
            page.locator(f'#jobs-body tr[data-job-id="{done[1]}"]').hover()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
            detail = args.out.with_name(f"{args.out.stem}-detail{args.out.suffix}")
            page.locator(f'#jobs-body tr[data-job-id="{broken}"]').click()
            expect(page.locator("#detail-failures tbody tr")).to_have_count(2)
            page.screenshot(path=str(detail))
            browser.close()
        print(f"wrote {args.out} and {detail}")
        print(
            json.dumps(
                {
                    "completed": done,
                    "quarantined": broken,
                    "running": slow,
                    "pending": queued[1:],
                    "grouped": grouped,
                    "cancelled": queued[0],
                }
            )
        )
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=15)
        server.stop()


if __name__ == "__main__":
    main()
