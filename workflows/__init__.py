"""Deterministic workflow code and every name that crosses a layer: the workflows, their
models, states, errors and Temporal names. Imports no other jobforge package (the
bottom layer: everything else imports it; tests/test_layering.py)."""
