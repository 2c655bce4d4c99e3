"""The state of one pytest-hpml run, shared by the plugin's modules through config.stash: the
records gathered from the tests, the rows of tests that did not pass, the outputs written and
the one-line messages of the terminal summary (a pytest plugin module: it creates the state
first), and whether the run uses the plugin at all. It imports no other hook module of the
plugin."""

from __future__ import annotations

import argparse
import ast
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.distributed import job
from pytest_hpml.results import Record


class HpmlRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: Why this run uses the plugin (None: not so far). Until it does, the plugin changes
        #: nothing in the process: a suite that never uses it runs as without it.
        self.used_because: str | None = None
        self.used_from_start = False
        self._on_use: list[Callable[[], None]] = []
        self.records: list[Record] = []
        # Rows of tests that did not pass (failed, xfail, an error in teardown): reported, never
        # saved.
        self.failed_ids: set[str] = set()
        self.ran = 0  # tests whose call phase ran (in this process or an xdist worker)
        self.messages: list[str] = []  # said once each in the terminal summary
        self.written: list[str] = []  # outputs written at the end, "wrote PATH" lines
        #: Metrics a save started a new level for, "record metric: before -> after".
        self.new_levels: list[str] = []
        # When the run began (time.monotonic(), as pytest configured it): the run's own time,
        # which a save's budget is a fraction of.
        self.started = time.monotonic()
        #: In a fresh process that confirms some rows of a test: those rows' ids, by the
        #: test's node id (hpml.wants); a test not named here makes every row.
        self.rows_wanted: dict[str, frozenset[str]] = {}

    def say_once(self, message: str) -> None:
        if message not in self.messages:
            self.messages.append(message)

    def when_used(self, act: Callable[[], None]) -> None:
        """Run `act` once this run uses the plugin: now if it does already."""
        if self.used_because is None:
            self._on_use.append(act)
        else:
            act()

    def use(self, because: str) -> None:
        """This run uses the plugin from now on: what waited for that happens now."""
        if self.used_because is not None:
            return
        self.used_because = because
        for act in self._on_use:
            act()
        self._on_use.clear()


RUN_KEY = pytest.StashKey[HpmlRun]()


def run_of(config: pytest.Config) -> HpmlRun:
    """The run's state, made on first use (any plugin module's configure may come first)."""
    if RUN_KEY not in config.stash:
        run = config.stash[RUN_KEY] = HpmlRun(config)
        run.used_because = _used_at_start(config)
        run.used_from_start = run.used_because is not None
    return config.stash[RUN_KEY]


def is_controller(config: pytest.Config) -> bool:
    """True unless this is an xdist worker: only the controller writes files (see
    writes_outputs for the ranks of a torchrun or srun job)."""
    return not hasattr(config, "workerinput")


def writes_outputs(config: pytest.Config) -> bool:
    """True in the one process of a run that gathers its records and writes its reports,
    exports and baselines: not an xdist worker, and not a non-zero rank of a torchrun or srun
    job (rank 0 gathers every rank's records: pytest_hpml.ranks)."""
    return is_controller(config) and not job.is_secondary_rank()


def judges(config: pytest.Config) -> bool:
    """False in a non-zero rank of a torchrun or srun job: rank 0 judges the records it
    gathered from every rank. (An xdist worker judges its own tests.)"""
    return not job.is_secondary_rank()


def xdist_workers(config: pytest.Config) -> int:
    """The number of xdist workers this run starts (0 without -n)."""
    value = getattr(config.option, "numprocesses", None)
    if value in (None, 0):
        return 0
    if isinstance(value, int):
        return value
    return os.cpu_count() or 1  # "auto" and "logical": xdist picks about one per core


def _used_at_start(config: pytest.Config) -> str | None:
    """Why this run uses the plugin from its start: an --hpml-* option on the command line, or
    an hpml_* setting in the ini file; None otherwise."""
    given = [a.split("=", 1)[0] for a in config.invocation_params.args
             if isinstance(a, str) and a.startswith("--hpml-")]
    if given:
        return f"{given[0]} given"
    for dest in PINNED:
        if config.inipath is not None and _ini_raw(config, dest) not in (None, "", False):
            return f"{dest} set in {Path(config.inipath).name}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    run_of(config)


