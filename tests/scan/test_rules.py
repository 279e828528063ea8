"""Each rule finds its hazard once (positive case) and stays quiet on the device-neutral spelling (negative)."""

import pytest

from torchferry.report.scan import Severity
from torchferry.scan.rules import RULES

# rule id -> (hazard, the device-neutral code it should be written as)
CASES = {
    "TF001": ("import torch\nx = torch.ones(2).cuda()\n",
              "import torch\nx = torch.ones(2).to(torch.accelerator.current_accelerator())\n"),
    "TF002": ('import torch\nx = torch.ones(2, device="cuda:1")\n',
              'import torch\nx = torch.ones(2, device="cpu")\n'),
    "TF003": ("import torch\ntorch.cuda.synchronize()\n",
              "import torch\ntorch.accelerator.synchronize()\n"),
    "TF004": ("import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
              'import torch\nwith torch.amp.autocast(device_type="cpu"):\n    pass\n'),
    "TF005": ("from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
              "from torch.amp import GradScaler\nscaler = GradScaler('cpu')\n"),
    "TF006": ('import torch.distributed as dist\ndist.init_process_group("nccl")\n',
              'import torch.distributed as dist\ndist.init_process_group("gloo")\n'),
    "TF007": ('import torch\nm = torch.compile(model, mode="max-autotune-no-cudagraphs")\n',
              'import torch\nm = torch.compile(model, mode="default")\n'),
    "TF008": ("import torch\nm = torch.compile(model, dynamic=True)\n",
              "import torch\nm = torch.compile(model, dynamic=False)\n"),
    "TF009": ("from flash_attn import flash_attn_func\n",
              "from torch.nn.functional import scaled_dot_product_attention\n"),
    "TF010": ("import triton\n@triton.jit\ndef kernel(x_ptr):\n    pass\n",
              "import functools\n@functools.cache\ndef kernel(x):\n    pass\n"),
    "TF011": ("from torch.utils.cpp_extension import CUDAExtension\next = CUDAExtension('k', ['k.cu'])\n",
              "from torch.utils.cpp_extension import CppExtension\next = CppExtension('k', ['k.cpp'])\n"),
    "TF012": ("import torch\ntorch.backends.cudnn.deterministic = True\n",
              "import torch\ntorch.use_deterministic_algorithms(True)\n"),
    "TF013": ("import torch\nprint(torch.cuda.max_memory_allocated())\n",
              "import torch\nprint(torch.accelerator.max_memory_allocated())\n"),
    "TF014": ("import torch\nif x.is_cuda:\n    pass\n",
              'import torch\nif x.device.type != "cpu":\n    pass\n'),
    "TF015": ('from torch.utils.data import DataLoader\nDataLoader(ds, pin_memory=True, pin_memory_device="xpu")\n',
              "from torch.utils.data import DataLoader\nDataLoader(ds, pin_memory=True)\n"),
    "TF016": ("import torch\ns = torch.cuda.Stream()\n",
              "import torch\ns = torch.Stream()\n"),
    "TF017": ("import torch\nstate = torch.load('ckpt.pt')\n",
              "import torch\nstate = torch.load('ckpt.pt', map_location='cpu')\n"),
    "TF018": ("import torch\ntorch.cuda.manual_seed_all(0)\n",
              "import torch\ntorch.manual_seed(0)\n"),
    "TF019": ("import torch\ntorch.save(model, 'm.pt')\n",
              "import torch\ntorch.save(model.state_dict(), 'm.pt')\n"),
    # the same boolean mask: in a forward it runs every step on the device; in a Dataset, on the host anyway
    "TF020": ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x[x > 0]\n",
              "import torch\nclass D(torch.utils.data.Dataset):\n    def __getitem__(self, i):\n"
              "        x = self.data[i]\n        return x[x > 0]\n"),
    # the same read: every step inside the loop, once after it
    "TF021": ("for b in loader:\n    loss = model(b)\n    loss.backward()\n    print(loss.item())\n",
              "for b in loader:\n    loss = model(b)\n    loss.backward()\nprint(loss.item())\n"),
    "TF022": ("import torch\nfrom transformers import DataCollatorWithPadding\nm = torch.compile(model)\n"
              "collate = DataCollatorWithPadding(tok)\n",
              "import torch\nfrom transformers import DataCollatorWithPadding\nm = torch.compile(model)\n"
              "collate = DataCollatorWithPadding(tok, pad_to_multiple_of=64)\n"),
    "TF023": ("import torch\ns = torch.jit.script(m)\n",
              "import torch\ns = torch.compile(m)\n"),
    "TF024": ("import torch\nscaler = torch.amp.GradScaler('cpu')\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n"
              "    pass\n",
              "import torch\nscaler = torch.amp.GradScaler('cpu')\nwith torch.autocast('cpu', dtype=torch.float16):\n"
              "    pass\n"),
    "TF025": ('import torch\nm = torch.compile(model, mode="reduce-overhead")\n',
              'import torch\nm = torch.compile(model, mode="default")\n'),
    # nn.RNN (tanh) has no fused cell: it runs on the device
    "TF026": ("import torch\nrnn = torch.nn.LSTM(8, 16, batch_first=True)\n",
              "import torch\nrnn = torch.nn.RNN(8, 16, batch_first=True)\n"),
    # the state dict as it is keeps the device tag; a .cpu() copy does not
    "TF027": ("import torch\nmodel.to(device)\ntorch.save(model.state_dict(), 'm.pt')\n",
              "import torch\nmodel.to(device)\n"
              "torch.save({k: v.cpu() for k, v in model.state_dict().items()}, 'm.pt')\n"),
    # log1p has no kernel in TorchNeuron's table (trn2_ops.toml); log has one
    "TF028": ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x.log1p()\n",
              "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return (1 + x).log()\n"),
    # a channels-last copy by .to: refused there; the same layout made by clone on the device is allowed
    "TF029": ("import torch\nmodel = model.to(memory_format=torch.channels_last)\n",
              "import torch\nx = x.clone(memory_format=torch.channels_last)\n"),
}


