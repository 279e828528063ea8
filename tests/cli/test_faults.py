"""`ferry check` under faults from outside: stop signals sent to a real process, a second run into a folder that a
real process holds, a real full filesystem (a small tmpfs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkrun import FAST, FIXTURES, run_check

from torchferry.harness.outlock import LOCK_NAME
from torchferry.status import ExitStatus

ROOT = Path(__file__).resolve().parents[2]
HANG = f"{FIXTURES / 'failing.py'}:hang_target"  # the target sleeps in its first forward, until it is stopped


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "TORCHFERRY_CHECK_WARMUP": "0"}


def start_check(output: Path, *args: str) -> subprocess.Popen:
    """A real `ferry check` process (its own session, as a job a shell or CI starts), output to files beside it."""
    output.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "torchferry", "check", "--target", "cpu", *args, "-o", str(output)],
                            stdout=open(output.parent / f"{output.name}.out", "w"),
                            stderr=open(output.parent / f"{output.name}.err", "w"), env=env(), start_new_session=True)


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"ferry check ended early ({proc.returncode}); stderr: {path.read_text()[-2000:]}"
        time.sleep(0.5)
    pytest.fail(f"{text!r} never appeared in {path}")


def workers_of(output: Path) -> list[int]:
    """Pids of live processes whose command line names a job file of this output folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(output / "work") in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.slow  # a real run to its target phase, per signal
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_stops_the_workers_and_writes_the_report_with_the_phase_cut(tmp_path, sig):
    output = tmp_path / "report"
    proc = start_check(output, "-w", HANG, "--timeout", "600", *FAST[:-1])  # progress on: we wait for the target
    try:
        wait_for_text(tmp_path / "report.err", "target cpu: starting", proc)
        wait_for_text(output / "work" / "ferry.log", "target cpu: starting", proc)
        time.sleep(1)
        assert workers_of(output), "the target worker should be running"
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == ExitStatus.INTERRUPTED, (tmp_path / "report.err").read_text()[-2000:]
    report = json.loads((output / "report.json").read_text())
    assert report["failure"]["kind"] == "interrupted" and report["failure"]["phase"] == "target"
    assert f"stopped by {sig.name}" in report["failure"]["message"]
    assert report["verdict"] == "stopped" and report["timing"]["ref"]["time_to_n_s"] > 0  # the reference is kept
    assert (output / "report.html").is_file()
    assert "stopped: interrupted" in (tmp_path / "report.out").read_text()
    assert f"interrupted by {sig.name}" in (tmp_path / "report.err").read_text()
    time.sleep(1)
    assert workers_of(output) == []  # no worker outlives the run
    assert not (output / LOCK_NAME).exists()  # the lock is released


def test_a_second_run_into_a_folder_a_live_run_holds_is_refused_naming_the_owner(tmp_path):
    output = tmp_path / "report"
    output.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from torchferry.harness.outlock import "
         "output_lock\nwith output_lock(Path(sys.argv[1]), 'ferry check -o shared'):\n print('held', flush=True); "
         "time.sleep(600)", str(output)], stdout=subprocess.PIPE, text=True, env=env())
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_check(["--target", "cpu", "-w", "mlp", *FAST], output)
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_status == ExitStatus.OUTPUT_ERROR, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert str(output) in message and f"pid {holder.pid}" in message and "ferry check -o shared" in message
    assert not (output / "work").exists()  # nothing of the live run's was touched


# the same faults with a script (`-- COMMAND`): one lifecycle, the same answers
SCRIPT = ("import torch\nm = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
          "for _ in range(2):\n    opt.zero_grad(); m(torch.ones(3, 2)).sum().backward(); opt.step()\n")
SOURCES = {"workload": ["-w", "mlp", "--mode", "forward", *FAST], "script": ["--", "python", "train.py"]}


@pytest.mark.parametrize("source", ["workload", pytest.param("script", marks=pytest.mark.slow)])  # a script runs thrice
def test_a_stale_lock_left_by_a_dead_run_is_taken_over_with_a_note(tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    output = tmp_path / "report"
    output.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (output / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": "here", "command": "ferry check -o old",
                                                "since": "2026-01-01T00:00:00+00:00"}))
    result = run_check(["--target", "cpu", *SOURCES[source]], output)
    assert result.exit_status == ExitStatus.SUCCESS, result.stderr
    note = [p for p in result.report["progress"] if "took over the lock" in p]
    assert note and f"pid {dead.pid}" in note[0] and "no longer running" in note[0]
    assert not (output / LOCK_NAME).exists()


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, filled but for 64 KiB: the reference's tensors do not fit."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run as root (CI's container is) to test a full filesystem")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); a full filesystem cannot be made")
    try:
        (mount / "filler").write_bytes(b"\0" * (1024 - 64) * 1024)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_run_as_an_output_error_and_the_summary_is_printed(full_disk):
    result = run_check(["--target", "cpu", "-w", "mlp", *FAST], full_disk / "report")
    assert result.exit_status == ExitStatus.OUTPUT_ERROR, result.stderr
    assert "stopped: output" in result.stdout and "verdict: GO" not in result.stdout  # the summary, not a pass
    assert "is full" in result.stderr
    report = result.report  # written once this run's scratch tensors were removed to make room
    assert report is not None, result.stderr
    assert report["verdict"] == "stopped" and report["failure"]["kind"] == "output"
    assert any("removed this run's scratch files" in p for p in report["progress"])


def test_when_no_report_fits_the_terminal_still_has_the_summary(full_disk):
    (full_disk / "filler2").write_bytes(b"\0" * 60 * 1024)  # not even report.json fits now
    result = run_check(["--target", "cpu", "-w", "mlp", *FAST], full_disk / "report")
    assert result.exit_status == ExitStatus.OUTPUT_ERROR, result.stderr
    assert result.stdout.startswith("ferry check:") and "stopped: output" in result.stdout
    assert "report.json could not be written" in result.stderr


@pytest.mark.slow  # a run of a script
def test_a_full_disk_stops_a_script_check_as_an_output_error_too(full_disk, monkeypatch):
    (full_disk / "filler2").write_bytes(b"\0" * 56 * 1024)  # the recorders' record does not fit either
    monkeypatch.chdir(full_disk.parent)
    (full_disk.parent / "train.py").write_text(SCRIPT)
    result = run_check(["--target", "cpu", "--", "python", "train.py"], full_disk / "report")
    assert result.exit_status == ExitStatus.OUTPUT_ERROR, result.stderr
    assert "is full" in result.stderr and "stopped: output" in result.stdout
