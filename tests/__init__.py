"""The test suite: in-process workflow tests, process-level tests against a real dev
server, replays of committed histories (`histories/`), and the designs' (`contracts/`).
May import every jobforge package, and bench's harness."""
