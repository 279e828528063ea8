"""Device memory: per-device statistics, the cache of freed blocks, and the capacity that raises
torch.OutOfMemoryError."""

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
    cached = neuron.memory_reserved() - before  # blocks earlier tests freed
    allocs_before = neuron.memory_stats()["allocation.all.allocated"]
    x = torch.empty(1024, device="neuron")  # 4096 bytes
    assert neuron.memory_allocated() == before + 4096
    assert neuron.memory_reserved() == neuron.memory_allocated() + cached  # a block under 16 KiB is never cached
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


@pytest.mark.parametrize("memory, source, not_said", [
    ("2MiB", "(set by TORCHFERRY_DEVICE_MEMORY=2MiB)", "logical NeuronCore"),
    (None, "(the device profile trn2's memory_bytes: ", "set by TORCHFERRY_DEVICE_MEMORY"),
], ids=["variable", "profile"])
def test_out_of_memory_names_where_the_capacity_came_from(run_python, memory, source, not_said):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        try:
            torch.empty(2**40, dtype=torch.uint8, device="neuron")  # 1 TiB: past any capacity, charged before allocating
        except torch.OutOfMemoryError as exc:
            print(exc)
        """,
        env={"TORCHFERRY_DEVICE_MEMORY": memory} if memory else {},
    )
    assert result.returncode == 0, result.stderr
    assert source in result.stdout and not_said not in result.stdout, result.stdout


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


MIB = 2**20


def test_a_freed_block_is_reused_by_the_next_request_of_its_size_class(neuron, no_collection):
    neuron.empty_cache()
    x = torch.empty(MIB // 4, device="neuron")  # 1 MiB
    address = x.data_ptr()
    del x
    assert neuron.memory_reserved() == neuron.memory_allocated() + MIB  # kept, not freed
    y = torch.empty(MIB // 4 + 100, device="neuron")  # 1 MiB + 400 bytes: the same 1.125 MiB class
    assert y.data_ptr() != address  # a 1 MiB block is too small for it
    del y
    z = torch.empty(MIB // 4, device="neuron")
    assert z.data_ptr() == address
    del z
    neuron.empty_cache()
    assert neuron.memory_reserved() == neuron.memory_allocated()


def test_cpu_kernel_results_are_served_from_the_cache(neuron, no_collection):
    # The CPU kernel allocates its result itself; while a device op runs, that allocation comes
    # from the device's cache, so a freed result's block serves the next op's result.
    a = torch.full((512, 512), 2.0, device="neuron")  # 1 MiB
    neuron.empty_cache()
    b = a * 2
    address = b.data_ptr()
    del b
    assert neuron.memory_reserved() - neuron.memory_allocated() == MIB  # back in the cache, not freed
    c = a + 1
    assert c.data_ptr() == address
    assert torch.equal(c.cpu(), torch.full((512, 512), 3.0))


@pytest.mark.parametrize("multithreaded", [False, True], ids=["calling-thread", "device-thread"])
def test_a_backward_reuses_blocks_freed_before_it(neuron, multithreaded, no_collection):
    # The gradient of `w` comes from the mm kernel of the backward; it takes the block freed
    # just before, on whichever thread runs the backward (the engine's device thread too).
    x = torch.ones(64, 128, device="neuron")
    w = torch.ones(128, 512, device="neuron", requires_grad=True)
    freed = torch.empty(128, 512, device="neuron")  # 256 KiB, the class of w's gradient
    address = freed.data_ptr()
    del freed
    y = x @ w  # 128 KiB: another class
    with torch.autograd.set_multithreading_enabled(multithreaded):
        y.backward(torch.ones(64, 512, device="neuron"))
    assert w.grad.data_ptr() == address
    assert torch.equal(w.grad.cpu(), torch.full((128, 512), 64.0))


def test_empty_cache_returns_cached_blocks_and_keeps_live_ones(neuron, no_collection):
    keep = torch.ones(MIB // 4, device="neuron")
    torch.empty(2 * MIB // 4, device="neuron")  # freed at once: 2 MiB cached
    assert neuron.memory_reserved() >= neuron.memory_allocated() + 2 * MIB
    assert neuron.max_memory_reserved() >= neuron.memory_reserved()
    torch.accelerator.empty_cache()  # PyTorch's device-generic call reaches the same cache
    assert neuron.memory_reserved() == neuron.memory_allocated()
    assert torch.equal(keep.cpu(), torch.ones(MIB // 4))


def test_no_memory_caching_returns_freed_blocks_at_once(run_python):
    result = run_python(
        """
        import torchferry.device as d; d.enable()
        import torch
        x = torch.empty(2**20, device="neuron")
        del x
        print(torch.neuron.memory_reserved(), torch.neuron.memory_allocated())
        """,
        env={"TORCHFERRY_NO_MEMORY_CACHING": "1"},
    )
    assert result.returncode == 0, result.stderr
    reserved, allocated = result.stdout.split()
    assert reserved == allocated


def test_a_host_out_of_memory_releases_the_cache_and_retries(run_python):
    # Address space for about 400 MB more: the two blocks (224 MiB size classes, 470 MB together)
    # do not both fit, so the new one fits only if the cache gives its block back first. The
    # rest is slack for a thread that starts meanwhile (a glibc arena reserves 64 MiB, a
    # stack 8 MiB): with 300 MB, one such thread made the first block fail in a CI run.
    result = run_python(
        """
        import resource
        import torchferry.device as d; d.enable()
        import torch
        torch.ones(8, device="neuron").add_(1)  # start the kernels' threads first
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + 400 * 10**6, resource.RLIM_INFINITY))
        torch.empty(50 * 10**6, device="neuron")  # 200 MB, freed into the cache
        cached = torch.neuron.memory_reserved() - torch.neuron.memory_allocated()
        y = torch.empty(55 * 10**6, device="neuron")  # 220 MB: another size class
        print(cached >= 200 * 10**6, torch.neuron.memory_reserved() - torch.neuron.memory_allocated())
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "0"]
