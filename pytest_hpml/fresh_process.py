"""Being a fresh process of another run (a pytest plugin module): the option --hpml-rerun=SPEC,
and what the process does with it, as pytest_hpml.rerun (which starts such processes)
describes: the outer run's own options back to their defaults, only the spec's tests collected
and run, the rows a test needs (hpml.wants), and what they measured written back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.session import OUTER_RUN_ONLY, PYTEST_OUTER_RUN_ONLY, add_option, run_of


def last_lines(output: str) -> str:
    """The last three lines of a process's output, on one line."""
    return " | ".join(output.strip().splitlines()[-3:])


class FreshProcess:
    """This process is a fresh process of another run: what it runs and what it gives back."""

    def __init__(self, config: pytest.Config, spec: dict[str, Any]) -> None:
        self.config = config
        self.order: list[str] = list(spec["nodeids"])
        self.nodeids: set[str] = set(self.order)
        self.result = Path(spec["result"])
        self.files = {config.rootpath / n.split("::", 1)[0] for n in self.nodeids}
        self.collected: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.errors: list[str] = []

    def wanted(self, path: Path) -> bool:
        return any(path == f or path in f.parents for f in self.files)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        keep = [i for i in items if i.nodeid in self.nodeids]
        rest = [i for i in items if i.nodeid not in self.nodeids]
        if rest:
            config.hook.pytest_deselected(items=rest)
        # The files in the order the spec asks for them (its first tests are those that matter
        # most, should the process be stopped at a budget), each file's tests in collection
        # order, so that a module's fixtures are set up once.
        first = {}
        for index, nodeid in enumerate(self.order):
            first.setdefault(nodeid.split("::", 1)[0], index)
        keep.sort(key=lambda i: first.get(i.nodeid.split("::", 1)[0], len(first)))
        items[:] = keep
        self.collected = [i.nodeid for i in keep]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid or 'collection'}: "
                               + last_lines(str(report.longrepr)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed or report.when == "call" or report.skipped:
            before = self.outcomes.get(report.nodeid)
            if before != "failed":
                self.outcomes[report.nodeid] = report.outcome

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        document = {"records": [r.to_dict() for r in run_of(self.config).records],
                    "collected": self.collected, "outcomes": self.outcomes, "errors": self.errors,
                    "interrupted": session.exitstatus == pytest.ExitCode.INTERRUPTED}
        self.result.write_text(json.dumps(document), "utf-8")  # NaN, inf: run_fresh reads null


FRESH_KEY = pytest.StashKey[FreshProcess]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-rerun", rerun=False, metavar="SPEC", default=None,
               help="internal: a fresh process of another run (SPEC: its node ids, rows, "
                    "profile, result file); set by pytest-hpml itself")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    spec_path = config.option.hpml_rerun
    if not spec_path:
        return
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    # Before any plugin configures itself from them: the outer run's options are its own.
    for dest, default in {**PYTEST_OUTER_RUN_ONLY, **OUTER_RUN_ONLY}.items():
        if hasattr(config.option, dest):
            setattr(config.option, dest, default)
    config.option.hpml_profile = spec["profile"]
    run_of(config).rows_wanted = {n: frozenset(ids) for n, ids in spec.get("rows", {}).items()}
    fresh = config.stash[FRESH_KEY] = FreshProcess(config, spec)
    config.pluginmanager.register(fresh, f"hpml-fresh-{id(config)}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    fresh = config.stash.get(FRESH_KEY, None)
    if fresh is None or fresh.wanted(collection_path):
        return None  # pytest and other plugins decide
    return True
