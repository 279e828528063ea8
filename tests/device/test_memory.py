"""Device memory: per-device statistics and the capacity that raises torch.OutOfMemoryError."""

import gc

import pytest
import torch


@pytest.fixture
def no_collection():
    """No garbage collection while a test counts bytes: a cycle left by an earlier test that holds a device
    tensor would otherwise be freed mid-count (the full suite once freed 200 such bytes inside this test)."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_allocation_statistics_track_live_and_peak_bytes(neuron, no_collection):
    neuron.reset_peak_memory_stats()
    before = neuron.memory_allocated()
    allocs_before = neuron.memory_stats()["allocation.all.allocated"]
    x = torch.empty(1024, device="neuron")  # 4096 bytes
    assert neuron.memory_allocated() == before + 4096
    assert neuron.memory_reserved() == neuron.memory_allocated()  # no caching
    assert neuron.memory_stats()["allocation.all.allocated"] == allocs_before + 1
    del x
    assert neuron.memory_allocated() == before
    assert neuron.max_memory_allocated() >= before + 4096
    neuron.reset_peak_memory_stats()
    assert neuron.max_memory_allocated() == neuron.memory_allocated()


def test_capacity_defaults_to_one_trn2_logical_core(neuron):
    assert neuron.get_device_properties(0).total_memory == 24 * 2**30
    free, total = neuron.mem_get_info()
    assert total == 24 * 2**30 and 0 < free <= total


def test_exceeding_capacity_raises_out_of_memory_naming_device_request_and_knob(run_python):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        keep = torch.empty(256 * 1024, device="neuron")  # 1 MiB
        try:
            torch.empty(512 * 1024, device="neuron")     # 2 MiB more
        except torch.OutOfMemoryError as exc:
            print(exc)
        print("ooms", torch.neuron.memory_stats()["num_ooms"])
        """,
        env={"TORCHFERRY_DEVICE_MEMORY": "2MiB"},
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "neuron:0 out of memory" in out
    assert "tried to allocate 2.00 MiB" in out and "1.00 MiB already allocated" in out
    assert "holds 2.00 MiB" in out and "TORCHFERRY_DEVICE_MEMORY" in out
    assert "ooms 1" in out


def test_results_of_cpu_kernels_count_against_capacity(run_python):
    # Results are adopted from the CPU kernels without a copy; they still count.
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        x = torch.ones(300 * 1024, device="neuron")      # 1.2 MB
        try:
            y = x + 1                                     # another 1.2 MB > 2 MB
        except torch.OutOfMemoryError:
            print("oom")
        """,
        env={"TORCHFERRY_DEVICE_MEMORY": "2MB"},
    )
    assert result.stdout.strip() == "oom", result.stderr
