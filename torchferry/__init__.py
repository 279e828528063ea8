"""torchferry: rehearse and prove a PyTorch migration to a new accelerator.

Importing this package touches no device and loads no C++ code. The built-in
``neuron`` device is switched on by :func:`torchferry.device.enable` or by
``TORCHFERRY_DEVICE=neuron`` (PyTorch's backend autoload entry point).

Package map (CONTRIBUTING.md shows the layers): ``device`` (the built-in device), ``harness`` (the
measuring core), the commands ``check``, ``coverage``, ``scan`` and ``plan``, ``workloads`` (built-in
workloads and the build() protocol), ``report`` (result models and renderers), ``cli`` (``ferry``'s
``main(argv, env)``, run by ``__main__``); beside them the shared foundation: ``errors`` (typed errors and
their slugs), ``status`` (the exit codes), ``env`` (the injectable terminal) and ``records`` (typed records
across processes).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
