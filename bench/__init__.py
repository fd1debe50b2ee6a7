"""The benchmarks (docs/benchmarks.md), run from the repository root as modules
(`python -m bench.throughput`) on one harness (`bench.harness`; `bench.bare`: bare
Temporal's workflows). May import every jobforge package and the tests' process
helpers (tests/procs.py, tests/container_image.py); the tests never import bench."""
