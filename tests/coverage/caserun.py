"""Coverage cases run in this process through the worker's own Case, for the suite and shrinking-rule tests."""

import warnings

from torchferry.report.coverage import Category

# correct on the built-in device: every check within tolerance; host fallbacks are the trn2 profile's predictions
RUNS_CORRECTLY = (Category.PASS, Category.FAIL_FALLBACK)


def run_case(suite: str, arch: str, modes: list[str], method: str = "torchferry", spec: str | None = None,
             case_out: list | None = None) -> dict:
    """Every mode of one architecture, as a worker process runs them: {mode: the row's JSON, as its parent reads it}
    (the Case into ``case_out``)."""
    from torchferry.coverage.job import CoverageJob
    from torchferry.coverage.worker import Case, row_of
    from torchferry.harness.worker import run_case as run

    job = CoverageJob(arch=arch, spec=spec or arch, suite=suite, method=method, modes=tuple(modes), target="neuron",
                      ref="cpu", seed=1337, threads=1, memory_gib=4)
    case = Case(job)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = run(lambda: (case.setup(), case.build()))
        assert built.ok, built.message
        rows = {}
        for mode in modes:
            case.start_row(mode)
            rows[mode] = row_of(run(case.run), case.row).to_dict()
    if case_out is not None:
        case_out.append(case)
    return rows
