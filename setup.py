"""Builds torchferry.device._C, the C++ core of the built-in `neuron` device.

It compiles against the torch that is already installed, so pip must run without
build isolation: `pip install --no-build-isolation -e .`.

    pip install --no-build-isolation -e .                     # one build
    TORCHFERRY_PGO=1 pip install --no-build-isolation -e .    # profile-guided: two builds, ~1.5% faster small-op steps

pip shows a build's output only with `-v`, so the build says what it is doing (which pass, each file
compiled, the link, the profile run) on the terminal it runs in (`/dev/tty`, the controlling terminal,
which pip does not capture); without one (CI, a pipe) it says it on stderr, where `pip -v` shows it.
"""

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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


class Progress:
    """Build progress where the user sees it: the controlling terminal when there is one, else stderr."""

    def __init__(self) -> None:
        try:
            self.stream = open("/dev/tty", "w")  # noqa: SIM115 - held for the build
        except OSError:
            self.stream = sys.stderr
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        self.stream.write(f"torchferry build ({time.monotonic() - self.started:.0f} s): {text}\n")
        self.stream.flush()

    def compiling(self, label: str, objects: list[str]) -> Callable[[], None]:
        """Say each object file as ninja finishes it (polled once a second, from a thread); the returned function
        stops the watch once the compiler is done, saying the files it finished last."""
        stop = threading.Event()
        before = {o: _mtime(o) for o in objects}
        done: set[str] = set()

        def poll() -> None:
            for o in objects:
                if o not in done and _mtime(o) != before[o]:
                    done.add(o)
                    self.say(f"{label}: compiled {Path(o).stem}.cpp ({len(done)} of {len(objects)})")

        def watch() -> None:
            while not stop.wait(1.0):
                poll()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()

        def finish() -> None:
            stop.set()
            thread.join()
            poll()

        return finish


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class Build(BuildExtension):
    """Builds the device's core once; with TORCHFERRY_PGO=1 (GCC), twice: instrumented, then with what one run
    of it recorded.

    The device's per-op path is cold in the caches at every op of a model (the interpreter and the CPU kernels
    run between two ops), so where its hot code lies and which branches fall through cost more than its
    instructions: the profile-guided build took about 1.5% off the tiny training step beside the CPU
    (docs/device/architecture.md, Performance, Session 13), for a second build and the profile run. That is
    opt-in: the default install builds once. The run (`tools/pgo_workload.py`) takes seconds and needs only
    torch; it imports a staged copy of the package, and its eager-signature cache goes to the build directory.
    If any step of it fails, the build says why and builds once, without it.
    """

    def build_extensions(self) -> None:
        self.progress = Progress()
        plain_args = {ext.name: (list(ext.extra_compile_args), list(ext.extra_link_args)) for ext in self.extensions}
        reason = self._why_not_profile_guided()
        if reason is None:
            profile_dir = Path(self.build_temp).resolve() / "pgo"
            try:
                shutil.rmtree(profile_dir, ignore_errors=True)
                self._build("pass 1 of 2 (instrumented)", [f"-fprofile-generate={profile_dir}", "-fprofile-update=atomic"],
                            [f"-fprofile-generate={profile_dir}"], plain_args)
                self.progress.say(f"recording the profile ({PROFILE_RUN}, a few seconds)")
                self._record_profile(profile_dir)
                self._build("pass 2 of 2 (profile-guided)",
                            [f"-fprofile-use={profile_dir}", "-fprofile-correction", "-Wno-missing-profile"], [], plain_args)
                self.progress.say("built the device's core with profile guidance")
                return
            except Exception as err:  # noqa: BLE001 - any failure leaves a plain build, said why
                reason = f"the profile-guided build failed ({err})"
        self.progress.say(f"one build, without profile guidance ({reason})")
        self._build("compiling", [], [], plain_args)
        self.progress.say("built the device's core")

    def _why_not_profile_guided(self) -> str | None:
        value = os.environ.get("TORCHFERRY_PGO", "0").strip()
        if value != "1":
            return "TORCHFERRY_PGO=1 asks for it: two builds for ~1.5% faster small-op steps" if value in ("", "0") \
                else f"TORCHFERRY_PGO={value!r} is neither 0 nor 1"
        compiler = os.environ.get("CXX", "c++")
        try:
            version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as err:
            return f"could not ask {compiler} its version ({err})"
        return None if "Free Software Foundation" in version else f"{compiler} is not GCC"

    def _build(self, label: str, compile_args: list, link_args: list, plain_args: dict) -> None:
        """Build every extension with its own (plain) arguments plus these, saying each file as it is compiled."""
        for ext in self.extensions:
            plain_compile, plain_link = plain_args[ext.name]
            ext.extra_compile_args = plain_compile + compile_args
            ext.extra_link_args = plain_link + link_args
        objects = [o for ext in self.extensions
                   for o in self.compiler.object_filenames(ext.sources, output_dir=os.path.abspath(self.build_temp))]
        jobs = os.environ.get("MAX_JOBS") or f"ninja's default for {os.cpu_count()} cores"
        self.progress.say(f"{label}: {len(objects)} C++ files against torch's headers ({jobs} at a time), then the link")
        finish = self.progress.compiling(label, objects)
        try:
            super().build_extensions()
        finally:
            finish()
        self.progress.say(f"{label}: linked {', '.join(Path(self.get_ext_fullpath(e.name)).name for e in self.extensions)}")

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
            # -g0: no debug information (Python's own build flags ask for -g). The code is the same without it
            # (GCC's -g never changes code generation); writing the debug information of torch's templates took a
            # third of every file's compile time (Execution.cpp: 23 s with it, 15 s without, on 2 cores).
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
            extra_compile_args=["-O2", "-g0", "-fno-plt", "-falign-jumps=1", "-falign-loops=1", "-falign-labels=1",
                                "-fvisibility=hidden", "-fvisibility-inlines-hidden"],
        )
    ],
    cmdclass={"build_ext": Build.with_options(use_ninja=True)},
)
