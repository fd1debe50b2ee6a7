"""The test suite: in-process workflow tests, process-level tests against a real dev
server, replays of committed histories (`histories/`), and the designs' (`contracts/`).
May import every jobforge package, never bench/: the benches import the tests' process
helpers (`procs.py`, `container_image.py`), not the other way."""
