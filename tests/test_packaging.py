"""The plugin's own dependencies are what it imports (pytest, tabulate, torch): torchvision,
triton and numpy belong to this repository's suites (the `suites` extra), matplotlib,
nvidia-ml-py and numpy to optional extras that the plugin imports only where they are
installed. A user's suite runs, saves and compares with none of them importable."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
#: Imported by the plugin only where installed (a missing one is said once, never an error), or
#: only by the feature that needs it (hpml.compile_kernel is given a Triton kernel).
OPTIONAL = {"matplotlib": "plots", "pynvml": "nvml", "triton": "kernels", "plotly": "dashboard",
            "numpy": "arrays"}
#: Imported only inside the plugin that runs it: an xdist worker sends its live progress line
#: with xdist's own serializer (pytest_hpml.progress), in a process xdist started.
RUNNING_UNDER = {"xdist"}
#: What only the suites (or the tools) use; pytest plugins among them are left out with -p no:.
SUITES_ONLY = ("triton", "torchvision", "numpy", "scipy")
NO_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirement_names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in requirements}


def third_party_imports(package: Path) -> set[str]:
    """Top-level modules outside the standard library that the package imports anywhere."""
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                node.module else []
            found.update(n.split(".")[0] for n in names)
    return {n for n in found if n not in sys.stdlib_module_names
            and n not in ("pytest_hpml", "_pytest")}


def test_the_dependencies_are_what_the_plugin_imports() -> None:
    imported = third_party_imports(ROOT / "pytest_hpml")
    required = _requirement_names(_project()["dependencies"])
    assert required == imported - set(OPTIONAL) - RUNNING_UNDER, (required, imported)
    extras = _project()["optional-dependencies"]
    for module, extra in OPTIONAL.items():
        assert module in imported and extras[extra], (module, extra)
    # The suites' own packages are an extra, never what installing the plugin pulls.
    assert not {"triton", "torchvision", "numpy", "pytest-xdist"} & required
    assert {"triton", "torchvision", "numpy"} <= _requirement_names(extras["suites"])
    assert "suites" in (ROOT / "Makefile").read_text(encoding="utf-8")


BLOCKER = f"""
import sys
for name in {SUITES_ONLY + tuple(OPTIONAL)!r}:
    sys.modules[name] = None  # `import name` raises ImportError, as if not installed
"""

# The test is about packaging, not verdicts: a 10k-element add lands in one of two modes per
# process on this machine (about 3 us or 5.5 us, whatever the code), and a one-process save
# cannot know the other, so the comparison allows a change of 4x.
USER_SUITE = """
import pytest
import torch

@pytest.mark.hpml(tolerance=3.0)
def test_add(hpml):
    a, b = torch.rand(10_000), torch.rand(10_000)
    timing = hpml.time(torch.add, a, b)
    hpml.record_bandwidth("bandwidth", 3 * 4 * a.numel(), timing)
    hpml.check_close(timing.result, a + b)
"""


def test_a_user_suite_runs_with_only_the_plugin_installed(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    blocker = pytester.mkdir("site")
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    monkeypatch.setenv("PYTHONPATH", str(blocker))
    pytester.makefile(".ini", pytest="[pytest]\nhpml_max_time = 0.05\n"
                                     "hpml_baseline_processes = 1\n")
    pytester.makepyfile(test_user=USER_SUITE)
    check = pytester.run(sys.executable, "-c", "import triton")
    assert check.ret != 0  # the blocker works: the suites' packages cannot be imported
    save = pytester.runpytest_subprocess(*NO_PLUGINS, "--hpml-save-baseline",
                                         "--hpml-baselines=bl")
    save.assert_outcomes(passed=1)
    compare = pytester.runpytest_subprocess(*NO_PLUGINS, "--hpml-compare",
                                            "--hpml-baselines=bl", "--hpml-report=r.md",
                                            "--hpml-plots=plots")
    compare.assert_outcomes(passed=1)
    compare.stdout.fnmatch_lines(["*matplotlib is not installed*"])
    assert "Comparison with baseline" in (pytester.path / "r.md").read_text()


def test_a_run_says_no_module_was_imported_before_pytest_could_rewrite_it(
        pytester: pytest.Pytester) -> None:
    # A plugin module imported by another before pytest registered it warns in every user's
    # run ("Module already imported so cannot be rewritten: pytest_hpml.benchmark_options").
    pytester.makepyfile("def test_a(hpml):\n    hpml.record('x', 1.0, unit='s')\n")
    result = pytester.runpytest_subprocess("-p", "no:benchmark", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*cannot be rewritten*")
