"""torchferry: rehearse and prove a PyTorch migration to a new accelerator.

Importing this package touches no device and loads no C++ code. The built-in
``neuron`` device is switched on by :func:`torchferry.device.enable` or by
``TORCHFERRY_DEVICE=neuron`` (PyTorch's backend autoload entry point).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
