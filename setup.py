"""Builds torchferry.device._C, the C++ core of the built-in `neuron` device.

It compiles against the torch that is already installed, so pip must run without
build isolation: `pip install --no-build-isolation -e .`.
"""

import os
import shutil
import subprocess
import sys
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
PROFILE_RUN = Path("tools/pgo_workload.py")


class ProfileGuidedBuild(BuildExtension):
    """Builds the device's core twice: instrumented, then with what one run of it recorded.

    The device's per-op path is cold in the caches at every op of a model (the interpreter and
    the CPU kernels run between two ops), so where its hot code lies and which branches fall
    through cost more than its instructions: the profile-guided build took about 1.5% off
    the tiny training step beside the CPU (docs/device/architecture.md, Performance, Session
    13). The run (`tools/pgo_workload.py`) takes seconds and needs only torch; it imports a
    staged copy of the package, and its eager-signature cache goes to the build directory.
    GCC only. TORCHFERRY_PGO=0 builds once, without it; if any step fails, the build says why
    and builds without it.
    """

    def build_extensions(self) -> None:
        plain_args = {ext.name: (list(ext.extra_compile_args), list(ext.extra_link_args)) for ext in self.extensions}
        reason = self._why_not_profile_guided()
        if reason is None:
            profile_dir = Path(self.build_temp).resolve() / "pgo"
            try:
                shutil.rmtree(profile_dir, ignore_errors=True)
                self._build([f"-fprofile-generate={profile_dir}", "-fprofile-update=atomic"],
                            [f"-fprofile-generate={profile_dir}"], plain_args)
                self._record_profile(profile_dir)
                self._build([f"-fprofile-use={profile_dir}", "-fprofile-correction", "-Wno-missing-profile"],
                            [], plain_args)
                print("torchferry: built the device's core with profile guidance", file=sys.stderr)
                return
            except Exception as err:  # noqa: BLE001 - any failure leaves a plain build, said why
                reason = f"the profile-guided build failed ({err})"
        print(f"torchferry: building the device's core without profile guidance: {reason}", file=sys.stderr)
        self._build([], [], plain_args)

    def _why_not_profile_guided(self) -> str | None:
        if os.environ.get("TORCHFERRY_PGO", "1").strip() == "0":
            return "TORCHFERRY_PGO=0"
        compiler = os.environ.get("CXX", "c++")
        try:
            version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as err:
            return f"could not ask {compiler} its version ({err})"
        return None if "Free Software Foundation" in version else f"{compiler} is not GCC"

    def _build(self, compile_args: list, link_args: list, plain_args: dict) -> None:
        """Build every extension with its own (plain) arguments plus these."""
        for ext in self.extensions:
            plain_compile, plain_link = plain_args[ext.name]
            ext.extra_compile_args = plain_compile + compile_args
            ext.extra_link_args = plain_link + link_args
        super().build_extensions()

    def _record_profile(self, profile_dir: Path) -> None:
        stage = profile_dir / "stage"
        shutil.copytree("torchferry", stage / "torchferry", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        for ext in self.extensions:
            built = Path(self.get_ext_fullpath(ext.name))
            shutil.copy2(built, stage / Path(*ext.name.split(".")[:-1]) / built.name)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")}
        env.update(PYTHONPATH=str(stage), TORCHFERRY_CACHE_DIR=str(profile_dir / "cache"),
                   TORCH_DEVICE_BACKEND_AUTOLOAD="0", OMP_NUM_THREADS="1")
        run = subprocess.run([sys.executable, str(PROFILE_RUN.resolve())], env=env, cwd=stage,
                             capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            raise RuntimeError(f"{PROFILE_RUN} exited with {run.returncode}: {run.stderr.strip()[-500:]}")
        if not any(profile_dir.rglob("*.gcda")):
            raise RuntimeError(f"{PROFILE_RUN} ran but wrote no profile under {profile_dir}")


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
    cmdclass={"build_ext": ProfileGuidedBuild.with_options(use_ninja=True)},
)
