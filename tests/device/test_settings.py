"""Environment knobs of the built-in device: parsing and the errors for bad values."""

import pytest

from torchferry.device._settings import (
    FALLBACK_MODES,
    DeviceSettingError,
    backward_thread,
    device_memory,
    fallback_code,
    fallback_mode,
    memory_caching,
    numerics,
    parse_bytes,
    visible_device_count,
)


@pytest.mark.parametrize(
    ("environ", "count"),
    [
        ({}, 1),
        ({"NEURON_RT_VISIBLE_CORES": "0-3"}, 4),
        ({"NEURON_RT_VISIBLE_CORES": "0,2,5"}, 3),
        ({"NEURON_RT_VISIBLE_CORES": "4"}, 1),
        ({"NEURON_RT_VISIBLE_CORES": "2-5,8"}, 5),
        ({"NEURON_RT_NUM_CORES": "2"}, 2),
        ({"NEURON_RT_NUM_CORES": "0"}, 1),
        ({"NEURON_RT_VISIBLE_CORES": "0-1", "NEURON_RT_NUM_CORES": "8"}, 2),
    ],
)
def test_device_count_follows_the_neuron_runtime_variables(environ, count):
    assert visible_device_count(environ) == count


@pytest.mark.parametrize("bad", ["a-b", "3-1", "0,,1", "0-", "1,1"])
def test_bad_visible_cores_name_the_variable_and_the_valid_forms(bad):
    with pytest.raises(DeviceSettingError) as err:
        visible_device_count({"NEURON_RT_VISIBLE_CORES": bad})
    assert "NEURON_RT_VISIBLE_CORES" in str(err.value) and repr(bad) in str(err.value)


def test_bad_num_cores_is_rejected():
    with pytest.raises(DeviceSettingError, match="NEURON_RT_NUM_CORES='two'"):
        visible_device_count({"NEURON_RT_NUM_CORES": "two"})


@pytest.mark.parametrize(
    ("text", "value"),
    [("24GiB", 24 * 2**30), ("512MiB", 512 * 2**20), ("16GB", 16 * 10**9), ("1000", 1000), ("1.5 KiB", 1536)],
)
def test_memory_sizes_parse_with_units(text, value):
    assert parse_bytes(text, "X") == value


@pytest.mark.parametrize("bad", ["lots", "-1GiB", "0", "12 parsecs"])
def test_bad_memory_size_names_the_variable(bad):
    with pytest.raises(DeviceSettingError, match="TORCHFERRY_DEVICE_MEMORY"):
        device_memory({"TORCHFERRY_DEVICE_MEMORY": bad}, default=1)


def test_memory_defaults_to_the_profile():
    assert device_memory({}, default=123) == 123


def test_fallback_mode_values():
    assert fallback_mode({}) == "warn"
    assert fallback_mode({"TORCHFERRY_FALLBACK": "ERROR"}) == "error"
    with pytest.raises(DeviceSettingError, match="warn, silent, error"):
        fallback_mode({"TORCHFERRY_FALLBACK": "loud"})


def test_numerics_default_comes_from_the_profile_and_the_variable_wins():
    assert numerics({}, "target") == "target"
    assert numerics({"TORCHFERRY_NUMERICS": "HOST"}, "target") == "host"
    with pytest.raises(DeviceSettingError, match=r"TORCHFERRY_NUMERICS='exact' is not a numerics mode. Valid values: target, host"):
        numerics({"TORCHFERRY_NUMERICS": "exact"}, "target")


def test_fallback_codes_follow_the_one_list_of_modes():
    # csrc/neuron.h: enum class FallbackMode { Warn = 0, Silent = 1, Error = 2 }
    assert [fallback_code(m) for m in FALLBACK_MODES] == [0, 1, 2] and FALLBACK_MODES == ("warn", "silent", "error")
    with pytest.raises(DeviceSettingError, match="Valid values: warn, silent, error"):
        fallback_code("loud")



def test_memory_caching_is_on_unless_turned_off():
    assert memory_caching({}) is True
    assert memory_caching({"TORCHFERRY_NO_MEMORY_CACHING": "0"}) is True
    assert memory_caching({"TORCHFERRY_NO_MEMORY_CACHING": "1"}) is False
    with pytest.raises(DeviceSettingError, match=r"TORCHFERRY_NO_MEMORY_CACHING='yes' is not 0 or 1"):
        memory_caching({"TORCHFERRY_NO_MEMORY_CACHING": "yes"})


def test_backward_thread_defaults_to_the_caller():
    assert backward_thread({}) == "caller"
    assert backward_thread({"TORCHFERRY_BACKWARD_THREAD": "Device"}) == "device"
    with pytest.raises(DeviceSettingError, match=r"'engine' is not a backward thread. Valid values: caller, device"):
        backward_thread({"TORCHFERRY_BACKWARD_THREAD": "engine"})
