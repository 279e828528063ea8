"""Code only a machine with CUDA runs (torchferry/scan/reach.py, issue 45 item 4).

A CUDA-only finding in a branch only CUDA takes is info, naming the branch; one only a CUDA flag
reaches is a warning; a device chosen only with CUDA whose other branch picks the CPU stays an
error; a test that does not ask about CUDA guards nothing. The scripts are written as users write
them; the device tests run them on the built-in device, which has no CUDA, to show the scan is
right about each: the guarded code never runs there, and a fallback does land on the CPU.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchferry.report.scan import Severity
from torchferry.scan.engine import RuleHit, analyse
from torchferry.scan.rules import RULES


def hits(code: str) -> list[RuleHit]:
    return analyse(textwrap.dedent(code), RULES, fix=False)[0]


def hit(code: str, rule_id: str, line: int) -> RuleHit:
    (found,) = [h for h in hits(code) if h.rule.id == rule_id and h.line == line]
    return found


# name -> (script, rule id and line of the CUDA-only finding, line of the branch that guards it). Each runs on the
# built-in device with `model` and `device` on it and `args` parsed without flags (test_guarded_code_runs_...).
GUARDED = {
    "is_available": ("""\
        import torch
        if torch.cuda.is_available():
            model.cuda()
        """, "TF001", 3, 2),
    "device type": ("""\
        import torch
        if device.type == "cuda":
            model.cuda()
        """, "TF001", 3, 2),
    "device name compared through a name": ("""\
        import torch
        kind = device.type
        if kind == "cuda":
            model.cuda()
        """, "TF001", 4, 3),
    "startswith": ("""\
        import torch
        if str(device).startswith("cuda"):
            model.cuda()
        """, "TF001", 3, 2),
    "is_cuda": ("""\
        import torch
        x = torch.ones(2, device=device)
        if x.is_cuda:
            torch.cuda.synchronize()
        """, "TF003", 4, 3),
    "device_count": ("""\
        import torch
        if torch.cuda.device_count() > 1:
            model = torch.nn.DataParallel(model).cuda()
        """, "TF001", 3, 2),
    "a name set from is_available": ("""\
        import torch
        use_cuda = torch.cuda.is_available()
        if use_cuda:
            model.cuda()
        """, "TF001", 4, 3),
    "a flag overwritten with is_available": ("""\
        import torch
        args.cuda = not args.no_cuda and torch.cuda.is_available()
        if args.cuda:
            model.cuda()
        """, "TF001", 4, 3),
    "elif": ("""\
        import torch
        if device.type == "mps":
            pass
        elif torch.cuda.is_available():
            model.cuda()
        """, "TF001", 5, 4),
    "nested": ("""\
        import torch
        if model.training:
            if device.type == "cuda":
                model.cuda()
        """, "TF001", 4, 3),
    "the else of a test for no CUDA": ("""\
        import torch
        if not torch.cuda.is_available():
            model.to(device)
        else:
            model.cuda()
        """, "TF001", 5, 2),
    "an if/elif/else chain that leaves CUDA last": ("""\
        import torch
        if not torch.cuda.is_available() and not torch.backends.mps.is_available():
            print("using the CPU or another accelerator")
        elif torch.backends.mps.is_available():
            model.to("mps")
        else:
            model.cuda()
        """, "TF001", 7, 2),
    "conditional expression": ("""\
        import torch
        model = model.cuda() if torch.cuda.is_available() else model.to(device)
        """, "TF001", 2, 2),
    "and": ("""\
        import torch
        torch.cuda.is_available() and model.cuda()
        """, "TF001", 2, 2),
    "early return": ("""\
        import torch
        def to_gpu(m):
            if not torch.cuda.is_available():
                return m
            return m.cuda()
        model = to_gpu(model)
        """, "TF001", 5, 3),
    "continue": ("""\
        import torch
        for m in [model]:
            if m.weight.device.type != "cuda":
                continue
            m.cuda()
        """, "TF001", 5, 3),
    "a backend compared with nccl": ("""\
        import torch
        if args.dist_backend == "nccl":
            torch.cuda.set_device(0)
        """, "TF003", 3, 2),
    "comprehension filter": ("""\
        import torch
        names = [torch.cuda.get_device_name(d) for d in [device] if d.type == "cuda"]
        """, "TF018", 2, 2),
}


@pytest.mark.parametrize("name", GUARDED)
def test_a_finding_only_cuda_reaches_is_info_naming_its_branch(name):
    code, rule_id, line, guard_line = GUARDED[name]
    found = hit(code, rule_id, line)
    assert found.severity is Severity.INFO and found.rule.severity is not Severity.INFO
    assert (found.guard.decided_by, found.guard.line, found.guard.fallback_line) == ("device", guard_line, None)
    assert f"(line {guard_line})" in found.message and "every other accelerator skips it" in found.message


@pytest.mark.parametrize("name", GUARDED)
def test_a_script_whose_cuda_code_is_guarded_has_no_error_left(name):
    assert [h.rule.id for h in hits(GUARDED[name][0]) if h.severity is Severity.ERROR] == []


# name -> (script, rule id and line of the device choice, line where the other branch picks the CPU). Each leaves
# `chosen` where the script would run (a device, a device string, a module, or a process-group backend).
FALLBACKS = {
    "conditional device": ("""\
        import torch
        chosen = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        """, "TF002", 2, 2),
    "if/else": ("""\
        import torch
        if torch.cuda.is_available():
            chosen = "cuda"
        else:
            chosen = "cpu"
        """, "TF002", 3, 5),
    "a CPU default overwritten": ("""\
        import torch
        chosen = "cpu"
        if torch.cuda.is_available():
            chosen = "cuda"
        """, "TF002", 4, 2),
    "flag and availability, then mps, then the CPU": ("""\
        import torch
        use_cuda = not args.no_cuda and torch.cuda.is_available()
        if use_cuda:
            chosen = torch.device("cuda")
        elif device.type == "mps":
            chosen = torch.device("mps")
        else:
            chosen = torch.device("cpu")
        """, "TF002", 4, 8),
    ".cpu()": ("""\
        import torch
        chosen = model.cuda() if torch.cuda.is_available() else model.cpu()
        """, "TF001", 2, 2),
    "gloo": ("""\
        import torch
        chosen = "nccl" if torch.cuda.is_available() else "gloo"
        """, "TF006", 2, 2),
}


@pytest.mark.parametrize("name", FALLBACKS)
def test_a_device_chosen_only_with_cuda_over_a_cpu_fallback_stays_an_error(name):
    code, rule_id, line, fallback_line = FALLBACKS[name]
    found = hit(code, rule_id, line)
    assert found.severity is Severity.ERROR
    assert found.guard.decided_by == "device" and found.guard.fallback_line == fallback_line
    assert "is chosen only where CUDA is" in found.message and f"(line {fallback_line})" in found.message
    assert ('"gloo", the CPU process-group backend' if rule_id == "TF006" else "picks the CPU") in found.message


@pytest.mark.parametrize(("code", "line"), [
    ("import torch\nif x:\n    model.cuda()\n", 3),  # a test that asks nothing about CUDA
    ("import torch\nif not torch.cuda.is_available():\n    model.cuda()\n", 3),  # the body runs without CUDA
    ("import torch\nif torch.cuda.is_available():\n    pass\nelse:\n    model.cuda()\n", 5),  # the non-CUDA path
    ('import torch\nif device.type != "cuda":\n    model.cuda()\n', 3),
    ("import torch\nif torch.cuda.is_available() and x:\n    pass\nelse:\n    model.cuda()\n", 5),  # x false suffices
    ("import torch\nif torch.cuda.is_available():\n    pass\nelif x:\n    model.cuda()\n", 5),  # an elif after CUDA
    # raise / exit stop the script on the other accelerator: not a guard
    ('import torch\nif not torch.cuda.is_available():\n    raise SystemExit("needs CUDA")\nmodel.cuda()\n', 4),
    ("import torch\nDEBUG = False\nif DEBUG:\n    model.cuda()\n", 4),  # dead everywhere, not "only with CUDA"
    # an attribute may be set elsewhere too: a constant assigned here decides nothing
    ("import torch\ndef f(self):\n    if self.dequantize:\n        return\n    self.model.cuda()\n"
     "def g(self):\n    self.dequantize = True\n", 5),
    ("import torch\nif torch.version.cuda:\n    model.cuda()\n", 3),  # how torch was built, not this machine
    # a flag this source also sets (mp.spawn's process index) is not left at its default
    ("import torch\ndef worker(gpu, args):\n    args.gpu = gpu\n    if args.gpu is not None:\n        model.cuda()\n", 5),
    ("import torch\nuse_cuda = torch.cuda.is_available()\ndef f(use_cuda):\n    if use_cuda:\n        model.cuda()\n",
     5),  # a parameter of the same name may be anything
])
def test_a_test_that_does_not_keep_cuda_code_off_other_machines_leaves_it_an_error(code, line):
    found = hit(code, "TF001", line)
    assert found.severity is Severity.ERROR and found.guard is None and found.message == found.rule.summary


@pytest.mark.parametrize(("code", "rule_id", "line", "flags", "options"), [
    ('import argparse, torch\np = argparse.ArgumentParser()\np.add_argument("--cuda", action="store_true")\n'
     "args = p.parse_args()\nif args.cuda:\n    model.cuda()\n", "TF001", 6, ("args.cuda",), ("--cuda",)),
    ("import torch\nif opt.use_gpu:\n    model.cuda()\n", "TF001", 3, ("opt.use_gpu",), ()),
    # without the flag every machine runs on the CPU, CUDA's too: not a silent fallback
    ('import torch\ndevice = torch.device("cuda" if args.cuda else "cpu")\n', "TF002", 2, ("args.cuda",), ()),
    ('import torch\nbackend = "nccl" if args.gpu else "gloo"\n', "TF006", 2, ("args.gpu",), ()),
])
def test_code_only_a_cuda_flag_reaches_is_a_warning_naming_the_flag(code, rule_id, line, flags, options):
    found = hit(code, rule_id, line)
    assert found.severity is Severity.WARNING and found.rule.severity is Severity.ERROR
    assert (found.guard.decided_by, found.guard.flags, found.guard.options) == ("flag", flags, options)
    assert f"Only a run given `{(options or flags)[0]}` reaches it" in found.message


@pytest.mark.parametrize("default", ['default=True', 'action="store_false"', 'type=int, required=True'])
def test_a_flag_given_by_default_guards_nothing(default):
    code = (f'import argparse, torch\np = argparse.ArgumentParser()\np.add_argument("--cuda", {default})\n'
            "args = p.parse_args()\nif args.cuda:\n    model.cuda()\n")
    assert hit(code, "TF001", 6).severity is Severity.ERROR


def test_a_flag_guard_inside_a_device_guard_is_the_device_guard():
    code = "import torch\nif torch.cuda.is_available():\n    if args.cuda:\n        model.cuda()\n"
    found = hit(code, "TF001", 4)
    assert found.severity is Severity.INFO and (found.guard.decided_by, found.guard.line) == ("device", 2)


@pytest.mark.parametrize(("code", "line"), [
    ('import torch\nchosen = "cuda" if torch.cuda.is_available() else ("neuron" if hasattr(torch, "neuron") else "cpu")\n',
     2),
    ("import torch\nif torch.cuda.is_available():\n    chosen = 'cuda'\nelif torch.accelerator.is_available():\n"
     "    chosen = torch.accelerator.current_accelerator()\nelse:\n    chosen = 'cpu'\n", 3),
])
def test_an_other_branch_that_can_choose_the_target_is_not_a_cpu_fallback(code, line):
    """Its "cpu" is a machine with no accelerator: on Trainium the other branch picks the target. It was an error
    saying that every other accelerator silently runs on the CPU (a condition on a Trainium-aware script)."""
    found = hit(code, "TF002", line)
    assert found.severity is Severity.INFO and found.guard.fallback_line is None, found.message
    assert "chosen only where CUDA is" not in found.message


def test_a_branch_that_compares_a_chosen_device_is_not_a_cpu_fallback():
    # the CPU was chosen (and reported) on line 2; line 4 only refines a CUDA choice
    code = ('import torch\ndevice = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")\n'
            'if "cuda" in str(device) and n > 1:\n    device = torch.device("cuda:1")\n')
    assert hit(code, "TF002", 2).severity is Severity.ERROR
    assert hit(code, "TF002", 4).severity is Severity.INFO


@pytest.mark.parametrize(("code", "rule_id"), [
    ('import torch\nif device.type == "cuda":\n    pass\n', "TF002"),
    ('import torch\nok = "cuda" in str(device)\n', "TF002"),
    ('import torch\nif device.type not in ("cuda", "xpu"):\n    pass\n', "TF002"),
    ('import torch\nif args.dist_backend == "nccl":\n    pass\n', "TF006"),
])
def test_a_compared_cuda_string_is_info(code, rule_id):
    found = hit(code, rule_id, 2)
    assert found.severity is Severity.INFO and "is compared, not passed to torch" in found.message


def test_guarded_and_fallback_findings_keep_their_safe_fixes():
    """The branch still runs on CUDA, where the rewrite is the same code; the fallback's fix and the guard's are one."""
    code = 'import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
    _, fixed = analyse(code, RULES, fix=True)
    assert fixed == ('import torch\ndevice = torch.device(getattr(torch.accelerator.current_accelerator(), "type", '
                     '"cpu") if torch.accelerator.is_available() else "cpu")\n')
    assert hit("import torch\nif torch.cuda.is_available():\n    model.cuda()\n", "TF001", 3).hit.fix is not None


@pytest.fixture(scope="module")
def on_device(tmp_path_factory) -> dict[str, dict]:
    """Each script above run once on the built-in device (no CUDA) in one fresh interpreter: name -> what happened.

    A guarded script reports its error, if any; a fallback reports where `chosen` puts the work, and for a
    process-group backend whether a collective of a device tensor works.
    """
    store = tmp_path_factory.mktemp("pg") / "store"
    cases = {name: textwrap.dedent(code) for name, (code, *_) in {**GUARDED, **FALLBACKS}.items()}
    runner = textwrap.dedent(f"""
        import json, types, warnings
        import torchferry.device
        torchferry.device.enable()
        import torch
        import torch.distributed as dist
        warnings.simplefilter("ignore")
        out = {{}}
        for name, code in json.loads({json.dumps(json.dumps(cases))}).items():
            device = torch.accelerator.current_accelerator()
            scope = {{"model": torch.nn.Linear(2, 2).to(device), "device": device,
                      "args": types.SimpleNamespace(cuda=False, no_cuda=False, dist_backend="neuron")}}
            try:
                exec(code, scope)
                result = {{"error": None}}
            except Exception as exc:
                result = {{"error": f"{{type(exc).__name__}}: {{exc}}"}}
            chosen = scope.get("chosen")
            if isinstance(chosen, torch.nn.Module):
                result["runs_on"] = chosen.weight.device.type
            elif chosen in ("nccl", "gloo"):
                dist.init_process_group(chosen, init_method="file://{store}", rank=0, world_size=1)
                try:
                    dist.all_reduce(torch.ones(1, device=device))
                    result["collective"] = "works"
                except RuntimeError as exc:
                    result["collective"] = str(exc)
                dist.destroy_process_group()
            elif chosen is not None:
                result["runs_on"] = torch.empty(0, device=chosen).device.type
            result["accelerator"] = device.type
            out[name] = result
        print(json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHFERRY_")}
    proc = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", GUARDED)
def test_guarded_code_runs_unchanged_on_an_accelerator_without_cuda(name, on_device):
    assert on_device[name] == {"error": None, "accelerator": "neuron"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", FALLBACKS)
def test_a_fallback_the_scan_reports_does_leave_the_accelerator(name, on_device):
    result = on_device[name]
    assert result["error"] is None and result["accelerator"] == "neuron"
    if "collective" in result:
        assert "No backend type associated with device type neuron" in result["collective"]
    else:
        assert result["runs_on"] == "cpu"
