"""The shape of src/odradek's import graph, read from the modules' own import statements, also
those inside functions and under TYPE_CHECKING: an import moved out of sight still ties its
modules together. Two rules (docs/architecture.md, "Layers"):

- no import cycle between modules (a package's __init__ importing its own submodules is not one);
- no module imports a module of a higher layer (log/, protocol/, zk/ never import broker/,
  controller/, cli/, ...).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from odradek.common.graphs import strongly_connected

SRC = Path(__file__).resolve().parents[1] / "src"

#: Lowest first. A module belongs to the longest prefix listed; it may import its own layer and
#: the layers below it. docs/architecture.md states the same table.
LAYERS: list[tuple[str, ...]] = [
    ("odradek.common",),
    ("odradek.protocol",),
    ("odradek.log", "odradek.zk"),
    ("odradek.controller", "odradek.coordinator", "odradek.security"),
    ("odradek.broker",),
    ("odradek.client", "odradek.cli.output"),
    ("odradek.admin",),
    ("odradek.cluster", "odradek.spark"),
    ("odradek.bench", "odradek.ui", "odradek.faults", "odradek.fuzz"),
    ("odradek.cli", "odradek.__main__", "odradek"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "odradek").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the odradek modules it imports (a name imported from a package is its submodule
    when one of that name exists)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if _is_package(path) else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in modules else source)
        deps = set()
        for target in targets:
            while target and target not in modules:  # `import odradek.x.y` of an attribute path
                target = target.rpartition(".")[0]
            if target.startswith("odradek") and target != name:
                if _is_package(path) and target.startswith(name + "."):
                    continue  # a package importing its own submodules
                deps.add(target)
        graph[name] = deps
    return graph


def layer_of(module: str) -> int:
    best = (-1, -1)
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), index)
    return best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module."""
    return [sorted(c) for c in strongly_connected(graph) if len(c) > 1]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(_modules())


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_no_module_imports_a_higher_layer(graph: dict[str, set[str]]) -> None:
    upward = sorted(f"{module} (layer {layer_of(module)}) imports {dep} (layer {layer_of(dep)})"
                    for module, deps in graph.items() for dep in deps if layer_of(dep) > layer_of(module))
    assert upward == []


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert sorted(m for m in graph if layer_of(m) < 0) == []


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    """The rules above can fail: a made-up graph with both faults is caught."""
    fake = {"odradek.log.a": {"odradek.log.b"}, "odradek.log.b": {"odradek.log.a", "odradek.broker.x"},
            "odradek.broker.x": set()}
    assert cycles(fake) == [["odradek.log.a", "odradek.log.b"]]
    assert layer_of("odradek.broker.x") > layer_of("odradek.log.b")
    assert layer_of("odradek.cli.output") < layer_of("odradek.admin.topic_command") < layer_of("odradek.cli.main")
