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

import ast
from collections.abc import Iterator

from torchferry.scan.syntax import SourceTree, full_name

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

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_STACKED = (ast.ClassDef, *_FUNCTIONS, *_LOOPS)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _last_name(node: ast.AST) -> str:
    return (full_name(node) or "").rsplit(".", 1)[-1]


def _steps_optimizer(receiver: ast.AST) -> bool:
    name = _last_name(receiver).lower()
    return name.startswith("opt") or "optim" in name or "scaler" in name


def is_step_call(call: ast.Call) -> bool:
    """`loss.backward()`, `accelerator.backward(loss)`, `optimizer.step()`, `scaler.step(opt)`."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in BACKWARD_METHODS:
        return True
    return func.attr == "step" and _steps_optimizer(func.value)


class _Index:
    """Classes, functions, step calls and the call graph, read off the walk `SourceTree` made (no walk of its own)."""

    def __init__(self, tree: SourceTree) -> None:
        self.classes: dict[str, ast.ClassDef] = {}
        self.owner: dict[Function, ast.ClassDef | None] = {}
        self.module_functions: dict[str, Function] = {}
        self.calls: list[tuple[ast.Call, list[ast.AST]]] = []  # each call with its enclosing stack
        self.forward_roots: set[str] = set()  # module-level functions set as a forward or hook
        # node -> the innermost class, function or loop around it (None at the top level)
        self._around: dict[ast.AST, ast.AST | None] = {}
        for node in tree.nodes():
            parent = tree.parent(node)
            around = parent if isinstance(parent, _STACKED) else self._around.get(parent)
            self._around[node] = around
            self._note(node, around)

    def _stack(self, around: ast.AST | None) -> list[ast.AST]:
        """The classes, functions and loops around a node, outermost first, from the innermost one."""
        stack = []
        while around is not None:
            stack.append(around)
            around = self._around[around]
        return stack[::-1]

    def _note(self, node: ast.AST, around: ast.AST | None) -> None:
        if isinstance(node, ast.ClassDef):
            self.classes.setdefault(node.name, node)
        elif isinstance(node, _FUNCTIONS):
            self.owner[node] = around if isinstance(around, ast.ClassDef) else None
            if around is None:
                self.module_functions.setdefault(node.name, node)
        elif isinstance(node, ast.Call):
            self.calls.append((node, self._stack(around)))
            self._note_hook(node)
        elif isinstance(node, ast.Assign):
            self._note_forward_assignment(node)

    def _note_hook(self, call: ast.Call) -> None:
        if isinstance(call.func, ast.Attribute) and call.func.attr in FORWARD_HOOKS and call.args:
            if isinstance(call.args[0], ast.Name):
                self.forward_roots.add(call.args[0].id)

    def _note_forward_assignment(self, node: ast.Assign) -> None:
        if not any(isinstance(t, ast.Attribute) and t.attr == "forward" for t in node.targets):
            return
        value = node.value
        if isinstance(value, ast.Call) and _last_name(value.func) in ("MethodType", "partial") and value.args:
            value = value.args[0]
        if isinstance(value, ast.Name):
            self.forward_roots.add(value.id)


class Regions:
    """Which nodes of one source are in a forward or a training step (see the module docstring)."""

    def __init__(self, tree: SourceTree) -> None:
        self._tree = tree
        index = _Index(tree)
        self._index = index
        # Each class's methods, and the calls inside each function (nested ones included), found once:
        # the call graph below asks for them per function.
        self._methods_of: dict[ast.ClassDef, list[Function]] = {}
        for function, owner in index.owner.items():
            if owner is not None:
                self._methods_of.setdefault(owner, []).append(function)
        self._calls_in: dict[Function, list[ast.Call]] = {}
        for call, stack in index.calls:
            for enclosing in dict.fromkeys(n for n in stack if isinstance(n, _FUNCTIONS)):
                self._calls_in.setdefault(enclosing, []).append(call)
        self.module_classes = self._find_module_classes()
        self.forward_roots = self._forward_roots()  # forward methods and functions set as forward or hook
        self.forward_functions = self._reach(self.forward_roots)
        self.step_functions, self.step_loops = self._find_steps()
        # A body is its statements: a node is in a region when it is, or is inside, one of them.
        self._forward_bodies = {id(s) for f in self.forward_functions for s in f.body}
        self._step_bodies = ({id(s) for f in self.step_functions for s in f.body}
                             | {id(s) for loop in self.step_loops for s in loop.body})

    @property
    def module_functions(self) -> dict[str, Function]:
        """The functions defined at the top level of this source, by name."""
        return self._index.module_functions

    # -- classes and forwards ------------------------------------------------------------------

    def _is_module_base(self, base: ast.AST, known: set[str]) -> bool:
        qualname = self._tree.qualname(base) or ""
        last = qualname.rsplit(".", 1)[-1]
        return (qualname.startswith("torch.nn.") or last in known
                or last.endswith(("Module", "PreTrainedModel")))

    def _find_module_classes(self) -> set[str]:
        known: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self._index.classes.items():
                if name not in known and any(self._is_module_base(b, known) for b in cls.bases):
                    known.add(name)
                    changed = True
        return known

    def _methods(self, cls: ast.ClassDef) -> list[Function]:
        return self._methods_of.get(cls, [])

    def _forward_roots(self) -> set[Function]:
        roots = {f for name in self.module_classes for f in self._methods(self._index.classes[name])
                 if f.name == "forward"}
        functions = self._index.module_functions
        roots |= {functions[n] for n in self._index.forward_roots if n in functions}
        return roots

    def _callees(self, function: Function) -> Iterator[Function]:
        """Functions of this source that `function` calls as `self.m(...)` or `f(...)`."""
        cls = self._index.owner.get(function)
        for call in self._calls_in.get(function, ()):
            func = call.func
            if isinstance(func, ast.Name) and func.id in self._index.module_functions:
                yield self._index.module_functions[func.id]
            elif (cls is not None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                  and func.value.id == "self"):
                yield from (m for m in self._methods(cls) if m.name == func.attr)

    def _reach(self, roots: set[Function]) -> set[Function]:
        reached, todo = set(), list(roots)
        while todo:
            function = todo.pop()
            if function not in reached:
                reached.add(function)
                todo.extend(self._callees(function))
        return reached

    # -- training steps ------------------------------------------------------------------------

    def _framework_steps(self) -> set[Function]:
        found = set()
        for function, owner in self._index.owner.items():
            name = function.name
            if owner is not None and (name in STEP_METHODS or (name in TRAINER_STEP_METHODS and any(
                    _last_name(b).endswith("Trainer") for b in owner.bases))):
                found.add(function)
        return found

    def _calls_step_function(self, call: ast.Call, step_names: set[str]) -> bool:
        func = call.func
        if isinstance(func, ast.Name):
            return func.id in step_names
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "self" and func.attr in step_names)

    def _find_steps(self) -> tuple[set[Function], set[ast.For | ast.AsyncFor | ast.While]]:
        functions, loops = self._framework_steps(), set()
        while True:
            names = {f.name for f in functions}
            before = (len(functions), len(loops))
            for call, stack in self._index.calls:
                if not (is_step_call(call) or self._calls_step_function(call, names)):
                    continue
                innermost = next((n for n in reversed(stack) if isinstance(n, (*_FUNCTIONS, *_LOOPS))), None)
                if isinstance(innermost, _LOOPS):
                    loops.add(innermost)
                elif isinstance(innermost, _FUNCTIONS):
                    functions.add(innermost)
            if (len(functions), len(loops)) == before:
                return functions, loops

    # -- queries -------------------------------------------------------------------------------

    def _in(self, node: ast.AST, bodies: set[int]) -> bool:
        if id(node) in bodies:
            return True
        return any(id(n) in bodies for n in self._tree.ancestors(node))

    def in_forward(self, node: ast.AST) -> bool:
        return self._in(node, self._forward_bodies)

    def in_step(self, node: ast.AST) -> bool:
        return self._in(node, self._step_bodies)

    def region(self, node: ast.AST) -> str | None:
        """"forward", "training step", or None (set-up, data loading, evaluation ...)."""
        if self.in_forward(node):
            return "forward"
        if self.in_step(node):
            return "training step"
        return None

    def path_to_region(self, node: ast.AST) -> Iterator[ast.AST]:
        """The nodes enclosing `node`, innermost first, up to the statement of its region's body (included)."""
        bodies = self._forward_bodies | self._step_bodies
        if id(node) in bodies:
            return
        for n in self._tree.ancestors(node):
            yield n
            if id(n) in bodies:
                return
