"""Per-device RNG: the same seed gives the CPU's numbers, and the streams are separate."""

import torch


def test_same_seed_gives_the_cpus_numbers(neuron):
    torch.manual_seed(123)  # seeds the CPU and, through torch.neuron.manual_seed_all, neuron
    on_device = torch.randn(100, device="neuron").cpu()
    torch.manual_seed(123)
    on_cpu = torch.randn(100)
    assert torch.equal(on_device, on_cpu)


def test_device_draws_do_not_move_the_cpu_generator(neuron):
    torch.manual_seed(0)
    neuron.manual_seed(0)
    torch.rand(10, device="neuron")
    after_device_draw = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), after_device_draw)


def test_rng_state_round_trip(neuron):
    neuron.manual_seed(7)
    state = neuron.get_rng_state()
    first = torch.rand(5, device="neuron").cpu()
    neuron.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="neuron").cpu(), first)
    assert neuron.initial_seed() == 7


def test_explicit_generator_on_the_device(neuron):
    g = torch.Generator(device="neuron").manual_seed(5)
    a = torch.randn(4, generator=g, device="neuron").cpu()
    g.manual_seed(5)
    assert torch.equal(torch.randn(4, generator=g, device="neuron").cpu(), a)
    assert g.device.type == "neuron"


def test_dropout_matches_cpu_bit_for_bit(neuron):
    x = torch.randn(64, 64)
    torch.manual_seed(3)
    cpu = torch.nn.functional.dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    dev = torch.nn.functional.dropout(x.to("neuron"), 0.3, training=True).cpu()
    assert torch.equal(cpu, dev)
