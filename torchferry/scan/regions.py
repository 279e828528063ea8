"""Where code runs every step on device tensors: a model's forward, or a training step.

Per-step hazards (host fallbacks, host syncs) matter only there; the same call in a data-prep
script or a collate function costs nothing on the target. The regions are decided from the
structure of one source, without running it:

- **forward**: `forward` of an nn.Module subclass (a class based on a `torch.nn` class, on a
  `...Module` or `...PreTrainedModel` class, or on such a class defined here); a function set
  as a module's forward (`m.forward = f`, `m.forward = types.MethodType(f, m)`) or registered
  with `register_forward_hook` / `register_forward_pre_hook`; and, transitively, the methods a
  forward calls on `self` and the functions of this source it calls by name.
- **training step**: the innermost loop whose body runs `backward()` or steps an optimizer
  (`optimizer.step()`, `scaler.step(optimizer)`), or calls a step function by name; a function
  that does so outside any loop of its own (a step function); and `training_step` /
  `train_step` methods, and `compute_loss` of a `...Trainer` subclass (called once per step).

A step's `for`/`while` header (`for batch in loader`) runs once per loop, so only the body counts.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node

# Method names that run the backward pass on their receiver or argument.
BACKWARD_METHODS = {"backward", "manual_backward"}
# Methods that a training framework calls once per training step.
STEP_METHODS = {"training_step", "train_step"}
TRAINER_STEP_METHODS = {"compute_loss"}
FORWARD_HOOKS = {"register_forward_hook", "register_forward_pre_hook"}
# Text found in every source that has a region: each way to make one above names one of these
# words ("forward" in hooks and `m.forward = f`, "step" in train_step/training_step and `.step()`,
# "backward" in manual_backward). A rule that reports only inside regions uses it as its prefilter.
REGION_WORDS = r"forward|backward|step|compute_loss"

_LOOPS = (cst.For, cst.While)


def _last_name(node: cst.BaseExpression) -> str:
    return (get_full_name_for_node(node) or "").rsplit(".", 1)[-1]


def _steps_optimizer(receiver: cst.BaseExpression) -> bool:
    name = _last_name(receiver).lower()
    return name.startswith("opt") or "optim" in name or "scaler" in name


def is_step_call(call: cst.Call) -> bool:
    """`loss.backward()`, `accelerator.backward(loss)`, `optimizer.step()`, `scaler.step(opt)`."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value in BACKWARD_METHODS:
        return True
    return func.attr.value == "step" and _steps_optimizer(func.value)


class _Index(cst.CSTVisitor):
    """One pass over the source: classes, functions, step calls and the call graph."""

    def __init__(self) -> None:
        self.classes: dict[str, cst.ClassDef] = {}
        self.owner: dict[cst.FunctionDef, cst.ClassDef | None] = {}
        self.module_functions: dict[str, cst.FunctionDef] = {}
        self.calls: list[tuple[cst.Call, list[cst.CSTNode]]] = []  # each call with its enclosing stack
        self.forward_roots: set[str] = set()  # module-level functions set as a forward or hook
        self._stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.ClassDef):
            self.classes.setdefault(node.name.value, node)
        elif isinstance(node, cst.FunctionDef):
            parent = self._stack[-1] if self._stack else None
            self.owner[node] = parent if isinstance(parent, cst.ClassDef) else None
            if parent is None:
                self.module_functions.setdefault(node.name.value, node)
        elif isinstance(node, cst.Call):
            self.calls.append((node, list(self._stack)))
            self._note_hook(node)
        elif isinstance(node, cst.Assign):
            self._note_forward_assignment(node)
        if isinstance(node, (cst.ClassDef, cst.FunctionDef, *_LOOPS)):
            self._stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self._stack and self._stack[-1] is original_node:
            self._stack.pop()

    def _note_hook(self, call: cst.Call) -> None:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in FORWARD_HOOKS and call.args:
            if isinstance(call.args[0].value, cst.Name):
                self.forward_roots.add(call.args[0].value.value)

    def _note_forward_assignment(self, node: cst.Assign) -> None:
        if not any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "forward" for t in node.targets):
            return
        value = node.value
        if isinstance(value, cst.Call) and _last_name(value.func) in ("MethodType", "partial") and value.args:
            value = value.args[0].value
        if isinstance(value, cst.Name):
            self.forward_roots.add(value.value)


