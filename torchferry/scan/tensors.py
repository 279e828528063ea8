"""Which expressions hold tensors, boolean tensors or modules, judged from one function's code.

A static guess: a name holds what its latest assignment (or loop target) before the use held,
in the same function; a forward's parameters without a literal default are tensors; model
outputs (`out.loss`, `out.logits`), `torch.*` functions, calls of a module or loss (`model(x)`,
`criterion(p, y)`, `self.block(x)` in a forward), tensor methods and arithmetic on tensors
give tensors. `.item()`, `.tolist()`, `.shape`, `len()` ... do not. Modules are constructors of
`torch.nn` classes or of module classes defined here, `from_pretrained`/`from_config` of a
`...Model...` class, wrappers (`torch.compile`, DDP, FSDP), `self` in a module class, and names
that say so (`model`, `net`, `encoder` ...; not `model_state`, `model_path` ...).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

# Tensor methods and attributes whose result is not a tensor.
NOT_TENSOR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "nelement", "element_size",
                      "data_ptr", "stride", "is_contiguous", "is_floating_point", "get_device", "untyped_storage"}
# Tensor attributes that are tensors (`.shape`, `.dtype`, `.device` ... are not).
TENSOR_ATTRS = {"T", "mT", "H", "grad", "data", "real", "imag"}
# Attributes of model outputs (transformers, diffusers) that are tensors.
OUTPUT_ATTRS = {"loss", "logits", "last_hidden_state", "pooler_output", "sample", "prev_sample",
                "pred_original_sample", "image_embeds", "text_embeds"}
# torch namespaces and functions that do not return tensors.
NOT_TENSOR_NAMESPACES = {"cuda", "accelerator", "distributed", "utils", "optim", "backends", "jit", "amp",
                         "compiler", "profiler", "autograd", "onnx", "export", "hub"}
# (and every torch.is_* predicate: a Python bool)
NOT_TENSOR_FUNCTIONS = {"no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "device", "numel", "compile",
                        "load", "save", "manual_seed", "autocast", "get_default_dtype", "set_default_dtype",
                        "use_deterministic_algorithms", "set_float32_matmul_precision", "get_rng_state",
                        "set_rng_state", "seed", "initial_seed", "equal", "allclose"}
# Callees whose name says they are a model or a loss (their call returns tensors).
MODEL_WORDS = ("model", "net", "criterion", "loss", "encoder", "decoder", "unet", "vae", "head")
# Methods and torch functions that return boolean tensors.
BOOL_FUNCTIONS = {"bool", "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "isnan", "isinf", "isfinite",
                  "isneginf", "isposinf", "isreal", "logical_and", "logical_or", "logical_not", "logical_xor",
                  "isin", "isclose", "signbit"}
# Calls that return a module wrapped around their first argument.
MODULE_WRAPPERS = {"torch.compile", "torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel",
                   "torch.distributed.fsdp.FullyShardedDataParallel", "torch.nn.parallel.DataParallel"}
# Module methods that return the module itself.
MODULE_METHODS = {"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "double", "requires_grad_"}
COPIES = {"copy.deepcopy", "copy.copy"}
MODULE_LOADERS = {"from_pretrained", "from_config", "from_single_file"}
NOT_MODULE_WORDS = ("state", "dict", "ckpt", "checkpoint", "path", "param", "weight", "config", "name", "dir", "file")
TENSOR_COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)
_LITERALS = (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.Tuple, cst.List)


def is_dotted_name(node: cst.BaseExpression) -> bool:
    """`torch.nonzero` is a name; `torch.greater(a, 0).nonzero` (libcst: "torch.greater.nonzero") is not."""
    return isinstance(node, cst.Name) or (isinstance(node, cst.Attribute) and is_dotted_name(node.value))


def _bound_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _bound_names(element.value)


def _assigned(target: cst.BaseExpression, value: cst.BaseExpression) -> Iterator[tuple[str, cst.BaseExpression]]:
    """`a, b = x, y` binds a to x and b to y; any other unpacking binds each name to the whole value."""
    if (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List))
            and len(target.elements) == len(value.elements)):
        for t, v in zip(target.elements, value.elements):
            yield from _assigned(t.value, v.value)
    else:
        yield from ((name, value) for name in _bound_names(target))


def _loop_bindings(target: cst.BaseExpression, iterated: cst.BaseExpression
                   ) -> Iterator[tuple[str, cst.BaseExpression | None]]:
    """What a loop target holds: an element of `iterated` (judged like `iterated` itself: an element
    of a tensor is a tensor), through `zip(a, b)` and `enumerate(a)`; None where unknown."""
    call_name = iterated.func.value if isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Name) else ""
    elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else None
    if call_name == "zip" and elements is not None and len(elements) == len(iterated.args):
        for element, arg in zip(elements, iterated.args):
            yield from _loop_bindings(element.value, arg.value)
    elif call_name == "enumerate" and elements is not None and len(elements) == 2 and iterated.args:
        yield from ((name, None) for name in _bound_names(elements[0].value))
        yield from _loop_bindings(elements[1].value, iterated.args[0].value)
    elif isinstance(target, cst.Name):
        yield target.value, iterated
    else:
        yield from ((name, None) for name in _bound_names(target))


def _name_says_module(name: str) -> bool:
    name = name.lower()
    if any(word in name for word in NOT_MODULE_WORDS):
        return False
    return name in ("module", "net") or name.endswith(("model", "net", "_module", "encoder", "decoder", "unet"))


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


class _Bindings(cst.CSTVisitor):
    """Assignments and loop targets directly in one function (nested functions and classes excluded).

    Each binding is recorded as (anchor, from_start, name, value): it holds after the anchor
    ends (an assignment, a `for` target), or, for a comprehension's variables, from the start
    of the comprehension (its element is written before its `for`).
    """

    def __init__(self, scope: cst.CSTNode) -> None:
        self.scope = scope
        self.found: list[tuple[cst.CSTNode, bool, str, cst.BaseExpression | None]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is not self.scope and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.Assign):
            for target in node.targets:
                self.found.extend((node, False, name, value) for name, value in _assigned(target.target, node.value))
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self.found.extend((node, False, name, node.value) for name in _bound_names(node.target))
        elif isinstance(node, cst.For):
            self.found.extend((node.target, False, n, v) for n, v in _loop_bindings(node.target, node.iter))
        elif isinstance(node, _COMPREHENSIONS):
            clause = node.for_in
            while clause is not None:
                self.found.extend((node, True, n, v) for n, v in _loop_bindings(clause.target, clause.iter))
                clause = clause.inner_for_in
        return True


class _Returns(cst.CSTVisitor):
    """The values one function returns (nested functions excluded)."""

    def __init__(self, function: cst.FunctionDef) -> None:
        self.function = function
        self.values: list[cst.BaseExpression] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is not self.function and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.Return) and node.value is not None:
            self.values.append(node.value)
        return True


class Tensors:
    """Tensor guesses for the names and expressions of one source (one `Context`)."""

    def __init__(self, ctx) -> None:  # noqa: ANN001 - engine.Context
        self._ctx = ctx
        self._bindings: dict[int, list[tuple[tuple[int, int], str, cst.BaseExpression | None]]] = {}
        self._judging: set[int] = set()  # functions whose return value is being judged (recursion guard)

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        current = self._ctx.parent(node)
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.Module)):
            current = self._ctx.parent(current)
        return current

    def _start(self, node: cst.CSTNode) -> tuple[int, int]:
        start = self._ctx.positions[node].start
        return start.line, start.column

    def _end(self, node: cst.CSTNode) -> tuple[int, int]:
        end = self._ctx.positions[node].end
        return end.line, end.column

    def latest_binding(self, name: cst.Name) -> tuple[bool, cst.BaseExpression | None]:
        """(found, value) of the latest assignment to `name` before it, in its function."""
        scope = self._scope(name)
        if scope is None:
            return False, None
        if id(scope) not in self._bindings:
            collector = _Bindings(scope)
            scope.visit(collector)
            self._bindings[id(scope)] = sorted(
                ((self._start(anchor) if from_start else self._end(anchor), n, value)
                 for anchor, from_start, n, value in collector.found), key=lambda b: b[0])
        where = self._start(name)
        latest = [value for position, n, value in self._bindings[id(scope)] if n == name.value and position <= where]
        return (True, latest[-1]) if latest else (False, None)

    def _is_tensor_parameter(self, name: cst.Name) -> bool:
        """A parameter annotated as a tensor; or, of a forward itself (not its helpers), one without an
        annotation or a literal default."""
        scope = self._scope(name)
        if not isinstance(scope, cst.FunctionDef):
            return False
        for param in (*scope.params.posonly_params, *scope.params.params, *scope.params.kwonly_params):
            if param.name.value != name.value or param.name.value in ("self", "cls"):
                continue
            if param.annotation is not None:
                return "Tensor" in cst.Module([]).code_for_node(param.annotation.annotation)
            return (scope in self._ctx.regions.forward_roots
                    and (param.default is None or not isinstance(param.default, _LITERALS)))
        return False

    def is_numpy(self, node: cst.BaseExpression) -> bool:
        """Whether `node` is built by numpy (`np.random.rand(1)`, `np.array(x).reshape(...)`, a name bound to one)."""
        if isinstance(node, cst.Call):
            if (self._ctx.qualname(node.func) or "").startswith("numpy."):
                return True
            return isinstance(node.func, cst.Attribute) and self.is_numpy(node.func.value)
        if isinstance(node, (cst.Attribute, cst.Subscript)):
            return self.is_numpy(node.value)
        if isinstance(node, cst.Name):
            found, value = self.latest_binding(node)
            return found and value is not None and self.is_numpy(value)
        return False

    def _is_model(self, func: cst.BaseExpression) -> bool:
        """Whether calling `func` runs a model or a loss (its result is a tensor)."""
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return self._ctx.regions.in_forward(func)
        name = (func.value if isinstance(func, cst.Name) else
                func.attr.value if isinstance(func, cst.Attribute) else "").lower()
        return any(word in name for word in MODEL_WORDS) or self.is_module(func)

    def _enclosing_class(self, node: cst.CSTNode) -> str | None:
        current = self._ctx.parent(node)
        while current is not None and not isinstance(current, cst.ClassDef):
            current = self._ctx.parent(current)
        return current.name.value if current is not None else None

    def is_module(self, node: cst.BaseExpression) -> bool:
        """Whether `node` most likely evaluates to an nn.Module."""
        if isinstance(node, cst.Name):
            if node.value == "self":
                return self._enclosing_class(node) in self._ctx.regions.module_classes
            found, value = self.latest_binding(node)
            if found:
                return value is not None and self.is_module(value)
            return _name_says_module(node.value)
        if isinstance(node, cst.Attribute):
            return node.attr.value == "module" or _name_says_module(node.attr.value)
        if not isinstance(node, cst.Call):
            return False
        qualname = self._ctx.qualname(node.func) or ""
        last = qualname.rsplit(".", 1)[-1]
        if qualname in MODULE_WRAPPERS or last in ("DistributedDataParallel", "FullyShardedDataParallel"):
            return True
        if (qualname.startswith("torch.nn.") and last[:1].isupper()) or last in self._ctx.regions.module_classes:
            return True
        if last in MODULE_LOADERS and isinstance(node.func, cst.Attribute):
            owner = (get_full_name_for_node(node.func.value) or "").rsplit(".", 1)[-1]
            return "Model" in owner or "For" in owner
        if qualname in COPIES and node.args:
            return self.is_module(node.args[0].value)
        if isinstance(node.func, cst.Name) and node.func.value in self._ctx.regions.module_functions:
            return self._returns_module(self._ctx.regions.module_functions[node.func.value])
        return (isinstance(node.func, cst.Attribute) and node.func.attr.value in MODULE_METHODS
                and self.is_module(node.func.value))

    def _returns_module(self, function: cst.FunctionDef) -> bool:
        """Whether every `return` of a function of this source returns a module."""
        if id(function) in self._judging:
            return False
        self._judging.add(id(function))
        try:
            collector = _Returns(function)
            function.visit(collector)
            return bool(collector.values) and all(self.is_module(v) for v in collector.values)
        finally:
            self._judging.discard(id(function))

    def _is_tensor_call(self, call: cst.Call) -> bool:
        func = call.func
        qualname = self._ctx.qualname(func) or ""
        if qualname.startswith("torch.") and is_dotted_name(func):
            parts = qualname.split(".")
            if parts[1] == "nn":
                return qualname.startswith("torch.nn.functional.")
            return (parts[1] not in NOT_TENSOR_NAMESPACES and parts[-1] not in NOT_TENSOR_FUNCTIONS
                    and parts[-1][:1].islower() and not parts[-1].startswith("is_"))  # torch.is_*: a bool
        if isinstance(func, cst.Attribute) and func.attr.value not in NOT_TENSOR_METHODS:
            if self.is_tensor(func.value):
                return True
        return self._is_model(func)

    def is_tensor(self, node: cst.BaseExpression) -> bool:
        """Whether `node` most likely evaluates to a tensor."""
        if isinstance(node, cst.Name):
            found, value = self.latest_binding(node)
            if found:
                return value is not None and self.is_tensor(value)
            return self._is_tensor_parameter(node)
        if isinstance(node, cst.Attribute):
            if node.attr.value in OUTPUT_ATTRS:
                return True
            return node.attr.value in TENSOR_ATTRS and self.is_tensor(node.value)
        if isinstance(node, cst.Call):
            return self._is_tensor_call(node)
        if isinstance(node, cst.BinaryOperation):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, cst.UnaryOperation):
            return not isinstance(node.operator, cst.Not) and self.is_tensor(node.expression)
        if isinstance(node, cst.Comparison):
            return (all(isinstance(c.operator, TENSOR_COMPARISONS) for c in node.comparisons)
                    and (self.is_tensor(node.left) or any(self.is_tensor(c.comparator) for c in node.comparisons)))
        if isinstance(node, cst.Subscript):
            return self.is_tensor(node.value)
        return False

    def is_bool_mask(self, node: cst.BaseExpression) -> bool:
        """Whether `node` most likely is a boolean tensor (a comparison, `~m`, `a & b`, `x.isnan()`, a `..._mask`)."""
        if isinstance(node, cst.Comparison):
            return all(isinstance(c.operator, TENSOR_COMPARISONS) for c in node.comparisons)
        if isinstance(node, cst.UnaryOperation):
            return isinstance(node.operator, cst.BitInvert) and self.is_bool_mask(node.expression)
        if isinstance(node, cst.BinaryOperation):
            return (isinstance(node.operator, (cst.BitAnd, cst.BitOr, cst.BitXor))
                    and (self.is_bool_mask(node.left) or self.is_bool_mask(node.right)))
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else (self._ctx.qualname(func) or "")
            return name.rsplit(".", 1)[-1] in BOOL_FUNCTIONS
        if isinstance(node, cst.Subscript):
            return self.is_bool_mask(node.value)
        if isinstance(node, cst.Name):
            found, value = self.latest_binding(node)
            if found and value is not None:
                return self.is_bool_mask(value)
            return node.value == "mask" or node.value.endswith("_mask")
        return False
