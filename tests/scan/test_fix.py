"""`--fix` rewrites only what is safe, keeps formatting and comments, and never touches what it cannot parse."""

import libcst as cst
import pytest

from torchferry.scan.rewrite import ACCELERATOR, BACKEND, DEVICE_TYPE
from torchferry.status import ExitStatus

SAFE_FIXES = [
    ("import torch\nx = t.cuda()\n", f"import torch\nx = t.to({ACCELERATOR})\n"),
    ("import torch\nx = t.cuda(non_blocking=True)\n", f"import torch\nx = t.to({ACCELERATOR}, non_blocking=True)\n"),
    ('import torch\nx = torch.zeros(2, device="cuda")\n', f"import torch\nx = torch.zeros(2, device={DEVICE_TYPE})\n"),
    ('import torch\nd = torch.device("cuda")\n', f"import torch\nd = torch.device({DEVICE_TYPE})\n"),
    ('import torch\nx = t.to("cuda")\n', f"import torch\nx = t.to({DEVICE_TYPE})\n"),
    ("import torch\nn = torch.cuda.device_count()\n", "import torch\nn = torch.accelerator.device_count()\n"),
    ("import torch\ni = torch.cuda.current_device()\n", "import torch\ni = torch.accelerator.current_device_index()\n"),
    ("import torch\ntorch.cuda.set_device(r)\n", "import torch\ntorch.accelerator.set_device_index(r)\n"),
    ("import torch\nok = torch.cuda.is_available()\n", "import torch\nok = torch.accelerator.is_available()\n"),
    # positionals become keywords: torch.amp.autocast orders its parameters differently
    ("import torch\nwith torch.cuda.amp.autocast(True, torch.bfloat16):\n    pass\n",
     f"import torch\nwith torch.amp.autocast(device_type={DEVICE_TYPE}, enabled=True, dtype=torch.bfloat16):\n    pass\n"),
    ("import torch\ns = torch.cuda.amp.GradScaler(2.0**10)\n", f"import torch\ns = torch.amp.GradScaler({DEVICE_TYPE}, 2.0**10)\n"),
    ('import torch.distributed as dist\ndist.init_process_group(backend="nccl")\n',
     f"import torch.distributed as dist\nimport torch\n\ndist.init_process_group(backend={BACKEND})\n"),
    ("import torch\nm.load_state_dict(torch.load(p))\n", 'import torch\nm.load_state_dict(torch.load(p, map_location="cpu"))\n'),
]

NOT_FIXED = [
    "import torch\nx = t.cuda(1)\n",  # a device chosen by number
    'import torch\ndevice = "cuda"\n',  # a stored string may be compared later
    'import torch\nif d.type == "cuda":\n    pass\n',
    'import torch\nx = t.to("cuda:1")\n',
    "import torch\nstate = torch.load(p)\n",  # the caller may rely on CUDA tensors
    "import torch\ntorch.cuda.empty_cache()\n",  # quietly a no-op off CUDA today; the rewrite would raise
    "import torch\ne = torch.cuda.Event(True)\n",  # torch.Event's first parameter is the device
    "import torch\ntorch.backends.cudnn.benchmark = True\n",
    'import torch\nm = torch.compile(m, mode="max-autotune")\n',
    "import torch\ntorch.save(model, 'm.pt')\n",  # the loader would have to change too
    "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x[x > 0]\n",
    "for b in loader:\n    loss = model(b)\n    loss.backward()\n    print(loss.item())\n",
    "import torch\nm = torch.compile(model)\nx = tok(texts, padding=True)\n",  # more padding changes results
    "import torch\ns = torch.jit.trace(m, x)\n",  # a ScriptModule is not an OptimizedModule
    "import torch\ns = torch.amp.GradScaler('cpu')\nt = torch.bfloat16\n",  # skipped inf steps would differ
    'import torch\nm = torch.compile(model, mode="reduce-overhead")\n',
]


@pytest.mark.parametrize(("before", "after"), SAFE_FIXES, ids=[b.splitlines()[1][:40] for b, _ in SAFE_FIXES])
def test_safe_fix_rewrites_to_the_device_neutral_spelling(before, after, fixed):
    assert fixed(before) == after


@pytest.mark.parametrize("code", NOT_FIXED, ids=[c.splitlines()[1][:40] for c in NOT_FIXED])
def test_unsafe_rewrite_is_reported_but_not_made(code, fixed):
    assert fixed(code) == code


