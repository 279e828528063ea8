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

import ast
from collections.abc import Iterator
from functools import cached_property

from torchferry.scan.syntax import full_name

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
TENSOR_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_LITERAL_VALUES = (int, float, str, bytes)  # with None, True, False: what a literal default can be
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _is_literal(node: ast.AST) -> bool:
    """A name, number, string, tuple or list (`None`, `True`, `1e-5`, `"mean"`, `(1, 2)`): not a tensor default."""
    if isinstance(node, (ast.Name, ast.Tuple, ast.List)):
        return True
    return isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, _LITERAL_VALUES))


def is_dotted_name(node: ast.AST) -> bool:
    """`torch.nonzero` is a name; `torch.greater(a, 0).nonzero` (its full name: "torch.greater.nonzero") is not."""
    return isinstance(node, ast.Name) or (isinstance(node, ast.Attribute) and is_dotted_name(node.value))


def _bound_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element.value if isinstance(element, ast.Starred) else element)


def _assigned(target: ast.AST, value: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """`a, b = x, y` binds a to x and b to y; any other unpacking binds each name to the whole value."""
    if (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)):
        for t, v in zip(target.elts, value.elts):
            yield from _assigned(_unstarred(t), _unstarred(v))
    else:
        yield from ((name, value) for name in _bound_names(target))


def _unstarred(node: ast.AST) -> ast.AST:
    return node.value if isinstance(node, ast.Starred) else node


def _loop_bindings(target: ast.AST, iterated: ast.AST) -> Iterator[tuple[str, ast.AST | None]]:
    """What a loop target holds: an element of `iterated` (judged like `iterated` itself: an element
    of a tensor is a tensor), through `zip(a, b)` and `enumerate(a)`; None where unknown."""
    call_name = iterated.func.id if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) else ""
    elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else None
    arguments = argument_values(iterated) if call_name else []
    if call_name == "zip" and elements is not None and len(elements) == len(arguments):
        for element, arg in zip(elements, arguments):
            yield from _loop_bindings(_unstarred(element), arg)
    elif call_name == "enumerate" and elements is not None and len(elements) == 2 and arguments:
        yield from ((name, None) for name in _bound_names(_unstarred(elements[0])))
        yield from _loop_bindings(_unstarred(elements[1]), arguments[0])
    elif isinstance(target, ast.Name):
        yield target.id, iterated
    else:
        yield from ((name, None) for name in _bound_names(target))


def argument_values(call: ast.Call) -> list[ast.AST]:
    """The value of every argument of `call` (`*a`, `k=v`, `**kw` too), in the order written, as libcst lists them."""
    written = sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))
    return [a.value if isinstance(a, (ast.Starred, ast.keyword)) else a for a in written]


def _name_says_module(name: str) -> bool:
    name = name.lower()
    if any(word in name for word in NOT_MODULE_WORDS):
        return False
    return name in ("module", "net") or name.endswith(("model", "net", "_module", "encoder", "decoder", "unet"))


