"""Capture readiness: what in a user's training step would break or silently change under CUDA-graph
capture, found before capturing, each with its file, line and the fix.

Checks only; nothing runs. It reads the source of the code that runs inside the step (the
model's ``forward``, the loss, or the user's whole step function and the functions of theirs it
calls) and looks at the built optimizer (the findings: docs/cli.md, "Your own training step");
the source checks are syntactic, so each finding quotes what it saw.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_TORCH_DIR = Path(torch.__file__).resolve().parent
_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
_FACTORIES = {"tensor", "zeros", "ones", "empty", "randn", "rand", "randint", "arange", "full",
              "linspace", "eye", "as_tensor"}
_DYNAMIC = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_REDUCTIONS = {"any", "all", "sum", "max", "min", "mean", "item", "norm", "isfinite", "isnan",
               "isinf"}
_CALLEE_DEPTH = 3  # a whole step's own functions are read this many calls deep
_SCHEDULERS = {"LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
               "ReduceLROnPlateau", "OneCycleLR", "CyclicLR", "LinearLR", "PolynomialLR",
               "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler", "MultiplicativeLR",
               "ConstantLR"}
_CAPTURABLE_OPTIMIZERS = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "ASGD", "Rprop", "Adadelta",
                          "Adagrad", "SparseAdam", "LBFGS", "RMSprop"}

FIXES = {
    "host-sync": "read values after replay() instead, outside the captured step",
    "cpu-tensor": "create the tensor once on the GPU before capture (pass device=...), or register "
                  "it as a buffer",
    "dynamic-shape": "keep shapes fixed: use a mask multiply or torch.where(cond, a, b) instead",
    "data-dependent-branch": "compute both branches and select with torch.where, or move the "
                             "decision outside the captured step",
    "frozen-python-state": "keep the state in a GPU tensor (as the article's static_counter) and "
                           "update it in place",
    "lr-schedule": "pass lr as a GPU tensor (torch.tensor(lr, device=...)) with capturable=True and "
                   "step the scheduler outside the graph (a whole step's after_step), so replays "
                   "read the lr it writes in place",
    "grad-scaler": "use bf16 autocast, which needs no GradScaler; with fp16 keep "
                   "scaler.scale(loss).backward() in the step and move scaler.step(optimizer) and "
                   "scaler.update() into after_step (the build dict's function the tool runs after "
                   "every step, outside the graph)",
    "clip-nonfinite-check": "leave error_if_nonfinite off (the default): clip_grad_norm_ itself is "
                            "capturable",
    "optimizer-not-capturable": "build the optimizer with capturable=True (or use SGD)",
    "extra-generator": "use the default generator, or register yours with "
                       "graph.register_generator_state(generator)",
}


@dataclass(frozen=True)
class Finding:
    kind: str  # one of FIXES
    file: str
    line: int
    code: str  # the source line
    problem: str

    @property
    def fix(self) -> str:
        return FIXES[self.kind]

    def one_line(self) -> str:
        return f"{Path(self.file).name}:{self.line} `{self.code}`: {self.problem} (fix: {self.fix})"


def _user_code(obj: Any) -> bool:
    try:
        path = Path(inspect.getsourcefile(obj) or "").resolve()
    except (TypeError, OSError):
        return False
    return bool(str(path)) and _TORCH_DIR not in path.parents


def _parse(function: Callable) -> tuple[ast.AST, str, int, list[str]] | None:
    """The function's syntax tree, file, first line and source lines (None without source)."""
    try:
        lines, first = inspect.getsourcelines(function)
        file = inspect.getsourcefile(function) or "<unknown>"
    except (TypeError, OSError):
        return None
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return tree, file, first, source.splitlines()


def _name(node: ast.AST) -> str:
    """The last name of a call target: ``torch.zeros`` -> zeros, ``x.item`` -> item."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_torch_call(call: ast.Call) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "torch"


def _step_findings(tree: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, kind, problem) for code that runs inside the captured step."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if isinstance(node.func, ast.Attribute) and name in _SYNC_METHODS and not node.args:
                yield node, "host-sync", f".{name}() copies a value to the host (a synchronisation)"
            elif name == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu" for a in node.args):
                yield node, "host-sync", ".to('cpu') copies to the host (a synchronisation)"
            elif isinstance(node.func, ast.Name) and name == "print":
                yield node, "host-sync", "print() of a tensor synchronises with the host"
            elif isinstance(node.func, ast.Name) and name in ("float", "int", "bool") and node.args \
                    and not isinstance(node.args[0], ast.Constant):
                yield node, "host-sync", f"{name}() of a tensor synchronises with the host"
            elif name == "synchronize":
                yield node, "host-sync", "an explicit synchronize inside the step"
            elif _is_torch_call(node) and name in _FACTORIES and not any(
                    k.arg == "device" for k in node.keywords):
                yield node, "cpu-tensor", f"torch.{name}(...) without device= makes a CPU tensor"
            elif name in _DYNAMIC:
                yield node, "dynamic-shape", f"{name} returns a data-dependent number of elements"
            elif _is_torch_call(node) and name == "where" and len(node.args) == 1:
                yield node, "dynamic-shape", "torch.where(cond) returns data-dependent indices"
            elif name == "Generator":
                yield node, "extra-generator", "a torch.Generator made inside the step"
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Compare):
            yield node, "dynamic-shape", "indexing with a boolean mask gives a data-dependent shape"
        elif isinstance(node, (ast.If, ast.While)) and any(
                isinstance(n, ast.Call) and _name(n.func) in _REDUCTIONS for n in ast.walk(node.test)):
            yield node, "data-dependent-branch", "a branch decided by a tensor's value"
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute) and \
                isinstance(node.target.value, ast.Name) and node.target.value.id == "self" and \
                isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)):
            yield node, "frozen-python-state", f"self.{node.target.attr} is a Python number changed in the step"


def _receiver(call: ast.Call) -> str:
    """The name a method is called on: ``self.scaler.step()`` -> scaler (lower case)."""
    func = call.func
    return _name(func.value).lower() if isinstance(func, ast.Attribute) else ""


def _whole_step_findings(tree: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, kind, problem) that only a whole step holds: the rest of a training loop."""
    yield from _step_findings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, receiver = _name(node.func), _receiver(node)
        if name in ("step", "update", "unscale_") and "scaler" in receiver:
            yield node, "grad-scaler", (f"{receiver}.{name}() reads on the host whether the "
                                        "gradients overflowed, which capture refuses")
        elif name == "step" and "sched" in receiver:
            yield node, "lr-schedule", (f"{receiver}.step() inside the step changes the learning "
                                        "rate as a Python float: replays keep the one captured")
        elif name in ("clip_grad_norm_", "clip_grad_norm") and any(
                k.arg == "error_if_nonfinite" and not (isinstance(k.value, ast.Constant)
                                                       and k.value.value is False)
                for k in node.keywords):
            yield node, "clip-nonfinite-check", (f"{name}(..., error_if_nonfinite=...) checks the "
                                                 "norm on the host")