def test_fix_adds_import_torch_when_only_a_submodule_name_is_imported(fixed):
    out = fixed("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n")
    assert "import torch\n" in out and f"with torch.amp.autocast(device_type={DEVICE_TYPE}):" in out


def test_nested_fixes_compose(fixed):
    out = fixed("import torch\nwith torch.cuda.amp.autocast(enabled=torch.cuda.is_available()):\n    pass\n")
    assert f"torch.amp.autocast(device_type={DEVICE_TYPE}, enabled=torch.accelerator.is_available())" in out


def test_fixed_code_parses_and_keeps_comments_and_layout(fixed):
    before = (
        "import torch  # the framework\n"
        "\n\n"
        "def step(model,   batch):  # odd spacing stays\n"
        "    # move to the GPU\n"
        "    batch = batch.cuda(  non_blocking=True )\n"
        "    torch.cuda.synchronize()  # wait for the copy\n"
        "    return model(batch)\n"
    )
    after = fixed(before)
    cst.parse_module(after)  # raises if the rewrite broke the syntax
    for kept in ("# the framework", "def step(model,   batch):  # odd spacing stays", "# move to the GPU",
                 "torch.accelerator.synchronize()  # wait for the copy"):
        assert kept in after
    assert after.count("\n") == before.count("\n")


def test_unparseable_file_is_reported_and_left_unchanged(tmp_path, ferry):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n    x.cuda()\n")
    good = tmp_path / "good.py"
    good.write_text("import torch\ntorch.cuda.synchronize()\n")
    result = ferry("scan", str(tmp_path), "--fix")
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT  # the bad file's hazards are unknown
    assert f"{bad}: cannot parse" in result.stderr
    assert bad.read_text() == "def broken(:\n    x.cuda()\n"
    assert good.read_text() == "import torch\ntorch.accelerator.synchronize()\n"


def test_a_file_only_a_newer_python_parses_is_reported_not_scanned_never_clean(tmp_path, ferry):
    """The rules read this Python's tree: a source in a newer Python's syntax (PEP 701's nested quotes, 3.12) that
    libcst accepts is a file whose hazards are unknown, named with the Python that rejected it."""
    import sys

    newer = tmp_path / "newer.py"
    newer.write_text('import torch\nx = t.cuda()\nname = f"{"a"}"\n')
    result = ferry("scan", str(newer))
    if sys.version_info >= (3, 12):
        pytest.skip("this Python parses PEP 701 f-strings: the file is scanned, which the other tests cover")
    assert result.exit_status == ExitStatus.NEGATIVE_RESULT
    assert f"{newer}: cannot parse" in result.stderr and f"Python 3.{sys.version_info.minor}'s parser rejects it" in result.stderr
    assert "run ferry scan under the Python this code targets" in result.stderr


def test_diff_shows_the_rewrite_without_writing(tmp_path, ferry, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    result = ferry("scan", "m.py", "--diff")
    assert "--- a/m.py\n+++ b/m.py\n" in result.stdout
    assert "-torch.cuda.synchronize()\n+torch.accelerator.synchronize()\n" in result.stdout
    assert (tmp_path / "m.py").read_text() == "import torch\ntorch.cuda.synchronize()\n"


def test_fix_with_diff_prints_the_diff_before_the_report_and_writes(tmp_path, ferry):
    path = tmp_path / "m.py"
    path.write_text("import torch\nx = t.cuda()\n")
    result = ferry("scan", str(path), "--fix", "--diff")
    assert result.stdout.index("+x = t.to(") < result.stdout.index("TF001")
    assert "[fixed]" in result.stdout
    assert path.read_text() == f"import torch\nx = t.to({ACCELERATOR})\n"
    assert result.exit_status == ExitStatus.SUCCESS  # the only error was fixed


def test_fix_keeps_the_file_encoding_and_crlf_newlines(tmp_path, ferry):
    path = tmp_path / "m.py"
    path.write_bytes("# -*- coding: latin-1 -*-\r\nimport torch\r\nname = 'café'\r\ntorch.cuda.synchronize()\r\n".encode("latin-1"))
    ferry("scan", str(path), "--fix")
    assert path.read_bytes() == (
        "# -*- coding: latin-1 -*-\r\nimport torch\r\nname = 'café'\r\ntorch.accelerator.synchronize()\r\n"
    ).encode("latin-1")