def test_every_rule_has_a_positive_and_a_negative_case():
    assert sorted(CASES) == [rule.id for rule in RULES]


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_finds_its_hazard_once(rule_id, rule_ids):
    assert rule_ids(CASES[rule_id][0]).count(rule_id) == 1


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_ignores_the_device_neutral_spelling(rule_id, rule_ids):
    assert rule_id not in rule_ids(CASES[rule_id][1])


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_metadata_is_complete(rule):
    assert rule.id.startswith("TF") and len(rule.id) == 5
    assert isinstance(rule.severity, Severity)
    for text in (rule.summary, rule.fix):
        assert text and "\n" not in text


def test_rule_ids_are_unique():
    assert len({rule.id for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("code", [
    "import torch as th\nth.cuda.synchronize()\n",
    "from torch import cuda\ncuda.synchronize()\n",
    "from torch.cuda import synchronize\nsynchronize()\n",
])
def test_names_are_resolved_through_import_aliases(code, rule_ids):
    assert rule_ids(code) == ["TF003"]


def test_an_unimported_torch_chain_is_still_recognised(rule_ids):
    # a later notebook cell uses torch imported in an earlier one
    assert rule_ids("torch.cuda.empty_cache()\n") == ["TF013"]


def test_a_chain_is_reported_once_not_per_prefix(rule_ids):
    assert rule_ids("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n") == ["TF012"]


def test_other_cuda_api_does_not_repeat_specific_rules(rule_ids):
    code = "import torch\ntorch.cuda.is_available()\ntorch.cuda.Event()\ntorch.cuda.empty_cache()\n"
    assert rule_ids(code) == ["TF003", "TF016", "TF013"]


def test_cuda_method_on_torch_module_attribute_is_not_a_method_call(rule_ids):
    assert "TF001" not in rule_ids("import torch\nm = torch.cuda\n")


def test_compile_default_mode_and_none_are_accepted(rule_ids):
    code = "import torch\ntorch.compile(m, mode=None)\ntorch.compile(m)\ntorch.compile(m, dynamic=None)\n"
    assert rule_ids(code) == []


def test_a_formatted_cuda_device_string_is_reported_not_rewritten(rule_ids, fixed):
    code = 'import torch\nd = torch.device(f"cuda:{rank}")\nname = f"cuda_{rank}.log"\n'
    assert rule_ids(code) == ["TF002"] and fixed(code) == code


@pytest.mark.parametrize(("precision", "found"), [
    ('Accelerator(mixed_precision="bf16")', True),
    ('L.Trainer(precision="bf16-mixed")', True),
    ("TrainingArguments(bf16=True)", True),
    ('Accelerator(mixed_precision="fp16")', False),
    ('L.Trainer(precision="16-mixed")', False),
    ("x = torch.bfloat16 if bf16 else torch.float16", False),  # the scaler may be needed
])
def test_bf16_scaler_sees_the_precision_however_it_is_named(precision, found, rule_ids):
    code = f"import torch\nscaler = torch.amp.GradScaler('cpu')\n{precision}\n"
    assert ("TF024" in rule_ids(code)) is found


def test_a_module_returned_by_a_function_of_the_source_is_a_module(rule_ids):
    code = ("import copy, torch\ndef ema_of(model):\n    ema = copy.deepcopy(model)\n    return ema\n"
            "def stats():\n    return {'n': 1}\n"
            "torch.save(ema_of(net), 'ema.pt')\ntorch.save(stats(), 's.pt')\n")
    assert rule_ids(code) == ["TF019"]


@pytest.mark.parametrize(("collate", "found"), [
    ("def collate(batch):\n    n = max(len(x) for x in batch)\n    return n\n", True),
    ("def pad_batch(batch):\n    n = max(map(len, batch))\n    return n\n"
     "loader = DataLoader(ds, collate_fn=pad_batch)\n", True),
    ("def collate(batch):\n    n = MAX_LEN\n    return n\n", False),  # a fixed length
    ("def longest_title(titles):\n    return max(len(t) for t in titles)\n", False),  # not a collate function
])
def test_a_hand_written_collate_that_pads_to_the_longest_is_churn(collate, found, rule_ids):
    code = f"import torch\nfrom torch.utils.data import DataLoader\nm = torch.compile(model)\n{collate}"
    assert ("TF022" in rule_ids(code)) is found


def test_the_rules_about_cuda_only_code_are_tf001_to_tf018_and_three_pick_the_device():
    """docs/scan.md, "Code only CUDA runs": these rules' findings drop below their severity where only CUDA runs."""
    assert [r.id for r in RULES if r.tied_to_cuda] == [f"TF{n:03d}" for n in range(1, 19)]
    assert [r.id for r in RULES if r.picks_device] == ["TF001", "TF002", "TF006"]


@pytest.mark.parametrize("code, found", [
    ("import torch\nx.contiguous(memory_format=torch.channels_last_3d)\n", ["TF029"]),
    ("import torch\nx.contiguous(torch.channels_last)\n", ["TF029"]),
    ("from torch import channels_last\nimages.to(device, non_blocking=True, memory_format=channels_last)\n", ["TF029"]),
    ("import torch\nx.to(memory_format=torch.contiguous_format)\n", []),
    ("import torch\ny = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)\n", []),
    ("import torch\nfmt = torch.channels_last\nprint(fmt)\n", []),
])
def test_channels_last_copies_are_found_by_method_and_format(code, found, rule_ids):
    """TF029 flags the two copies TorchNeuron refuses in that format; other formats, allocations and mentions stay quiet."""
    assert rule_ids(code) == found
