"""Fresh processes of this run's tests (a pytest plugin module): a comparison measures a test it
suspects again, a save measures its tests in more than one process, --hpml-compare-ref
measures them at a git ref. The noise that fools a comparison lives between processes
(allocator state, thread placement, clocks), where the samples of one process cannot see it.

A fresh process runs the invocation's own pytest command (the command line as given; pytest
applies the ini file's addopts and PYTEST_ADDOPTS again itself), in the invocation's folder,
so that plugins (-p), ini overrides (-o), the configuration file (-c), --rootdir, conftest
options and relative paths mean what they meant, plus one option (pytest_hpml.fresh_process),
--hpml-rerun=SPEC: a JSON file naming the node ids to run (and the rows a test needs, where a
confirmation needs some: hpml.wants), the size profile the run chose, and where to write what
the process measured. In the fresh process pytest_hpml.fresh_process then

- puts the outer run's own options back to their defaults before any plugin configures
  itself: the plugin's outputs, comparison and save (each declares so where it is declared:
  add_option(rerun=False)), and pytest's outputs, debuggers, --lf/--sw state and --basetemp;
  its cache lives in a temporary folder, so the run's --lf state is left alone;
- collects only the files of the node ids (pytest_ignore_collect) and runs only them, whatever
  -k, -m or --deselect said;
- writes back the records, which node ids it collected, how each test ended, and what failed
  to collect; a process that leaves no such file could not run at all (its conftest failed).

Each fresh process is forked from a forkserver that imported pytest, this plugin and (where the
tests use it) torch once (machine/forkserver.py), so it starts without seconds of imports.
Forked processes share the server's hash seed and memory layout (hash("x") was one value in a
save's own process and another in all 4 fresh ones): a benchmark whose mode follows those
shows its other mode between runs, and a history learns it across saves.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_hpml import plugin
from pytest_hpml.distributed import job
from pytest_hpml.fresh_process import last_lines
from pytest_hpml.machine import forkserver
from pytest_hpml.progress import FreshProgress
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import is_controller, xdist_workers


@dataclass
class Place:
    """Where a fresh process runs: this checkout (the default), or another one (the code at a
    git ref: compare/reference.Mapping supplies its paths)."""

    move: Callable[[str], str] = str  # a path (or an argument holding one) in that checkout
    environ: Callable[[dict[str, str]], dict[str, str]] = dict
    sys_path: Callable[[list[str]], list[str] | None] = lambda entries: None


@dataclass
class Fresh:
    """What fresh processes measured: the records of each process that worked (only those of
    tests that passed there: a process that fails its own checks confirms nothing), what went
    wrong in the others, the node ids a process did not find, and why a process could not run
    at all."""

    records: list[list[Record]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    absent: set[str] = field(default_factory=set)
    broken: str | None = None
    stopped: bool = False  # a process was stopped at its deadline before it finished a test


def environment() -> dict[str, str]:
    """This process's environment for a fresh one, without the rank variables of a torchrun or
    srun job (a fresh process is a job of its own, or a single process)."""
    return job.fresh_environment()


#: Where a run starts its fresh processes as a job of its own (pytest_hpml.ranks: every rank of
#: a torchrun or srun job starts one together): a context manager given the node ids, entered
#: around rank 0's fresh process, that yields the variables its job needs. None: a single
#: fresh process.
FRESH_JOB = pytest.StashKey[Callable[[list[str]], ContextManager[dict[str, str]]]]()


def arguments(config: pytest.Config, spec: Path, folder: Path) -> list[str]:
    """The fresh process's command line: the invocation's own, with SPEC, its cache in
    `folder`, and no xdist workers of its own."""
    args = [*map(str, config.invocation_params.args), f"--hpml-rerun={spec}",
            # The rootdir and the configuration file the run found: node ids are relative to
            # the one, and a checkout at a git ref may lack an untracked other.
            f"--rootdir={config.rootpath}"]
    if config.inipath is not None:
        args += ["-c", str(config.inipath)]
    if config.pluginmanager.has_plugin("cacheprovider"):
        args += ["-o", f"cache_dir={folder / 'cache'}"]
    if config.pluginmanager.has_plugin("logging"):
        args += ["-o", "log_file="]  # the ini file's log, the outer run's to write
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-n", "0"]  # the run's -n, and an -n in addopts, start no workers
    # The plugin's modules come imported from the forkserver, where pytest could not rewrite
    # their asserts: it would say so in every fresh process (an error under -W error).
    return [*args, "-W", "ignore::pytest.PytestAssertRewriteWarning"]


#: Rows a fresh process that measures only some rows of a test (hpml.wants) measures first, and
#: drops: the ones the run made just before each. A freshly forked process runs its first
#: calls cold (copy-on-write page faults, cold caches: sum(range(200)) took 15 us as a forked
#: process's first call and 2.1-2.4 us from its second, 2026-11-28), so a suspected row timed
#: first in each confirming process confirmed itself: 1 of 9, 1 of 7 and 2 of 7 unchanged
#: compares of a 10 000-row sweep of 2 us rows failed so (+383 % to +485 % in all three).
WARM_UP_ROWS = 3


def warm_up(rows: Iterable[Record], made: Sequence[Record]) -> list[Record]:
    """The rows of `made` (a test's rows, in the order the run made them) that a fresh process
    measuring only `rows` measures before them, and drops: the WARM_UP_ROWS made just before
    each, where they are not among `rows`."""
    wanted = {r.id for r in rows}
    place = {r.id: i for i, r in enumerate(made)}
    found: dict[str, Record] = {}
    for rid in wanted:
        i = place.get(rid, 0)
        for before in made[max(0, i - WARM_UP_ROWS):i]:
            if before.id not in wanted:
                found[before.id] = before
    return list(found.values())


def _warmed_up(records: list[Record], warming: set[str], wanted: dict[str, list[str]]
               ) -> list[Record]:
    """What a fresh process made, less the rows it warmed up with, of each test that made
    only the rows it was asked for (one that asks hpml.wants). A test that makes every row
    gives each its values, as a sweep's rows pool their spread: a slowed row whose first
    process read it in a machine's fast speed is caught with the processes its siblings'
    suspicion ran."""
    if not warming:
        return records
    asked = {rid for ids in wanted.values() for rid in ids}
    made_more = {r.test for r in records if r.id not in asked and r.id != r.test}
    return [r for r in records if r.id not in warming or r.test in made_more]


def run_fresh(config: pytest.Config, nodeids: Iterable[str], processes: int = 1,
              place: Place | None = None, what: str = "fresh process",
              deadline: float | None = None, together: bool = True,
              rows: Iterable[Record] | None = None, made: Sequence[Record] = ()) -> Fresh:
    """Run the tests `nodeids` in `processes` fresh processes, one after the other, and gather
    what they measured (`rows`: the ones they run for, where not all: hpml.wants; each after
    its warm_up rows of `made`, the test's rows as the run made them, which are dropped). At
    `deadline` (time.monotonic()), a process still running is stopped as Ctrl-C stops a run,
    and what its finished tests measured counts (a budget, not a failure). Under a torchrun or
    srun job each fresh process is a job of the same shape, one on every rank (FRESH_JOB;
    together=False: this rank's part of one)."""
    place = place or Place()
    nodeids = list(nodeids)
    wait_for_forkserver()  # a start in the background (forkserver_beside) ends first
    rows = list(rows or ())
    first = warm_up(rows, made) if rows else []
    warming = {r.id for r in first}
    wanted: dict[str, list[str]] = {}  # row ids by the test that makes them
    for row in [*rows, *first]:
        wanted.setdefault(row.test, []).append(row.id)
    found = Fresh()
    progress = FreshProgress(config, what, nodeids, processes, deadline)
    with tempfile.TemporaryDirectory(prefix="hpml-fresh-") as name:
        folder = Path(name)
        for i in range(processes):
            progress.starting(i)
            result = folder / f"result-{i}.json"
            spec = folder / f"spec-{i}.json"
            spec.write_text(json.dumps({"nodeids": nodeids, "result": str(result), "profile":
                                        profile_of(config), "rows": wanted}), "utf-8")
            args = [place.move(a) for a in arguments(config, spec, folder)]
            fresh_job = config.stash.get(FRESH_JOB, None) if together else None
            with fresh_job(nodeids) if fresh_job else contextlib.nullcontext({}) as variables:
                code, output = forkserver.run_pytest(
                    args, Path(place.move(str(config.invocation_params.dir))),
                    folder / f"process-{i}.log", {**place.environ(environment()), **variables},
                    preload=preload(config), sys_path=place.sys_path(list(sys.path)),
                    deadline=deadline)
            if not result.exists():
                if deadline is not None and time.monotonic() >= deadline:
                    found.stopped = True  # the budget ran out before it finished a test
                    continue
                found.broken = f"{what} exited {code} before running a test: {last_lines(output)}"
                found.problems.append(found.broken)
                continue
            document = json.loads(result.read_text("utf-8"), parse_constant=lambda _: None)
            found.absent |= set(nodeids) - set(document["collected"])
            stopped = deadline is not None and code != 0 and document["interrupted"]
            failed = {n for n, outcome in document["outcomes"].items()
                      if outcome == "failed" and not stopped}
            found.problems += [f"{n}: {what} {i + 1} failed: {last_lines(output)}"
                               for n in sorted(failed)]
            found.problems += [f"{what} {i + 1}: {e}" for e in document["errors"]]
            found.records.append(_warmed_up([r for r in map(Record.from_dict,
                                                            document["records"])
                                             if r.test not in failed], warming, wanted))
    progress.done()
    return found


#: What an xdist worker tells the controller (workeroutput): its tests imported torch.
WORKER_TORCH = "hpml_imports_torch"
_WORKERS_IMPORT_TORCH = pytest.StashKey[bool]()  # the controller's, from its workers' reports
_WANTED = pytest.StashKey[bool]()  # this run will need a fresh process: start the server


def tests_import_torch(config: pytest.Config | None = None) -> bool:
    """True where this run's tests use torch: this process imported it (a conftest, the
    collected test modules), or an xdist worker said so (the controller collects nothing)."""
    return "torch" in sys.modules or bool(
        config is not None and config.stash.get(_WORKERS_IMPORT_TORCH, False))


def preload(config: pytest.Config | None = None, torch: bool | None = None) -> list[str]:
    """What the forkserver imports once, before it forks any fresh process: pytest and every
    module of this plugin, so that a fresh process neither imports nor assert-rewrites them
    again (0.3 s of its 1.5 s here), and torch where the tests use it (seconds of a core
    otherwise spent for a suite that never imports it: a JSON library's). A process at a git
    ref runs REF's code under test with this harness, the same one that measures this side."""
    torch = tests_import_torch(config) if torch is None else torch
    return [*(["torch"] if torch else []), "pytest", plugin.__name__, *plugin.HOOK_MODULES,
            *_plugin_modules(config)]


def _plugin_modules(config: pytest.Config | None) -> list[str]:
    """The run's other plugin modules that are installed code: pytest's own (skipping,
    junitxml, faulthandler, ...) and those of installed plugins (xdist, pytest-benchmark),
    which a fresh process registers too; imported once by the server, not in every fresh
    process (0.035 s of its start; conftests are the project's, imported there)."""
    manager = getattr(config, "pluginmanager", None)
    if manager is None:
        return []
    installed = {getattr(p, "__name__", "") for p, _ in manager.list_plugin_distinfo()}
    names = [p.__name__ for p in manager.get_plugins() if isinstance(p, types.ModuleType)
             and (p.__name__.startswith("_pytest.") or p.__name__ in installed)]
    return sorted(set(names) - {plugin.__name__, *plugin.HOOK_MODULES})


_starting: list[threading.Thread] = []  # the forkserver's start, while it imports
#: Held while a background start spawns the server: the collection's end then knows whether a
#: server runs with the list asked before (under a CPU hog it ended mid-spawn: torch for all).
_spawning = threading.Lock()


def _get_ready() -> None:
    with _spawning:
        forkserver.ensure_running()
    # A server stopped while it imports (a lean one replaces it) ends its probe with an error.
    with contextlib.suppress(Exception):
        forkserver.ensure_ready()


def _ask_for(modules: list[str]) -> None:
    """The server's list for its next start: `modules`, and no torch unless they hold it (a
    start speculated on torch before the tests were known may have asked for it)."""
    if "torch" not in modules:
        forkserver.drop_preload("torch")
    forkserver.add_preload(modules)


def _start_in_background(modules: list[str]) -> None:
    if _starting or not forkserver.available():
        return
    _ask_for(modules)
    thread = threading.Thread(target=_get_ready, name="hpml-forkserver", daemon=True)
    thread.start()
    _starting.append(thread)


def start_forkserver_in_background(config: pytest.Config) -> None:
    """Have the forkserver start in the background, its imports running beside the test
    collection, so that a fresh process later costs a fork, not seconds of imports. Whether
    the tests use torch is known once they are collected; where torch is installed, the server
    starts now with it, as the collection most likely imports it too (a torch suite would
    otherwise wait 2-3 s for the server's import after its own); one the collection shows to
    need no torch is stopped then, and started without it when first needed, as an xdist
    controller's (ready_forkserver). What is left of its imports when the tests begin is
    waited for then (pytest_runtestloop): its imports of torch beside the first test read a
    3 ms sleep as 6-9 ms under load. Once started it is idle."""
    config.stash[_WANTED] = True
    if hasattr(config, "workerinput") or (is_controller(config) and xdist_workers(config) == 0):
        if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
            _start_in_background(preload(config, torch=True))


def wait_for_forkserver() -> float:
    """Return once a forkserver started in the background has finished its imports; returns
    the seconds waited."""
    began = time.monotonic()
    while _starting:
        _starting.pop().join()
    return time.monotonic() - began


@contextlib.contextmanager
def forkserver_beside(config: pytest.Config, wanted: bool = False) -> Iterator[None]:
    """Start the forkserver in the background while the body runs (a test's judgement, which
    times nothing), where this run will need one (`wanted`: the caller knows it likely will)
    and none has started: a confirmation the judgement asks for then finds the server ready
    instead of waiting for its imports (0.25 s of pytest and the plugin, a quarter of a
    10 000-row compare's first confirmation). What is left of its imports at the end is waited
    for, so none runs beside the next timed sample."""
    if (wanted or config.stash.get(_WANTED, False)) and not forkserver_started():
        _start_in_background(preload(config))
    try:
        yield
    finally:
        wait_for_forkserver()


def ready_forkserver(config: pytest.Config) -> float:
    """Start the forkserver if it has not started, with the preload list as it stands now, and
    wait for its imports; returns the seconds this took."""
    began = time.monotonic()
    wait_for_forkserver()
    _ask_for(preload(config))
    forkserver.ensure_ready()
    return time.monotonic() - began


_WAITED = pytest.StashKey[float]()


def forkserver_started() -> bool:
    """Whether a forkserver runs, or is starting in the background."""
    return bool(_starting) or forkserver.preloaded() is not None


def forkserver_wait(config: pytest.Config) -> float:
    """Seconds this run's tests waited for the forkserver: a cost the run would not have had
    without fresh processes, which a save's budget counts as spent."""
    return config.stash.get(_WAITED, 0.0)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # The collection has imported the test modules: the server knows whether to import torch.
    if not session.config.stash.get(_WANTED, False):
        return
    lean = preload(session.config)
    if "torch" not in lean and "torch" in forkserver.asked():
        # A start speculated on torch, which these tests never import. From here every start
        # is lean (multiprocessing restarts a stopped server for the next process it forks);
        # a server already spawned, with torch, is stopped.
        with _spawning:
            spawned = forkserver.preloaded() is not None
            _ask_for(lean)
            if spawned:
                forkserver.stop()
        wait_for_forkserver()
    if forkserver.preloaded() is None and \
            set(forkserver.asked()) - set(preload(session.config, torch=False)):
        # Torch or a conftest's modules; pytest and the plugin alone start when first needed.
        _start_in_background(lean)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    # Nothing the harness starts may run beside a timed sample: the first test waits for it.
    session.config.stash[_WAITED] = wait_for_forkserver()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput[WORKER_TORCH] = "torch" in sys.modules


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to a run without xdist
def pytest_testnodedown(node: object, error: object) -> None:
    config = getattr(node, "config", None)  # the controller's (xdist's WorkerController)
    if config is not None and (getattr(node, "workeroutput", None) or {}).get(WORKER_TORCH):
        config.stash[_WORKERS_IMPORT_TORCH] = True
