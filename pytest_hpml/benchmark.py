"""pytest-benchmark's `benchmark` fixture, served by pytest-hpml where pytest-benchmark is not
active (a pytest plugin module; the fixture's object is pytest_hpml.benchmark_fixture's).

Who serves `benchmark` is decided once per run and said in the header:
- pytest-benchmark, where it is active: pytest-hpml leaves its fixture alone;
- pytest-hpml, where it is not: not installed, or blocked with pytest's own `-p no:benchmark`
  (on the command line or in addopts).
Two plugins defining one fixture would leave the choice to the order in which pytest happens to
load them, and pytest-benchmark fails every test whose `benchmark` is not its own (its
makereport checks the type), so the two never compete: one serves, the other stays out.

Where pytest-hpml serves it, the hooks pytest-benchmark declares are declared too, so that a
conftest implementing one (pytest_benchmark_update_machine_info is common) still loads; none of
them is called, and the run says so once.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Generator

import pytest

from pytest_hpml import benchmark_hookspecs
from pytest_hpml.benchmark_fixture import BenchmarkFixture, marker_options
from pytest_hpml.benchmark_options import group_by_parts, run_wide
from pytest_hpml.fixture import Hpml
from pytest_hpml.session import run_of

PYTEST_BENCHMARK_HOOKS = sorted(n for n in vars(benchmark_hookspecs) if n.startswith("pytest_"))
SERVED_KEY = pytest.StashKey[bool]()


def benchmark_plugin_active(config: pytest.Config) -> bool:
    """pytest-benchmark is registered in this run (by its entry point, or -p)."""
    manager = config.pluginmanager
    module = sys.modules.get("pytest_benchmark.plugin")
    return manager.has_plugin("benchmark") or (module is not None
                                                and manager.is_registered(module))


def serves_benchmark(config: pytest.Config) -> bool:
    """Whether pytest-hpml's `benchmark` fixture serves this run."""
    return config.stash.get(SERVED_KEY, False)


class BenchmarkFixturePlugin:
    """The fixture, registered at configure only where pytest-benchmark is not active."""

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest, hpml: Hpml) -> BenchmarkFixture:
        """pytest-benchmark's benchmark fixture on pytest-hpml's timing (see docs/API.md)."""
        options = marker_options(request.node)
        wide = run_wide(request.config)  # pytest-benchmark's options, where declared here
        if wide is not None:
            options.disable_gc = options.disable_gc or bool(wide.benchmark_disable_gc)
            if wide.benchmark_group_by:
                options.group_by = group_by_parts(wide.benchmark_group_by)
        for line in options.not_used:
            run_of(request.config).say_once(line)
        return BenchmarkFixture(hpml, request.node, options)


def declare_pytest_benchmark_hooks(manager: pytest.PytestPluginManager) -> None:
    hook = getattr(manager.hook, PYTEST_BENCHMARK_HOOKS[0], None)
    if hook is None or not hook.has_spec():  # nobody declared them (pytest-benchmark is out)
        manager.add_hookspecs(benchmark_hookspecs)


# -- pytest hooks -------------------------------------------------------------------------------

@pytest.hookimpl(trylast=True)  # after every plugin and conftest the run loads at start
def pytest_configure(config: pytest.Config) -> None:
    served = config.stash[SERVED_KEY] = not benchmark_plugin_active(config)
    if served:
        config.addinivalue_line("markers", "benchmark(group, min_rounds, max_time, min_time, "
                                "disable_gc, precision, confidence): pytest-benchmark's options "
                                "for the benchmark fixture, served by pytest-hpml")
        declare_pytest_benchmark_hooks(config.pluginmanager)
        config.pluginmanager.register(BenchmarkFixturePlugin(), f"hpml-benchmark-{id(config)}")


def pytest_report_header(config: pytest.Config) -> str:
    if not serves_benchmark(config):
        return ("hpml: benchmark fixture: pytest-benchmark's (it is active; -p no:benchmark "
                "gives the fixture to pytest-hpml)")
    installed = importlib.util.find_spec("pytest_benchmark") is not None
    why = "pytest-benchmark is installed, not active" if installed else \
        "pytest-benchmark is not installed"
    return f"hpml: benchmark fixture: pytest-hpml's ({why})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not serves_benchmark(config):
        return
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            marker_options(item)  # a malformed marker stops the run before any test
    implemented = sorted(name for name in PYTEST_BENCHMARK_HOOKS
                         if getattr(config.hook, name).get_hookimpls())
    if implemented:
        run_of(config).say_once(f"{', '.join(implemented)}: pytest-benchmark's hook(s), "
                                "implemented in a conftest, are not called under pytest-hpml")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        # Before the call report is made: the records are judged and sent with it.
        fixture = getattr(item, "funcargs", {}).get("benchmark")
        if isinstance(fixture, BenchmarkFixture):
            fixture.finish()
