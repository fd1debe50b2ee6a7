"""What both the API and the workers need, neither owning it: the Temporal client and its
settings, registry reads, the gates' client side, the log store, hosts, solver URLs, the
wall clock, tracing. May import workflows only (tests/test_layering.py)."""