def _callees(function: Callable, depth: int = _CALLEE_DEPTH,
             seen: set[Callable] | None = None) -> list[Callable]:
    """``function`` and the user's own functions it calls by name (through its globals and
    closure), ``depth`` calls deep, each once."""
    seen = set() if seen is None else seen
    if function in seen or not inspect.isfunction(function) or not _user_code(function):
        return []
    seen.add(function)
    found: list[Callable] = [function]
    parsed = _parse(function)
    if parsed is None or depth <= 0:
        return found
    try:
        names = inspect.getclosurevars(function)
    except (TypeError, ValueError):
        return found
    visible = {**names.builtins, **names.globals, **names.nonlocals}
    for node in ast.walk(parsed[0]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = visible.get(node.func.id)
            if callee is not None and inspect.isfunction(callee):
                found += _callees(callee, depth - 1, seen)
    return found


def _tensor_lr(optimizer: torch.optim.Optimizer | None) -> bool:
    """Whether every param group's learning rate is a tensor (a scheduler updates it in place)."""
    return optimizer is not None and all(isinstance(group.get("lr"), torch.Tensor)
                                         for group in optimizer.param_groups)


def _builder_findings(tree: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, kind, problem) in the function that builds the step."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in _SCHEDULERS:
                yield node, "lr-schedule", f"{name} changes the Python float learning rate"
            elif name in _CAPTURABLE_OPTIMIZERS and not any(k.arg == "capturable" for k in node.keywords):
                yield node, "optimizer-not-capturable", f"{name}(...) is built without capturable=True"


def _located(function: Callable, found: Callable[[ast.AST], Iterator]) -> list[Finding]:
    parsed = _parse(function)
    if parsed is None:
        return []
    tree, file, first, lines = parsed
    findings = []
    for node, kind, problem in found(tree):
        line = getattr(node, "lineno", 1)
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        findings.append(Finding(kind, file, first + line - 1, code[:120], problem))
    return findings


def check_step(builder: Callable, model: torch.nn.Module | None, loss: Callable | None,
               optimizer: torch.optim.Optimizer | None, step: Callable | None = None,
               after_step: Callable | None = None) -> list[Finding]:
    """Every finding in the step built by ``builder``, in file and line order, without repeats:
    the four-part form's model and loss, or the whole ``step`` and the functions of the user's it
    calls (``after_step`` runs outside the graph, so it is not read)."""
    findings: list[Finding] = []
    classes = {type(module) for module in model.modules()} if model is not None else set()
    for cls in classes:
        forward = getattr(cls, "forward", None)
        if forward is not None and _user_code(forward):
            findings += _located(forward, _step_findings)
    if step is not None:
        for function in _callees(step):
            findings += _located(function, _whole_step_findings)
    if loss is not None and _user_code(loss) and inspect.isfunction(loss):
        findings += _located(loss, _step_findings)
    if _user_code(builder):
        builder_findings = _located(builder, _builder_findings)
        if _tensor_lr(optimizer):  # a scheduler writes a tensor lr in place: replays read it
            builder_findings = [f for f in builder_findings if f.kind != "lr-schedule"]
        findings += builder_findings
    parameters = [p for group in (optimizer.param_groups if optimizer is not None else [])
                  for p in group["params"]]
    on_gpu = any(parameter.is_cuda for parameter in parameters)
    if optimizer is not None and on_gpu and type(optimizer).__name__ in _CAPTURABLE_OPTIMIZERS \
            and not all(group.get("capturable", False) for group in optimizer.param_groups):
        if not any(f.kind == "optimizer-not-capturable" for f in findings):
            findings.append(Finding("optimizer-not-capturable", "<optimizer>", 0,
                                    type(optimizer).__name__,
                                    f"{type(optimizer).__name__} has capturable=False"))
    unique = {(f.kind, f.file, f.line): f for f in findings}
    return sorted(unique.values(), key=lambda f: (f.file, f.line, f.kind))


def check_training_step(builder: Callable, step: Any) -> list[Finding]:
    """``check_step`` over a built replica (``workloads.TrainingStep``)."""
    return check_step(builder, step.model, step.loss_fn, step.optimizer, step.whole_step,
                      step.after_step)
