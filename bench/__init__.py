"""jobforge's benchmarks, run from the repository root as modules on one harness.

- `python -m bench.throughput`: no-op jobs per second, jobforge against bare Temporal.
- `python -m bench.claim_latency`: submit to held, for an HTTP agent, a native worker
  and bare Temporal.
- `python -m bench.event_latency`: a job transition to its arrival on SSE clients.
- `python -m bench.outage_answer`: how long the API takes to answer while Temporal is down.
- `python -m bench.dashboard_screenshot`: the dashboard screenshots in docs/.

`bench.harness` holds what they share (processes, the dev server, readiness waits,
percentiles, CPU accounting); `bench.bare` the bare-Temporal workflows and their worker.
"""
