"""API tokens: how soon a revoked token is refused by another API replica, and what
checking a token costs a request.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.tokens --rounds 20 --requests 4000

One run starts one headless Temporal dev server (free port, fresh temp data dir), a
native worker (which runs the token registry) and two API replicas, then measures:

1. revocation: each round creates a reader token on replica 1, waits until replica 2
   accepts it, revokes it on replica 1 and polls replica 2 every 10 ms until it answers
   401. The delay runs from the DELETE's answer to that 401 (shipped settings:
   TOKENS_REFRESH_MS=2000).
2. check cost: `GET /api/config` (answered from the API's settings, no Temporal call)
   `--requests` times on replica 1 at `--concurrency`, in alternating batches sent with
   the bootstrap secret and with a producer token: requests/s of each, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import httpx

from bench.harness import Bench, api_client, exit_now, parse, run_bench

POLL_S = 0.01
BATCHES = 10


async def answers(http: httpx.AsyncClient, status: int) -> None:
    """Poll GET /api/config every `POLL_S` until it answers `status`."""
    while True:
        if (await http.get("/api/config")).status_code == status:
            return
        await asyncio.sleep(POLL_S)


async def revocation_delays(first: httpx.AsyncClient, second_url: str, rounds: int) -> list[float]:
    """Seconds from each revoke's answer on replica 1 to replica 2's first 401."""
    delays = []
    for _ in range(rounds):
        made = await first.post("/api/tokens", json={"name": "bench", "role": "reader"})
        made.raise_for_status()
        token = made.json()
        headers = {"Authorization": f"Bearer {token['token']}"}
        async with httpx.AsyncClient(base_url=second_url, headers=headers, timeout=30) as second:
            await answers(second, 200)
            (await first.delete(f"/api/tokens/{token['id']}")).raise_for_status()
            revoked = time.monotonic()
            await answers(second, 401)
            delays.append(time.monotonic() - revoked)
    return delays


async def request_rate(http: httpx.AsyncClient, bearer: str, count: int, concurrency: int) -> float:
    """Seconds taken by `count` GET /api/config sent with `bearer`."""
    headers = {"Authorization": f"Bearer {bearer}"}
    left = count

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            response = await http.get("/api/config", headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"GET /api/config: {response.status_code} {response.text}")

    began = time.monotonic()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    return time.monotonic() - began


async def run(bench: Bench) -> None:
    """Both measurements, printed."""
    args = bench.args
    bench.start_noop_worker("noop", "bench-worker")
    _, first_port = bench.start_api("api-1")
    _, second_port = bench.start_api("api-2")
    async with api_client(first_port, timeout=60, connections=args.concurrency) as first:
        delays = await revocation_delays(first, f"http://127.0.0.1:{second_port}", args.rounds)
        print(
            f"revocation seen by the other replica after: p50 {statistics.median(delays):.2f} s, "
            f"max {max(delays):.2f} s ({len(delays)} rounds)"
        )
        made = await first.post("/api/tokens", json={"name": "bench", "role": "producer"})
        made.raise_for_status()
        producer = made.json()["token"]
        secret = str(first.headers["Authorization"]).removeprefix("Bearer ")
        per_batch = max(1, args.requests // BATCHES)
        await request_rate(first, producer, per_batch, args.concurrency)  # warm-up
        spent = {"bootstrap secret": 0.0, "producer token": 0.0}
        for _ in range(BATCHES):
            spent["bootstrap secret"] += await request_rate(
                first, secret, per_batch, args.concurrency
            )
            spent["producer token"] += await request_rate(
                first, producer, per_batch, args.concurrency
            )
    rates = {name: per_batch * BATCHES / seconds for name, seconds in spent.items()}
    for name, rate in rates.items():
        print(f"GET /api/config with the {name}: {rate:.0f} requests/s")
    ratio = rates["producer token"] / rates["bootstrap secret"]
    print(f"producer token / bootstrap secret: {ratio:.3f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tokens",
        description="Revocation delay across API replicas, and the per-request token check.",
    )
    parser.add_argument("--rounds", type=int, default=20, help="revocations timed")
    parser.add_argument("--requests", type=int, default=4000, help="requests per kind of bearer")
    parser.add_argument("--concurrency", type=int, default=20, help="requests in flight at once")
    args = parse(parser, argv)
    if args.rounds < 1 or args.requests < 1 or args.concurrency < 1:
        parser.error("--rounds, --requests and --concurrency must be at least 1")

    def settings(bench: Bench) -> str:
        a = bench.args
        return f"rounds={a.rounds} requests={a.requests} concurrency={a.concurrency}"

    return run_bench(args, run, settings=settings, data_prefix="jobforge-tokens-bench-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
