import json
from pathlib import Path

import pytest
from ferryrun import ferry

PLUGIN = str(Path(__file__).with_name("plugins.py"))


@pytest.fixture(scope="session")
def run_ferry():
    return ferry


@pytest.fixture(scope="session")
def plugin():
    return PLUGIN


@pytest.fixture(scope="session")
def planted_sweep(tmp_path_factory):
    """One forward-only sweep: two real architectures (bloom has a host fallback the trn2 profile predicts:
    aten::baddbmm), the planted failing one and the hanging one."""
    out = tmp_path_factory.mktemp("coverage")
    code, stdout, stderr = ferry("coverage", "llama", "bloom", "ferry-planted", "ferry-hang", "--modes", "forward",
                                 "--plugin", PLUGIN, "--timeout", "8", "--jobs", "2", "-o", str(out / "run"),
                                 "--target", "neuron", "--write-baseline", str(out / "baseline.json"))
    doc = json.loads((out / "run" / "coverage.json").read_text())
    return {"out": out, "code": code, "stdout": stdout, "stderr": stderr, "doc": doc,
            "rows": {r["arch"]: r for r in doc["rows"]}}
