"""Labs and tools use only what pytest_hpml exports (and the distributed launcher): the rest
of the package is the plugin's own and may change."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_hpml

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_MODULES = {"pytest_hpml", "pytest_hpml.distributed"}


def _sources() -> list[Path]:
    return sorted([*(ROOT / "suites").rglob("*.py"), *(ROOT / "tools").rglob("*.py"),
                   ROOT / "conftest.py"])


def reach_past_the_api(source: str) -> list[str]:
    """Every import of the plugin's internals in a module's source, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("pytest_hpml") and node.module not in ALLOWED_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
            elif node.module == "pytest_hpml":
                for alias in node.names:
                    if alias.name not in pytest_hpml.__all__ and alias.name != "distributed":
                        found.append(f"{node.lineno}: from pytest_hpml import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pytest_hpml.") and alias.name not in ALLOWED_MODULES:
                    found.append(f"{node.lineno}: import {alias.name}")
    return found


def test_the_rule_catches_each_way_of_reaching_past_it() -> None:
    assert reach_past_the_api("from pytest_hpml.measure.timing import measure\n") == [
        "1: from pytest_hpml.measure.timing import ..."]
    assert reach_past_the_api("import pytest_hpml.compare.baselines\n") == [
        "1: import pytest_hpml.compare.baselines"]
    assert reach_past_the_api("from pytest_hpml import _private\n") == [
        "1: from pytest_hpml import _private"]
    assert reach_past_the_api("import pytest_hpml\nfrom pytest_hpml import Hpml, Timing\n"
                              "from pytest_hpml.distributed import run_distributed\n") == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_suites_and_tools_import_only_the_public_api(path: Path) -> None:
    assert reach_past_the_api(path.read_text(encoding="utf-8")) == []


def test_every_exported_name_exists_and_is_documented() -> None:
    api = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    for name in pytest_hpml.__all__:
        assert hasattr(pytest_hpml, name)
        assert name in api, f"{name} is exported but docs/API.md does not document it"
