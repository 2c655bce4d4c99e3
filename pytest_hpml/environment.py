"""The process environment of CPU timings: what makes the same code run at different speeds in
different processes, controlled where it can be and reported in the header (a pytest plugin
module). `--hpml-env=keep` leaves everything as it is.

Measured on a shared 2-core machine (a 2-million-element torch.add, one median per process):
- glibc's dynamic mmap threshold decides whether every 8 MB allocation is a fresh mmap that
  page-faults on first touch: some processes time 0.4 ms, others 1 ms. A fixed threshold of
  64 MiB (and a trim threshold of 128 MiB) keeps such buffers in the heap in every process.
- an intra-op parallel op waits for its slowest thread; on cores shared with other work one of
  them is often descheduled for a scheduler slice, and a 0.3 ms add takes 8 or 16 ms in some
  processes. Leaving one core to the rest of the machine (and sharing the others between xdist
  workers) removes those stalls.
- a full garbage collection walks every object the process holds, and one lands inside some
  timed call: with torch imported and a 10 000-row baseline read, the same row of a sweep read
  65-76 ms against 5 us in every compare (a confirmation then ran the whole test again, in a
  fresh process whose heap the forkserver had frozen). The heap the collection leaves
  (imports, the baseline, the collected tests) is frozen before the first test (gc.freeze, as
  the forkserver does for its children), so a collection walks only what the tests made
  since (a baseline is frozen as soon as it is read, at configure, and what the comparison
  engine makes in bulk joins the frozen heap: compare/bulk.py); what the tests made is frozen
  as well once the last test has run, so that the session's end (a 10 000-row sweep's judged
  records, the terminal's summary) does not walk it again and again; it is unfrozen when the
  session ends, after pytest's own last collection.
The thresholds and threads are applied in this process and passed to child processes (xdist
workers, confirmation reruns, distributed ranks) through the environment, where each process
freezes its own heap; CPU frequency is reported where readable.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import gc
import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.compare import bulk
from pytest_hpml.session import add_option, run_of, xdist_workers

MMAP_THRESHOLD = 64 * 2**20
TRIM_THRESHOLD = 128 * 2**20
# mallopt parameter numbers from glibc's <malloc.h>.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
MODES = ("control", "keep")


@dataclass
class Environment:
    """What was set (or found) for this process, in words for the header."""

    facts: list[str] = field(default_factory=list)
    threads: int | None = None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def threads_for(cores: int, workers: int) -> int:
    """Intra-op threads per process: one core is left to the rest of the machine, the others
    are shared between the processes that time work at the same moment."""
    return max(1, (cores - 1) // max(1, workers)) if cores > 1 else 1


def set_malloc_thresholds(environ: MutableMapping[str, str], libc: object | None = None) -> bool:
    """Fixed mmap and trim thresholds: now in this process (mallopt), and for child processes
    through glibc's environment variables. False where this is not glibc."""
    if libc is None:
        name = ctypes.util.find_library("c")
        if not name or not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(name)
            libc.mallopt  # noqa: B018 - musl and others have no mallopt
        except (OSError, AttributeError):
            return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
    environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(TRIM_THRESHOLD))
    return ok


def set_threads(threads: int, environ: MutableMapping[str, str]) -> int:
    """torch's intra-op threads, before torch starts (its thread pool reads OMP_NUM_THREADS)
    and through the API if it has started already. A value the user set is kept."""
    if "OMP_NUM_THREADS" in environ:
        threads = int(environ["OMP_NUM_THREADS"]) if environ["OMP_NUM_THREADS"].isdigit() \
            else threads
    for name in THREAD_VARIABLES:
        environ.setdefault(name, str(threads))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)
    return threads


def cpu_frequency(root: Path = Path("/sys/devices/system/cpu/cpu0/cpufreq")) -> str | None:
    """'governor performance, 2.45 GHz' where the kernel exposes it (often not in VMs)."""
    def read(name: str) -> str | None:
        try:
            return (root / name).read_text().strip()
        except OSError:
            return None
    governor, khz = read("scaling_governor"), read("scaling_cur_freq")
    if governor is None and khz is None:
        return None
    parts = [f"governor {governor}"] if governor else []
    if khz and khz.isdigit():
        parts.append(f"{int(khz) / 1e6:.2f} GHz")
    return ", ".join(parts)


def control(config: pytest.Config, environ: MutableMapping[str, str] | None = None,
            libc: object | None = None) -> Environment:
    environ = os.environ if environ is None else environ
    env = Environment()
    if config.option.hpml_env == "keep":
        env.facts.append("left as it is (--hpml-env=keep)")
    else:
        if set_malloc_thresholds(environ, libc):
            env.facts.append(f"malloc mmap threshold {MMAP_THRESHOLD >> 20} MiB")
        workerinput = getattr(config, "workerinput", {})
        workers = int(workerinput.get("workercount", 0)) or _planned_workers(config)
        env.threads = set_threads(threads_for(usable_cores(), workers), environ)
        env.facts.append(f"{env.threads} intra-op thread(s) per process of {usable_cores()} "
                         "cores")
    frequency = cpu_frequency()
    if frequency:
        env.facts.append(f"CPU {frequency}")
    return env


