"""Builds torchferry.device._C, the C++ core of the built-in `neuron` device.

It compiles against the torch that is already installed, so pip must run without
build isolation: `pip install --no-build-isolation -e .`.
"""

from pathlib import Path

from setuptools import setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
except ImportError as err:  # pragma: no cover - exercised only on a broken install
    raise SystemExit(
        "torchferry builds its C++ core against the installed torch, and torch is not importable.\n"
        "Install it first, then build without isolation:\n"
        "    pip install torch==2.13.0\n"
        "    pip install --no-build-isolation -e .\n"
    ) from err

CSRC = Path("torchferry/device/csrc")

setup(
    ext_modules=[
        CppExtension(
            name="torchferry.device._C",
            sources=sorted(str(p) for p in CSRC.glob("*.cpp")),
            # Kineto's headers, for the device's profiler (csrc/Profiler.cpp).
            include_dirs=[str(Path(include_paths()[0]) / "kineto")],
            # Hidden visibility: calls between the extension's own files are direct, not through
            # the PLT (every per-op call into the accounting, the allocator and the guard).
            # Only the module's init function is exported (PyMODINIT_FUNC marks it visible).
            # -fno-plt: calls into libtorch and c10 load their target from the GOT instead of
            # jumping through a PLT stub; no alignment padding at branch targets. The device's
            # per-op code is cold in the instruction cache at every op (the CPU kernel and the
            # interpreter run between), so each cache line it spans is a miss: the tiny training
            # step's simulated L1 instruction misses above the CPU's went from 17,300 to 8,100 a
            # step (callgrind; -Os gave 34,000). The wall clock did not resolve the change
            # (docs/device/architecture.md, Session 13).
            extra_compile_args=["-O2", "-fno-plt", "-falign-jumps=1", "-falign-loops=1", "-falign-labels=1",
                                "-fvisibility=hidden", "-fvisibility-inlines-hidden"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
