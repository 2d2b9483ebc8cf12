"""The package's layers: each layer of profiler_core imports only the layers below it, and no
module imports itself through others (a cycle), counting imports inside functions too. Imports under
``if TYPE_CHECKING:`` are for annotations only and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["spec", "timing", "analysis", "storage", "engine", "orchestration", "sweep", "cli"]
MAX_MODULE_LINES = 800


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path
            for package in ("profiler_core", "dashboard")
            for path in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` when that is a
    module, else ``a``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "profiler_core" and len(parts) > 2 and parts[1] in LAYERS:
        return parts[1]
    return None


def test_each_layer_imports_only_layers_below_it():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        for target in imported:
            target_layer = _layer(target)
            if layer and target_layer and LAYERS.index(target_layer) > LAYERS.index(layer):
                wrong.append(f"{module} ({layer}) imports {target} ({target_layer})")
            if module.startswith("profiler_core") and target.startswith("dashboard"):
                wrong.append(f"{module} imports the dashboard's {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            connect(node)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["profiler_core", "dashboard"])
def test_no_module_over_the_line_limit(package):
    long = {str(path.relative_to(ROOT)): lines
            for path in (ROOT / package).rglob("*.py")
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