FROZEN_KEY = pytest.StashKey[bool]()


def freeze_heap(config: pytest.Config) -> None:
    """Move the objects this process holds now into the collector's permanent generation
    until the session ends (unfreeze_heap). Garbage among them waits until then: the heap
    before the first test is the imports, the baseline and the collected tests, which live
    that long anyway."""
    gc.freeze()
    config.stash[FROZEN_KEY] = True
    bulk.heap_frozen = True


def unfreeze_heap(config: pytest.Config) -> None:
    """The frozen heap back to the collector (a pytester run in this process ends; the next
    may free it). Registered at configure, before pytest's own cleanups: they run last to
    first, so its last collection, at its cleanup, walks only what the tests made."""
    if config.stash.get(FROZEN_KEY, False):
        config.stash[FROZEN_KEY] = False
        bulk.heap_frozen = False
        gc.unfreeze()


def freeze_configured_heap(config: pytest.Config) -> None:
    """Freeze what the configuration has made so far (a baseline read: a 10 000-row file's
    rows and checked metrics), in a run whose environment is controlled, so that the
    collections until the first test do not walk it (0.03-0.05 s of a 10 000-row compare);
    the heap is frozen again before the collection and before the first test."""
    if _controls_heap(config):
        freeze_heap(config)


def _controls_heap(config: pytest.Config) -> bool:
    """Whether this run controls the environment (it uses the plugin, set up by _use at this
    module's configure, which comes first), its heap's freezing included."""
    return ENV_KEY in config.stash and config.option.hpml_env != "keep"


def refreeze_heap(config: pytest.Config) -> None:
    """Freeze what the process made since the heap was frozen (freeze_heap), where it was: the
    one unfreeze_heap gives it all back."""
    if config.stash.get(FROZEN_KEY, False):
        gc.freeze()


def freeze_at_exit() -> None:
    """Freeze the heap as the process exits (once per process): the interpreter's last
    collection, and the collections freeing the run's objects set off, walked everything a
    run holds, 0.44 s after the last exit handler of a save of 10 000 rows against 0.02 s
    frozen (0.18 s in a plain run of the same test). What it leaves unfreed is freed by the
    exit itself; handlers registered before this one (weakref.finalize's, multiprocessing's)
    still run after it."""
    global _EXIT_FROZEN
    if not _EXIT_FROZEN:
        _EXIT_FROZEN = True
        atexit.register(gc.freeze)


_EXIT_FROZEN = False


def _planned_workers(config: pytest.Config) -> int:
    return max(1, xdist_workers(config))


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-env", pin=True, choices=MODES, default="control",
               help="control (default): fixed malloc thresholds, intra-op threads that leave "
                    "a core free, and the heap before the first test frozen for the garbage "
                    "collector, so CPU timings agree between processes; keep: leave the "
                    "process environment as it is")


ENV_KEY = pytest.StashKey[Environment]()


@pytest.hookimpl(tryfirst=True)  # its cleanup before any freeze (freeze_configured_heap)
def pytest_configure(config: pytest.Config) -> None:
    config.add_cleanup(lambda: unfreeze_heap(config))
    run_of(config).when_used(lambda: _use(config))


def _use(config: pytest.Config) -> None:
    config.stash[ENV_KEY] = control(config)
    if config.option.hpml_env != "keep":
        freeze_at_exit()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # Last: after every plugin's own work at the collection's end (the save's forkserver,
    # the baseline's rows by test).
    config = session.config
    if _controls_heap(config):
        freeze_heap(config)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> object:
    # No test runs after this: what the tests made (a 10 000-row sweep's records, judged by a
    # compare) is frozen too, and again what the session's end made (a save's merged rows and
    # verdicts), so that the collections of the terminal's summary and of pytest's own end walk
    # only what those make (0.2 s of a 10 000-row compare's end, 0.1 s of a plain run's).
    refreeze_heap(session.config)
    try:
        return (yield)
    finally:
        refreeze_heap(session.config)


def pytest_report_header(config: pytest.Config) -> str:
    if ENV_KEY not in config.stash:
        return ("hpml: not in use so far (no --hpml-* option, no hpml_* setting in the ini "
                "file): the process environment is left as it is until a test uses the plugin")
    return "hpml: environment: " + "; ".join(config.stash[ENV_KEY].facts)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    # A run that started using the plugin after its header says what it set, and why.
    run = run_of(config)
    if ENV_KEY in config.stash and not run.used_from_start:
        terminalreporter.write_line(f"hpml: environment set when {run.used_because}: "
                                    + "; ".join(config.stash[ENV_KEY].facts))
