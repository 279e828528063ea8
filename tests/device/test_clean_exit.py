"""A process that ran backward on the device exits cleanly (no abort at interpreter exit)."""

from concurrent.futures import ThreadPoolExecutor


def test_process_exits_cleanly_after_device_backward(run_python):
    # Before the fix about half of such runs aborted with "terminate called without an
    # active exception": the device's autograd worker released Python objects during
    # interpreter finalisation. Ten runs make a regression all but certain to show.
    code = """
    import torchferry.device as d; d.enable()
    import torch
    w = torch.randn(3, device="neuron", requires_grad=True)
    # The engine's device thread, which holds the last graph task (device backward runs on the
    # calling thread by default, where there is nothing to release).
    with torch.autograd.set_multithreading_enabled(True):
        (w * 2).sum().backward()
        (w * 3).sum().backward()
    """
    # Two at a time, one per core of a 2-core machine: each run is still a process of its own, and the abort
    # happened inside one process (its own autograd worker against its own finalisation).
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: run_python(code), range(10)))
    failures = [(r.returncode, r.stderr[-200:]) for r in results if r.returncode != 0]
    assert not failures, failures
