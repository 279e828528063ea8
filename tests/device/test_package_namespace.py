"""`torchferry.device` declares its API in `__all__`: every function or class the device
package defines at its top is exported, and nothing else is."""

import types

import torchferry.device as device


def test_every_exported_name_exists():
    missing = [name for name in device.__all__ if not hasattr(device, name)]
    assert missing == []


def test_every_public_torchferry_function_or_class_is_exported():
    ours = {
        name for name, value in vars(device).items()
        if not name.startswith("_")
        and callable(value) and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith("torchferry.device")
    }
    assert ours == set(device.__all__) - {"DEVICE_NAME"}
