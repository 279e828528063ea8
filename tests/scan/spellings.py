"""The Python spellings of the profile's data-dependent ops, shared by the scan and device tests."""

# Python spelling -> the ATen op it runs (x: float vector, i: int vector, r: repeats tensor, mask: bool mask)
EXAMPLES = [
    ("torch.nonzero(x)", "aten::nonzero"),
    ("x.nonzero()", "aten::nonzero"),
    ("torch.argwhere(x)", "aten::nonzero"),
    ("x.argwhere()", "aten::nonzero"),
    ("torch.where(mask)", "aten::nonzero"),
    ("torch.masked_select(x, mask)", "aten::masked_select"),
    ("x.masked_select(mask)", "aten::masked_select"),
    ("x[mask]", "aten::nonzero"),
    ("torch.unique(x)", "aten::_unique2"),
    ("x.unique()", "aten::_unique2"),
    ("torch.unique(x, dim=0)", "aten::unique_dim"),
    ("x.unique(dim=0)", "aten::unique_dim"),
    ("torch.unique_consecutive(x)", "aten::unique_consecutive"),
    ("x.unique_consecutive()", "aten::unique_consecutive"),
    ("torch.bincount(i)", "aten::bincount"),
    ("i.bincount()", "aten::bincount"),
    ("torch.repeat_interleave(x, r)", "aten::repeat_interleave.Tensor"),
    ("x.repeat_interleave(r)", "aten::repeat_interleave.Tensor"),
    ("torch.repeat_interleave(r)", "aten::repeat_interleave.Tensor"),
    ("torch.nn.functional.one_hot(i)", "aten::one_hot"),
    ("torch.nn.functional.one_hot(i, num_classes=-1)", "aten::one_hot"),
]
# Static-shape spellings of the same ops: neither the scan nor the device sends them to the host.
STATIC = ["x.repeat_interleave(2)", "torch.where(mask, x, 0)", "x.masked_fill(~mask, 0)"]