class Regions:
    """Which nodes of one source are in a forward or a training step (see the module docstring)."""

    def __init__(self, module: cst.Module, ctx) -> None:  # noqa: ANN001 - engine.Context
        self._ctx = ctx
        index = _Index()
        module.visit(index)
        self._index = index
        # Each class's methods, and the calls inside each function (nested ones included), found once:
        # the call graph below asks for them per function.
        self._methods_of: dict[cst.ClassDef, list[cst.FunctionDef]] = {}
        for function, owner in index.owner.items():
            if owner is not None:
                self._methods_of.setdefault(owner, []).append(function)
        self._calls_in: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call, stack in index.calls:
            for enclosing in dict.fromkeys(n for n in stack if isinstance(n, cst.FunctionDef)):
                self._calls_in.setdefault(enclosing, []).append(call)
        self.module_classes = self._find_module_classes()
        self.forward_roots = self._forward_roots()  # forward methods and functions set as forward or hook
        self.forward_functions = self._reach(self.forward_roots)
        self.step_functions, self.step_loops = self._find_steps()
        self._forward_bodies = {id(f.body) for f in self.forward_functions}
        self._step_bodies = {id(f.body) for f in self.step_functions} | {id(loop.body) for loop in self.step_loops}

    @property
    def module_functions(self) -> dict[str, cst.FunctionDef]:
        """The functions defined at the top level of this source, by name."""
        return self._index.module_functions

    # -- classes and forwards ------------------------------------------------------------------

    def _is_module_base(self, base: cst.BaseExpression, known: set[str]) -> bool:
        qualname = self._ctx.qualname(base) or ""
        last = qualname.rsplit(".", 1)[-1]
        return (qualname.startswith("torch.nn.") or last in known
                or last.endswith(("Module", "PreTrainedModel")))

    def _find_module_classes(self) -> set[str]:
        known: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self._index.classes.items():
                if name not in known and any(self._is_module_base(b.value, known) for b in cls.bases):
                    known.add(name)
                    changed = True
        return known

    def _methods(self, cls: cst.ClassDef) -> list[cst.FunctionDef]:
        return self._methods_of.get(cls, [])

    def _forward_roots(self) -> set[cst.FunctionDef]:
        roots = {f for name in self.module_classes for f in self._methods(self._index.classes[name])
                 if f.name.value == "forward"}
        functions = self._index.module_functions
        roots |= {functions[n] for n in self._index.forward_roots if n in functions}
        return roots

    def _callees(self, function: cst.FunctionDef) -> Iterator[cst.FunctionDef]:
        """Functions of this source that `function` calls as `self.m(...)` or `f(...)`."""
        cls = self._index.owner.get(function)
        for call in self._calls_in.get(function, ()):
            func = call.func
            if isinstance(func, cst.Name) and func.value in self._index.module_functions:
                yield self._index.module_functions[func.value]
            elif (cls is not None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                  and func.value.value == "self"):
                yield from (m for m in self._methods(cls) if m.name.value == func.attr.value)

    def _reach(self, roots: set[cst.FunctionDef]) -> set[cst.FunctionDef]:
        reached, todo = set(), list(roots)
        while todo:
            function = todo.pop()
            if function not in reached:
                reached.add(function)
                todo.extend(self._callees(function))
        return reached

    # -- training steps ------------------------------------------------------------------------

    def _framework_steps(self) -> set[cst.FunctionDef]:
        found = set()
        for function, owner in self._index.owner.items():
            name = function.name.value
            if owner is not None and (name in STEP_METHODS or (name in TRAINER_STEP_METHODS and any(
                    _last_name(b.value).endswith("Trainer") for b in owner.bases))):
                found.add(function)
        return found

    def _calls_step_function(self, call: cst.Call, step_names: set[str]) -> bool:
        func = call.func
        if isinstance(func, cst.Name):
            return func.value in step_names
        return (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                and func.value.value == "self" and func.attr.value in step_names)

    def _find_steps(self) -> tuple[set[cst.FunctionDef], set[cst.For | cst.While]]:
        functions, loops = self._framework_steps(), set()
        while True:
            names = {f.name.value for f in functions}
            before = (len(functions), len(loops))
            for call, stack in self._index.calls:
                if not (is_step_call(call) or self._calls_step_function(call, names)):
                    continue
                innermost = next((n for n in reversed(stack) if isinstance(n, (cst.FunctionDef, *_LOOPS))), None)
                if isinstance(innermost, _LOOPS):
                    loops.add(innermost)
                elif isinstance(innermost, cst.FunctionDef):
                    functions.add(innermost)
            if (len(functions), len(loops)) == before:
                return functions, loops

    # -- queries -------------------------------------------------------------------------------

    def _enclosing_bodies(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self._ctx.parent(node)
        while current is not None:
            yield current
            current = self._ctx.parent(current)

    def in_forward(self, node: cst.CSTNode) -> bool:
        return any(id(n) in self._forward_bodies for n in self._enclosing_bodies(node))

    def in_step(self, node: cst.CSTNode) -> bool:
        return any(id(n) in self._step_bodies for n in self._enclosing_bodies(node))

    def region(self, node: cst.CSTNode) -> str | None:
        """"forward", "training step", or None (set-up, data loading, evaluation ...)."""
        if self.in_forward(node):
            return "forward"
        if self.in_step(node):
            return "training step"
        return None

    def path_to_region(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """The nodes enclosing `node`, innermost first, up to the body of its region."""
        bodies = self._forward_bodies | self._step_bodies
        for n in self._enclosing_bodies(node):
            if id(n) in bodies:
                return
            yield n
