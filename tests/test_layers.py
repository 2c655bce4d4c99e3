"""The plugin's imports run one way: hook modules (the pytest plugin modules plugin.py wires,
and the fixture) use the stage packages (measure, compare, machine, report, distributed); a
stage package never imports a hook module or the fixture; and no module imports itself back
through any chain, at module level or inside a function. Imports under `if TYPE_CHECKING:`
are annotations only and run nothing, so they are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_hpml import plugin

PACKAGE = Path(plugin.__file__).resolve().parent
STAGES = ("measure", "compare", "machine", "report", "distributed")
#: Hook modules: what plugin.py wires, and the fixture's object.
HOOKS = {*plugin.HOOK_MODULES, "pytest_hpml.plugin", "pytest_hpml.fixture",
         "pytest_hpml.recorder"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, known: set[str]) -> set[str]:
    """The package's modules `source` imports (anywhere but under TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pytest_hpml"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.startswith("pytest_hpml"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found & known


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imports_of(path.read_text(encoding="utf-8"), known) - {name}
            for name, path in modules.items()}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """'stage -> hook module' for every import a stage package makes of a hook module."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items()
                  if module.split(".")[1:2] and module.split(".")[1] in STAGES
                  for target in targets if target in HOOKS)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    pending = list(graph.get(start, ()))
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending += graph.get(node, ())
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other through some chain (each a cycle, or
    several sharing modules), sorted."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {frozenset(n for n in reach[node] if node in reach[n]) for node in graph
              if node in reach[node]}
    return sorted(sorted(group) for group in groups)


def test_the_rules_catch_a_stage_importing_a_hook_module_and_a_cycle() -> None:
    graph = {"pytest_hpml.measure.timing": {"pytest_hpml.session"},
             "pytest_hpml.session": set(),
             "pytest_hpml.selection": {"pytest_hpml.session"}}
    assert layer_violations(graph) == ["pytest_hpml.measure.timing -> pytest_hpml.session"]
    assert cycles(graph) == []
    graph["pytest_hpml.session"] = {"pytest_hpml.selection"}
    assert cycles(graph) == [["pytest_hpml.selection", "pytest_hpml.session"]]
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from pytest_hpml.fixture import Hpml\n"
              "def f():\n    from pytest_hpml.compare import baselines\n")
    known = {"pytest_hpml.fixture", "pytest_hpml.compare", "pytest_hpml.compare.baselines"}
    assert imports_of(source, known) == {"pytest_hpml.compare.baselines"}


def test_no_stage_package_imports_a_hook_module_or_the_fixture() -> None:
    assert layer_violations(import_graph()) == []


def test_the_plugin_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("name", sorted(_modules()), ids=str)
def test_no_module_is_over_400_lines(name: str) -> None:
    lines = _modules()[name].read_text(encoding="utf-8").count("\n")
    assert lines <= 400, f"{name} has {lines} lines: split it by concern"
