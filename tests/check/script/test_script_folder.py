"""The script's folder between runs (check/script/folder.py): each run starts from the files the user had, what it
wrote is set aside under work/, and the target's files end where the script wrote them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from torchferry.check.exit import CheckpointWrite
from torchferry.check.script.folder import ScriptFolder
from torchferry.check.script.record import ScriptRecord


def _record(*paths: Path, kept: tuple[Path, ...] = ()) -> ScriptRecord:
    return ScriptRecord(pid=1, rank=None, local_rank=None, world_size=None, argv=["train.py"], started_s=0.0, seed=None,
                        noise=False, kept_files=[str(k) for k in kept],
                        checkpoints=[CheckpointWrite(path=str(p), how="torch.save", step=3, at_s=0.0) for p in paths])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_run_s_checkpoint_is_set_aside_so_the_next_run_does_not_resume_from_it(tmp_path):
    """The preemptible-job pattern (`if os.path.exists("ckpt.pt"): resume`) resumed the target from the reference's
    checkpoint: after the reference, the folder must be as the user had it."""
    cwd, work = tmp_path / "proj", tmp_path / "proj" / "rep" / "work"
    _write(cwd / "train.py", "script")
    work.mkdir(parents=True)
    folder = ScriptFolder(cwd, work)
    ckpt = _write(cwd / "ckpt.pt", "ref")
    moved = folder.set_aside("ref", [_record(ckpt)])
    assert not ckpt.exists() and (cwd / "train.py").read_text() == "script"
    assert moved[ckpt.resolve()].read_text() == "ref" and str(moved[ckpt.resolve()]).startswith(str(work / "ref-files"))


def test_a_folder_the_run_created_goes_aside_whole_and_comes_back_whole(tmp_path):
    """Hugging Face's example scripts refuse an output folder that is not empty: the whole folder the run created (its
    logs and tokenizer files beside the checkpoints) goes, and the target's comes back after the last run."""
    cwd, work = tmp_path / "proj", tmp_path / "work"
    cwd.mkdir()
    work.mkdir()
    folder = ScriptFolder(cwd, work)
    out = cwd / "out"
    weights = _write(out / "checkpoint-2" / "model.safetensors", "target")
    _write(out / "checkpoint-2" / "config.json", "{}")
    _write(out / "trainer_state.json", "{}")
    folder.set_aside("target", [_record(weights)])
    assert not out.exists()
    assert folder.where("target", str(weights)) == str(work / "target-files" / str(weights).lstrip("/"))
    assert Path(folder.where("target", str(weights))).read_text() == "target"
    _write(out / "checkpoint-2" / "model.safetensors", "noise")  # the next run writes the same paths
    folder.set_aside("noise", [_record(out / "checkpoint-2" / "model.safetensors")])
    assert folder.put_back("target") == [str(out.resolve())]
    assert weights.read_text() == "target" and (out / "trainer_state.json").is_file()
    assert folder.put_back("target") == []  # once only (stop() after files_left)


def test_a_file_of_the_user_s_the_run_overwrote_is_put_back_for_the_next_run(tmp_path):
    cwd, work = tmp_path / "proj", tmp_path / "work"
    users = _write(cwd / "model.pt", "the user's")
    old = time.time() - 3600
    os.utime(users, (old, old))
    original = _write(work / "overwritten" / str(users.resolve()).lstrip("/"), "the user's")
    os.utime(original, (old, old))
    folder = ScriptFolder(cwd, work)
    users.write_text("ref")  # the recorder copied the original first; then the script wrote over it
    folder.set_aside("ref", [_record(users, kept=(users.resolve(),))])
    assert users.read_text() == "the user's" and users.stat().st_mtime < time.time() - 3000  # still older: the user's
    assert (work / "ref-files" / str(users.resolve()).lstrip("/")).read_text() == "ref"


def test_the_check_s_own_output_folder_is_never_set_aside(tmp_path):
    """A script that writes to TORCHFERRY_OUTPUT (work/<role>/files) keeps its runs apart already."""
    cwd = tmp_path
    work = cwd / "rep" / "work"
    own = _write(work / "ref" / "files" / "model.pt", "ref")
    folder = ScriptFolder(cwd, work)
    assert folder.written([_record(own)]) == [] and folder.set_aside("ref", [_record(own)]) == {} and own.is_file()
