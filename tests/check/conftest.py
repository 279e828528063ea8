"""Fixture workloads of the `ferry check` tests live in ./fixtures (also used by tests/cli)."""
