"""Each check result's worker half, run in-process on a ModelCase: parity's determinism check and resume."""

from torchferry.check import resume
from torchferry.check.parity import Determinism, compare_runs
from torchferry.harness.modes import Mode


def test_two_fresh_reference_runs_agree_bitwise_and_a_changed_loss_is_named(mlp_case):
    case = mlp_case(Mode.TRAIN)
    first, _ = case.run(case.fresh())
    again, _ = case.run(case.fresh())
    assert compare_runs(first, again, case.probe(), case.probe()) == Determinism(deterministic=True)
    first.losses[-1] += 1e-3  # one loss off: the runs differ, and the check says where first
    assert compare_runs(first, again, case.probe(), case.probe()).first_difference == "loss curve"


def test_a_run_resumed_from_its_checkpoint_ends_with_the_uninterrupted_losses(tmp_path, mlp_case):
    case = mlp_case(Mode.TRAIN, steps=4)
    saved = []

    def after_step(index: int, _seconds: float, model, opt) -> None:
        if index + 1 == 2:
            resume.save(case, case.bare(model), opt, index + 1, tmp_path)
            saved.append(index + 1)

    uninterrupted, _ = case.run(case.fresh(), after_step=after_step)
    resumed = resume.capture(case, tmp_path)
    assert saved == [2] and resume.checkpoint(tmp_path).is_file()
    assert resumed.step == 2 and resumed.losses == uninterrupted.losses[2:]
