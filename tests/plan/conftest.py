import pytest


@pytest.fixture
def no_trace(monkeypatch):
    """Fail the test if a bad input got as far as tracing."""
    import torchferry.workloads.footprint.trace as trace

    def refuse(*args, **kwargs):
        raise AssertionError("bad input reached the tracer")

    monkeypatch.setattr(trace, "trace_step", refuse)