def uses_the_plugin(path: Path) -> bool:
    """Whether the Python file at `path` uses the plugin in its code: a test or fixture that
    takes the `hpml` fixture, an `hpml*` marker, or pytest_hpml imported or named as a plugin.
    A word in a comment or a string is no use."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False  # pytest says what is wrong with the file when it imports it
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(a.arg == "hpml" for a in (*node.args.posonlyargs, *node.args.args,
                                             *node.args.kwonlyargs)):
                return True
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("hpml") and isinstance(node.value, ast.Attribute) and \
                    node.value.attr == "mark":
                return True
        elif isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "pytest_hpml" for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] == "pytest_hpml":
                return True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.split(".")[0] == "pytest_hpml":  # pytest_plugins = ["pytest_hpml..."]
                return True
    return False


def pytest_collectstart(collector: pytest.Collector) -> None:
    # pytest is about to collect this node: a directory's conftest.py, or a test module, is
    # imported next. The environment must be set before that import where the code uses the
    # plugin (Triton's interpreter is chosen when a kernel is decorated). Only the nodes on the
    # way to what was selected are collected: a sibling of the selected file is never read.
    run = run_of(collector.config)
    if run.used_because is not None:
        return
    if isinstance(collector, pytest.Directory):
        path = collector.path / "conftest.py"
    elif isinstance(collector, pytest.Module):
        path = collector.path
    else:
        return
    if path.is_file() and uses_the_plugin(path):
        where = f"{collector.path.name}/conftest.py" if path.name == "conftest.py" \
            else path.name
        run.use(f"{where} uses it")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that reaches the fixture or its markers some other way (a fixture of a plugin, a
    # marker applied by a hook): known once the tests are collected, before any runs.
    run = run_of(config)
    if run.used_because is not None:
        return
    for item in items:
        if "hpml" in getattr(item, "fixturenames", ()) or any(
                m.name.startswith("hpml") for m in item.iter_markers()):
            run.use(f"{item.nodeid} uses it")
            return


# -- options ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pinned:
    """An --hpml-* option a team pins in its configuration file: the ini key of the same name
    (hpml_tolerance for --hpml-tolerance) is read when the command line does not give it."""

    flag: str
    dest: str
    parse: Callable[[str], Any] | None
    choices: tuple[str, ...] | None
    default: Any
    switch: bool  # a store_true flag: the ini value is a bool
    path: bool  # a path: relative to the ini file's folder, as pytest reads its own paths


#: Every pinnable option, by dest; filled as the modules declare their options.
PINNED: dict[str, Pinned] = {}

#: pytest's own options a fresh process must not act on, by argparse dest, with the value it
#: gets instead: what would write over the outer run's files, stop for a person, or select
#: by the run's own history.
PYTEST_OUTER_RUN_ONLY: dict[str, Any] = {
    "xmlpath": None, "pastebin": None, "usepdb": False, "trace": False, "lf": False,
    "failedfirst": False, "newfirst": False, "stepwise": False, "stepwise_skip": False,
    "basetemp": None, "collectonly": False, "setuponly": False, "setupplan": False,
    "looponfail": False, "log_file": None,
}


#: Options of the outer run alone, by argparse dest, with their defaults: its outputs, the
#: comparison and the save, and the size profile (a rerun is given the one the outer run
#: chose). A fresh process (pytest_hpml.rerun) runs the invocation's own arguments with these
#: back at their defaults. Each option says so where it is declared (add_option(...,
#: rerun=False)), so a new output option cannot leak into reruns unnoticed.
OUTER_RUN_ONLY: dict[str, Any] = {}


def outer_run_only(flag: str, default: Any = None) -> None:
    """Mark an option (by flag, "--hpml-report") as the outer run's alone, with the value a
    rerun gets instead."""
    OUTER_RUN_ONLY[flag.lstrip("-").replace("-", "_")] = default


def add_option(parser: pytest.Parser, flag: str, *, pin: bool = False, path: bool = False,
               rerun: bool = True, **kwargs: Any) -> None:
    """Declare an --hpml-* option in the plugin's group; with pin=True it can also be set in
    the ini file ([pytest] or [tool.pytest.ini_options]: `hpml_tolerance = 0.2`), the command
    line winning; with rerun=False a confirmation rerun does not get it (an output, the
    comparison or the save: the outer run's alone)."""
    group = parser.getgroup("hpml", "pytest-hpml: timing, baselines and reports")
    if not rerun:
        switch_default = False if kwargs.get("action") == "store_true" else None
        outer_run_only(flag, kwargs.get("default", switch_default))
    if not pin:
        group.addoption(flag, **kwargs)
        return
    dest = flag.lstrip("-").replace("-", "_")
    default = kwargs.pop("default", None)
    switch = kwargs.get("action") == "store_true"
    group.addoption(flag, default=None, **kwargs)
    parser.addini(dest, type="bool" if switch else "string", default=None,
                  help=f"{kwargs.get('help', '')} (ini form of {flag}; the command line wins)")
    choices = kwargs.get("choices")
    PINNED[dest] = Pinned(flag, dest, kwargs.get("type"), tuple(choices) if choices else None,
                          False if switch else default, switch, path)


def _ini_raw(config: pytest.Config, dest: str) -> Any:
    """The ini file's value of `dest` as pytest reads it; a usage error naming the key and the
    file where it is no yes/no for a switch, or a TOML list for a single value."""
    where = f"{dest} in {config.inipath or 'the ini file'}"
    try:
        with warnings.catch_warnings():
            # A TOML list for a one-value key, said below: pytest 9 warns it will refuse it.
            warnings.simplefilter("ignore", getattr(pytest, "PytestRemovedIn10Warning",
                                                    pytest.PytestDeprecationWarning))
            raw = config.getini(dest)
    except (ValueError, pytest.UsageError) as exc:  # pytest's bool: "invalid truth value"
        raise pytest.UsageError(f"{where}: {exc}; write true or false") from None
    except TypeError as exc:  # pytest 10 refuses a TOML list for a one-value key itself
        raise pytest.UsageError(f"{where}: {exc}; give one value") from None
    if isinstance(raw, list):
        raise pytest.UsageError(f"{where}: a list ({raw!r}); give one value, e.g. "
                                f"{dest} = {raw[0] if raw else '...'}")
    return raw


def _pinned_value(config: pytest.Config, pin: Pinned) -> Any:
    """The ini file's value of a pinned option, parsed as its command-line form would be;
    None where the ini file does not set it."""
    raw = _ini_raw(config, pin.dest)
    if raw is None or raw == "" or (pin.switch and raw is False):
        return None
    if pin.switch:
        return bool(raw)
    where = f"{pin.dest} = {raw} in {config.inipath or 'the ini file'}"
    text = str(raw).strip()
    if pin.choices and text not in pin.choices:
        raise pytest.UsageError(f"{where}: choose from {', '.join(pin.choices)}")
    try:
        value = pin.parse(text) if pin.parse else text
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None
    if pin.path and config.inipath is not None:
        value = str(Path(config.inipath).parent / Path(value).expanduser())
    return value


def apply_pinned_options(config: pytest.Config) -> None:
    """Options the command line left unset take the ini file's value, else their default."""
    for pin in PINNED.values():
        if getattr(config.option, pin.dest, None) is not None:
            continue  # given on the command line
        value = _pinned_value(config, pin)
        setattr(config.option, pin.dest, pin.default if value is None else value)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before any plugin configures itself: every module reads config.option as set here.
    apply_pinned_options(config)



#: Where an xdist worker leaves its one-line messages for the controller (workeroutput).
WORKER_MESSAGES = "hpml_messages"


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A worker's messages (a marker option not used, a chart not drawn) reach the terminal
    # through the controller, the only process that prints the summary.
    if not is_controller(session.config):
        session.config.workeroutput[WORKER_MESSAGES] = list(run_of(session.config).messages)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to a run without xdist
def pytest_testnodedown(node: object, error: object) -> None:
    config = getattr(node, "config", None)  # the controller's (xdist's WorkerController)
    output = getattr(node, "workeroutput", None) or {}
    if config is not None and RUN_KEY in config.stash:
        for message in output.get(WORKER_MESSAGES, []):
            run_of(config).say_once(message)
