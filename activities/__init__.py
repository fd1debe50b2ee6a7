"""The activities a native worker runs: a job's attempt, its solver process or container,
and the solver cache. May import engine and workflows; never api or worker
(tests/test_layering.py)."""