def _bindings(own: list[ast.AST]) -> Iterator[tuple[ast.AST, bool, str, ast.AST | None]]:
    """Assignments and loop targets among the `own` nodes of one function (`Tensors._own_nodes`).

    Each binding is (anchor, from_start, name, value): it holds after the anchor ends (an
    assignment, a `for` target), or, for a comprehension's variables, from the start of the
    comprehension (its element is written before its `for`).
    """
    for node in own:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield from ((node, False, name, value) for name, value in _assigned(target, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            yield from ((node, False, name, node.value) for name in _bound_names(node.target))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield from ((node.target, False, n, v) for n, v in _loop_bindings(node.target, node.iter))
        elif isinstance(node, _COMPREHENSIONS):
            for clause in node.generators:
                yield from ((node, True, n, v) for n, v in _loop_bindings(clause.target, clause.iter))


class Tensors:
    """Tensor guesses for the names and expressions of one source (one `SourceTree` and its regions)."""

    def __init__(self, tree, regions) -> None:  # noqa: ANN001 - syntax.SourceTree, regions.Regions
        self._tree = tree
        self._regions = regions
        self._bindings: dict[int, list[tuple[tuple[int, int], str, ast.AST | None]]] = {}
        self._judging: set[int] = set()  # functions whose return value is being judged (recursion guard)
        self._following: set[int] = set()  # names whose binding is being judged (`[x for x in x]` leads back)

    @cached_property
    def _own(self) -> dict[ast.AST, list[ast.AST]]:
        """Each function, class, lambda and the module -> its own nodes, itself first (nested ones and all of
        their nodes, decorators and defaults included, left out), from one pass over the tree's walk."""
        tree = self._tree
        own: dict[ast.AST, list[ast.AST]] = {}
        home: dict[ast.AST, ast.AST] = {}  # node -> the scope whose own node it is
        for node in tree.nodes():
            parent = tree.parent(node)
            if parent is None:
                home[node], own[node] = node, [node]
            elif isinstance(node, _SCOPES):
                own[node] = [node]
            else:
                home[node] = where = parent if isinstance(parent, _SCOPES) else home[parent]
                own[where].append(node)
        return own

    def _own_nodes(self, scope: ast.AST) -> list[ast.AST]:
        """The nodes of `scope`, nested functions, classes and lambdas left out."""
        return self._own.get(scope, [scope])

    def _returns(self, function: ast.AST) -> list[ast.AST]:
        """The values one function returns (nested functions excluded)."""
        return [n.value for n in self._own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]

    def _scope(self, node: ast.AST) -> ast.AST | None:
        return next((n for n in self._tree.ancestors(node) if isinstance(n, (*_FUNCTIONS, ast.Module))), None)

    @staticmethod
    def _start(node: ast.AST) -> tuple[int, int]:
        return node.lineno, node.col_offset

    @staticmethod
    def _end(node: ast.AST) -> tuple[int, int]:
        return node.end_lineno, node.end_col_offset

    def latest_binding(self, name: ast.Name) -> tuple[bool, ast.AST | None]:
        """(found, value) of the latest assignment to `name` before it, in its function."""
        scope = self._scope(name)
        if scope is None:
            return False, None
        if id(scope) not in self._bindings:
            self._bindings[id(scope)] = sorted(
                ((self._start(anchor) if from_start else self._end(anchor), n, value)
                 for anchor, from_start, n, value in _bindings(self._own_nodes(scope))), key=lambda b: b[0])
        where = self._start(name)
        latest = [value for position, n, value in self._bindings[id(scope)] if n == name.id and position <= where]
        return (True, latest[-1]) if latest else (False, None)

    def _judge_binding(self, name: ast.Name, judge) -> bool | None:  # noqa: ANN001 - a Tensors predicate
        """`judge` of the value `name` was last bound to; None when unbound here, False when the binding
        leads back to `name` itself (`[x for x in x]` binds x to the x it iterates)."""
        found, value = self.latest_binding(name)
        if not found:
            return None
        if value is None or id(name) in self._following:
            return False
        self._following.add(id(name))
        try:
            return judge(value)
        finally:
            self._following.discard(id(name))

    def _is_tensor_parameter(self, name: ast.Name) -> bool:
        """A parameter annotated as a tensor; or, of a forward itself (not its helpers), one without an
        annotation or a literal default."""
        scope = self._scope(name)
        if not isinstance(scope, _FUNCTIONS):
            return False
        arguments = scope.args
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = dict(zip(map(id, positional[len(positional) - len(arguments.defaults):]), arguments.defaults))
        defaults.update((id(a), d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
        for param in (*positional, *arguments.kwonlyargs):
            if param.arg != name.id or param.arg in ("self", "cls"):
                continue
            if param.annotation is not None:
                return "Tensor" in ast.unparse(param.annotation)
            default = defaults.get(id(param))
            return scope in self._regions.forward_roots and (default is None or not _is_literal(default))
        return False

    def is_numpy(self, node: ast.AST) -> bool:
        """Whether `node` is built by numpy (`np.random.rand(1)`, `np.array(x).reshape(...)`, a name bound to one)."""
        if isinstance(node, ast.Call):
            if (self._tree.qualname(node.func) or "").startswith("numpy."):
                return True
            return isinstance(node.func, ast.Attribute) and self.is_numpy(node.func.value)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self.is_numpy(node.value)
        if isinstance(node, ast.Name):
            return bool(self._judge_binding(node, self.is_numpy))
        return False

    def _is_model(self, func: ast.AST) -> bool:
        """Whether calling `func` runs a model or a loss (its result is a tensor)."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return self._regions.in_forward(func)
        name = (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "").lower()
        return any(word in name for word in MODEL_WORDS) or self.is_module(func)

    def _enclosing_class(self, node: ast.AST) -> str | None:
        return next((n.name for n in self._tree.ancestors(node) if isinstance(n, ast.ClassDef)), None)

    def is_module(self, node: ast.AST) -> bool:
        """Whether `node` most likely evaluates to an nn.Module."""
        if isinstance(node, ast.Name):
            if node.id == "self":
                return self._enclosing_class(node) in self._regions.module_classes
            judged = self._judge_binding(node, self.is_module)
            return _name_says_module(node.id) if judged is None else judged
        if isinstance(node, ast.Attribute):
            return node.attr == "module" or _name_says_module(node.attr)
        if not isinstance(node, ast.Call):
            return False
        qualname = self._tree.qualname(node.func) or ""
        last = qualname.rsplit(".", 1)[-1]
        if qualname in MODULE_WRAPPERS or last in ("DistributedDataParallel", "FullyShardedDataParallel"):
            return True
        if (qualname.startswith("torch.nn.") and last[:1].isupper()) or last in self._regions.module_classes:
            return True
        if last in MODULE_LOADERS and isinstance(node.func, ast.Attribute):
            owner = (full_name(node.func.value) or "").rsplit(".", 1)[-1]
            return "Model" in owner or "For" in owner
        arguments = argument_values(node)
        if qualname in COPIES and arguments:
            return self.is_module(arguments[0])
        if isinstance(node.func, ast.Name) and node.func.id in self._regions.module_functions:
            return self._returns_module(self._regions.module_functions[node.func.id])
        return (isinstance(node.func, ast.Attribute) and node.func.attr in MODULE_METHODS
                and self.is_module(node.func.value))

    def _returns_module(self, function: ast.AST) -> bool:
        """Whether every `return` of a function of this source returns a module."""
        if id(function) in self._judging:
            return False
        self._judging.add(id(function))
        try:
            values = self._returns(function)
            return bool(values) and all(self.is_module(v) for v in values)
        finally:
            self._judging.discard(id(function))

    def _is_tensor_call(self, call: ast.Call) -> bool:
        func = call.func
        qualname = self._tree.qualname(func) or ""
        if qualname.startswith("torch.") and is_dotted_name(func):
            parts = qualname.split(".")
            if parts[1] == "nn":
                return qualname.startswith("torch.nn.functional.")
            return (parts[1] not in NOT_TENSOR_NAMESPACES and parts[-1] not in NOT_TENSOR_FUNCTIONS
                    and parts[-1][:1].islower() and not parts[-1].startswith("is_"))  # torch.is_*: a bool
        if isinstance(func, ast.Attribute) and func.attr not in NOT_TENSOR_METHODS:
            if self.is_tensor(func.value):
                return True
        return self._is_model(func)

    def is_tensor(self, node: ast.AST) -> bool:
        """Whether `node` most likely evaluates to a tensor."""
        if isinstance(node, ast.Name):
            judged = self._judge_binding(node, self.is_tensor)
            return self._is_tensor_parameter(node) if judged is None else judged
        if isinstance(node, ast.Attribute):
            if node.attr in OUTPUT_ATTRS:
                return True
            return node.attr in TENSOR_ATTRS and self.is_tensor(node.value)
        if isinstance(node, ast.Call):
            return self._is_tensor_call(node)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.is_tensor(node.operand)
        if isinstance(node, ast.Compare):
            return (all(isinstance(op, TENSOR_COMPARISONS) for op in node.ops)
                    and (self.is_tensor(node.left) or any(self.is_tensor(c) for c in node.comparators)))
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        return False

    def is_bool_mask(self, node: ast.AST) -> bool:
        """Whether `node` most likely is a boolean tensor (a comparison, `~m`, `a & b`, `x.isnan()`, a `..._mask`)."""
        if isinstance(node, ast.Compare):
            return all(isinstance(op, TENSOR_COMPARISONS) for op in node.ops)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.Invert) and self.is_bool_mask(node.operand)
        if isinstance(node, ast.BinOp):
            return (isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor))
                    and (self.is_bool_mask(node.left) or self.is_bool_mask(node.right)))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else (self._tree.qualname(func) or "")
            return name.rsplit(".", 1)[-1] in BOOL_FUNCTIONS
        if isinstance(node, ast.Subscript):
            return self.is_bool_mask(node.value)
        if isinstance(node, ast.Name):
            found, value = self.latest_binding(node)
            if found and value is not None:
                return bool(self._judge_binding(node, self.is_bool_mask))
            return node.id == "mask" or node.id.endswith("_mask")
        return False
