"""What an API replica costs while nothing is asked of it, and while tokens are checked.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.idle_api --replicas 8 --seconds 60

One run starts one headless Temporal dev server, a worker for the workflows and
--replicas APIs on it, and makes one API token. Phase "idle": nothing is sent to the
APIs. Phase "tokens": each API is sent `GET /api/jobs/page?limit=1` with the token
once every 2 s. Each phase prints the
CPU seconds a second of the dev server and of one API (the mean), read from /proc over
--seconds, and the describes the server answered a second (its token-table reads).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import httpx

from bench.harness import SECRET, Bench, CpuMeter, exit_now, load_average, parse, run_bench

CHECK_EVERY_S = 2.0


async def check_tokens(ports: list[int], token: str, seconds: float) -> None:
    """Each API gets one call with the token every CHECK_EVERY_S, for `seconds`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for port in ports:
                answer = await http.get(f"http://127.0.0.1:{port}/api/jobs/page?limit=1")
                answer.raise_for_status()
            await asyncio.sleep(CHECK_EVERY_S)  # the pace of the calls, not a wait


async def phase(bench: Bench, label: str, ports: list[int], meter: CpuMeter, token: str) -> None:
    seconds = bench.args.seconds
    before = bench.server_counts()["rpc DescribeWorkflowExecution"]
    meter.start()
    began = time.monotonic()
    if token:
        await check_tokens(ports, token, seconds)
    else:
        await asyncio.sleep(seconds)  # the window measured: nothing is asked of the APIs
    took = time.monotonic() - began
    used = meter.stop()
    describes = bench.server_counts()["rpc DescribeWorkflowExecution"] - before
    apis = [cpu for name, cpu in used.items() if name != "temporal"]
    print(
        f"{label:<7} cpu s/s over {took:.0f} s: temporal {used['temporal'] / took:.4f}, "
        f"one API {sum(apis) / len(apis) / took:.4f}; describes {describes / took:.2f}/s; "
        f"load {load_average()}"
    )
    sys.stdout.flush()


async def body(bench: Bench) -> None:
    bench.start_noop_worker("bench-idle-api", "idle-api-worker")  # runs the token registry
    started = [bench.start_api(f"api-{i}") for i in range(bench.args.replicas)]
    ports = [port for _, port in started]
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {SECRET}"}) as http:
        made = await http.post(
            f"http://127.0.0.1:{ports[0]}/api/tokens", json={"name": "bench", "role": "reader"}
        )
        made.raise_for_status()
    token = made.json()["token"]
    pids = {"temporal": bench.server_pid()}
    pids.update({f"api-{i}": proc.process.pid for i, (proc, _) in enumerate(started)})
    meter = CpuMeter(pids)
    await asyncio.sleep(bench.args.settle)  # let the starts' and the token's work end
    await phase(bench, "idle", ports, meter, "")
    await phase(bench, "tokens", ports, meter, token)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8, help="API processes")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds between the starts and the first phase"
    )
    args = parse(parser, argv)
    return run_bench(
        args,
        body,
        settings=lambda b: f"{b.args.replicas} APIs, phases of {b.args.seconds:g} s",
        data_prefix="jobforge-idle-api-",
    )


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
