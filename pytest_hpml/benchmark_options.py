"""pytest-benchmark's command-line options where pytest-hpml serves the `benchmark` fixture (a
pytest plugin module): a project's addopts written for pytest-benchmark (--benchmark-sort,
--benchmark-group-by, ...) parse as they do under pytest-benchmark; those that mean something
here set pytest-hpml's own options, and the others are named once, in one line.

Where pytest-benchmark is active its options are its own: none is declared here. pytest-benchmark
may register after this module (an entry point loaded later, a conftest's pytest_plugins, -p):
its own declarations then replace these before the command line is parsed, so the two never
clash. pytest-benchmark has no ini keys (its settings are all command-line options).
"""

from __future__ import annotations

import argparse
import re
import statistics
import weakref
from typing import Any

import pytest

from pytest_hpml.policy import positive
from pytest_hpml.session import run_of

GROUP = "benchmark-hpml"
#: pytest-benchmark's options (its plugin's pytest_addoption, 5.x), with the argparse keywords
#: that make them take the same arguments; values are kept as given (None: not given).
OPTIONS: dict[str, dict[str, Any]] = {
    "--benchmark-min-time": {"metavar": "SECONDS"},
    "--benchmark-max-time": {"metavar": "SECONDS", "type": positive(float)},
    "--benchmark-min-rounds": {"metavar": "NUM", "type": positive(int)},
    "--benchmark-precision": {"metavar": "FRACTION", "type": positive(float)},
    "--benchmark-confidence": {"metavar": "FRACTION", "type": positive(float)},
    "--benchmark-timer": {"metavar": "FUNC"},
    "--benchmark-calibration-precision": {"metavar": "NUM"},
    "--benchmark-warmup": {"metavar": "KIND", "nargs": "?", "const": "on"},
    "--benchmark-warmup-iterations": {"metavar": "NUM"},
    "--benchmark-disable-gc": {"action": "store_true", "default": None},
    "--benchmark-skip": {"action": "store_true", "default": None},
    "--benchmark-disable": {"action": "store_true", "default": None},
    "--benchmark-enable": {"action": "store_true", "default": None},
    "--benchmark-only": {"action": "store_true", "default": None},
    "--benchmark-save": {"metavar": "NAME"},
    "--benchmark-autosave": {"action": "store_true", "default": None},
    "--benchmark-save-data": {"action": "store_true", "default": None},
    "--benchmark-json": {"metavar": "PATH"},
    "--benchmark-compare": {"metavar": "NUM|_ID", "nargs": "?", "const": "latest"},
    "--benchmark-compare-fail": {"metavar": "EXPR", "nargs": "+", "action": "extend"},
    "--benchmark-cprofile": {"metavar": "COLUMN"},
    "--benchmark-cprofile-loops": {"metavar": "LOOPS"},
    "--benchmark-cprofile-top": {"metavar": "COUNT"},
    "--benchmark-cprofile-dump": {"metavar": "FILENAME-PREFIX", "nargs": "?",
                                  "action": "append", "const": "benchmark"},
    "--benchmark-storage": {"metavar": "URI"},
    "--benchmark-netrc": {"nargs": "?", "const": "~/.netrc"},
    "--benchmark-verbose": {"action": "store_true", "default": None},
    "--benchmark-quiet": {"action": "store_true", "default": None},
    "--benchmark-sort": {"metavar": "COL"},
    "--benchmark-group-by": {"metavar": "LABEL"},
    "--benchmark-columns": {"metavar": "LABELS"},
    "--benchmark-name": {"metavar": "FORMAT"},
    "--benchmark-time-unit": {"metavar": "COLUMN"},
    "--benchmark-histogram": {"metavar": "FILENAME-PREFIX", "nargs": "?", "action": "append",
                              "const": "benchmark"},
}
#: What each applied option does here (docs/API.md has the same list).
APPLIED = {
    "--benchmark-min-rounds": "--hpml-min-samples",
    "--benchmark-max-time": "--hpml-max-time",
    "--benchmark-precision": "--hpml-target-rse (precision / z of --benchmark-confidence)",
    "--benchmark-confidence": "with --benchmark-precision",
    "--benchmark-disable": "--hpml-disable (unless --benchmark-enable)",
    "--benchmark-enable": "overrides --benchmark-disable",
    "--benchmark-disable-gc": "the garbage collector off while a benchmark is timed",
    "--benchmark-skip": "tests that use `benchmark` are skipped",
    "--benchmark-only": "tests that do not use `benchmark` are skipped",
    "--benchmark-save": "--hpml-save-baseline (NAME: the baseline file is this machine's)",
    "--benchmark-autosave": "--hpml-save-baseline",
    "--benchmark-json": "--hpml-report=PATH (pytest-hpml's JSON report)",
    "--benchmark-compare": "--hpml-compare (with this machine's baseline, NUM aside)",
    "--benchmark-compare-fail": "--hpml-compare, and its smallest % as --hpml-tolerance",
    "--benchmark-group-by": "the tables of `benchmark` rows, split as pytest-benchmark splits",
    "--benchmark-sort": "the order of the rows in the summary table",
}
SORT_COLUMNS = ("min", "max", "mean", "stddev", "name", "fullname")
GROUP_BY = ("group", "name", "fullname", "func", "fullfunc", "param")
COMPARE_FAIL = re.compile(r"^(min|max|mean|median|stddev|iqr):(\d+(?:\.\d+)?)(%)?$")

#: The group declared in each run (by its plugin manager), to drop if pytest-benchmark comes.
_DECLARED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def dest(flag: str) -> str:
    """pytest-benchmark's dest ("benchmark_min_time"), as a conftest reads it."""
    return flag.lstrip("-").replace("-", "_")


def declared_dest(flag: str) -> str:
    # A dest of its own: pytest refuses a second option writing to pytest-benchmark's dest
    # (were it to register after this module); copied to it once the command line is parsed.
    return f"served_{dest(flag)}"


def declared(config: pytest.Config) -> bool:
    """pytest-hpml declared pytest-benchmark's options in this run (it is not active)."""
    group = _DECLARED.get(config.pluginmanager)
    return group is not None and bool(group.options)


def _is_pytest_benchmark(plugin: object) -> bool:
    return getattr(plugin, "__name__", None) == "pytest_benchmark.plugin"


def group_by_parts(text: str) -> list[str]:
    """--benchmark-group-by's labels, checked ("group,param:size": two)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in parts if p not in GROUP_BY and not (p.startswith("param:") and p[6:])]
    if bad or not parts:
        raise pytest.UsageError(
            f"--benchmark-group-by={text}: {', '.join(bad) or 'no label'} is not one of "
            f"{', '.join(GROUP_BY)}, param:NAME (comma-separated)")
    return parts


def tolerance_of(expressions: list[str]) -> tuple[float | None, list[str]]:
    """--benchmark-compare-fail's smallest percentage as a fraction, and the expressions it
    cannot use (an absolute number of seconds)."""
    fractions, absolute = [], []
    for text in expressions:
        match = COMPARE_FAIL.match(text)
        if match is None:
            raise pytest.UsageError(f"--benchmark-compare-fail {text}: write FIELD:PERCENT% "
                                    "(e.g. min:5%) or FIELD:SECONDS (e.g. mean:0.001)")
        if match[3]:
            fractions.append(float(match[2]) / 100)
        else:
            absolute.append(text)
    return (min(fractions) if fractions else None), absolute


def apply(config: pytest.Config) -> list[str]:
    """Set pytest-hpml's options from the given pytest-benchmark ones (an --hpml-* option given
    too wins); returns the given options that are not used."""
    opt = config.option
    given = {flag for flag in OPTIONS if getattr(opt, dest(flag), None) not in (None, [])}
    ignored = sorted(given - set(APPLIED))

    def unset(name: str, value: Any) -> None:
        if getattr(opt, name, None) in (None, False):
            setattr(opt, name, value)

    if opt.benchmark_min_rounds is not None:
        unset("hpml_min_samples", opt.benchmark_min_rounds)
    if opt.benchmark_max_time is not None:
        unset("hpml_max_time", opt.benchmark_max_time)
    if opt.benchmark_precision is not None:
        confidence = opt.benchmark_confidence or 0.99
        if not 0 < confidence < 1:
            raise pytest.UsageError(f"--benchmark-confidence={confidence}: give a fraction in "
                                    "(0, 1), e.g. 0.99")
        z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
        unset("hpml_target_rse", opt.benchmark_precision / z)
    elif opt.benchmark_confidence is not None:
        ignored.append("--benchmark-confidence (without --benchmark-precision)")
    if opt.benchmark_disable and not opt.benchmark_enable:
        opt.hpml_disable = True
    if opt.benchmark_save is not None or opt.benchmark_autosave:
        opt.hpml_save_baseline = True
    if opt.benchmark_compare is not None:
        opt.hpml_compare = True
    if opt.benchmark_compare_fail:
        tolerance, absolute = tolerance_of(opt.benchmark_compare_fail)
        opt.hpml_compare = True
        if tolerance is not None:
            unset("hpml_tolerance", tolerance)
        ignored += [f"--benchmark-compare-fail {text} (pytest-hpml judges relative change)"
                    for text in absolute]
    if opt.benchmark_json is not None:
        path = str(opt.benchmark_json)
        if not path.lower().endswith(".json"):
            raise pytest.UsageError(f"--benchmark-json={path}: pytest-hpml writes its report "
                                    "by extension; name a file ending in .json")
        given = getattr(opt, "hpml_report", None) or []  # once per format
        if path in given:
            ignored.append("--benchmark-json (the same file as --hpml-report)")
        else:
            opt.hpml_report = [*given, path]
    if opt.benchmark_group_by is not None:
        group_by_parts(opt.benchmark_group_by)
    if opt.benchmark_sort is not None and opt.benchmark_sort not in SORT_COLUMNS:
        raise pytest.UsageError(f"--benchmark-sort={opt.benchmark_sort}: choose from "
                                f"{', '.join(SORT_COLUMNS)}")
    return ignored


NOT_USED_KEY = pytest.StashKey[list[str]]()


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if any(_is_pytest_benchmark(p) for p in pluginmanager.get_plugins()):
        return  # pytest-benchmark's own options serve this run
    # A group of its own: pytest-benchmark's "benchmark" group would refuse its own options
    # were it to register after this module (see pytest_plugin_registered).
    _yield_to_pytest_benchmark(parser)
    group = parser.getgroup(GROUP, "pytest-benchmark's options, read by pytest-hpml where it "
                                   "serves the benchmark fixture (docs/API.md)")
    for flag, keywords in OPTIONS.items():
        what = APPLIED.get(flag, "accepted, not used")
        group.addoption(flag, dest=declared_dest(flag), help=f"pytest-benchmark's; here: {what}",
                        **keywords)
    _DECLARED[pluginmanager] = group


def _yield_to_pytest_benchmark(parser: pytest.Parser) -> None:
    """pytest >= 9 adds each option to its argparse parser at once: pytest-benchmark's group is
    made here, before it registers, resolving a clash by taking the option strings over (its
    declarations then replace these). pytest 8 builds argparse's parser at parse time, after
    pytest_plugin_registered has dropped these."""
    argparser = getattr(parser, "optparser", None)
    if argparser is None:
        return
    handler = argparser.conflict_handler
    argparser.conflict_handler = "resolve"  # inherited by the group made now, and only it
    try:
        parser.getgroup("benchmark")
    finally:
        argparser.conflict_handler = handler


def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    group = _DECLARED.get(manager)
    if group is not None and _is_pytest_benchmark(plugin):
        # pytest-benchmark declared its own options as it registered: the command line is
        # parsed after this, so dropping these leaves one declaration of each.
        group.options.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # tryfirst, and registered after pytest_hpml.session: before the ini file's hpml_* values
    # fill the options left unset, so an --hpml-* option or its ini key is never overridden.
    if declared(config):
        for flag in OPTIONS:  # config.getoption("benchmark_disable") reads as it does there
            setattr(config.option, dest(flag), getattr(config.option, declared_dest(flag)))
        config.stash[NOT_USED_KEY] = apply(config)


def pytest_configure(config: pytest.Config) -> None:
    not_used = config.stash.get(NOT_USED_KEY, [])
    if not_used:
        run_of(config).say_once(f"pytest-benchmark option(s) not used by pytest-hpml: "
                                f"{', '.join(not_used)} (docs/API.md says why)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not declared(config):
        return
    only, skip = config.option.benchmark_only, config.option.benchmark_skip
    for item in items:
        uses = "benchmark" in getattr(item, "fixturenames", ())
        if only and not uses:
            item.add_marker(pytest.mark.skip(reason="not a benchmark (--benchmark-only)"))
        elif skip and not only and uses:
            item.add_marker(pytest.mark.skip(reason="a benchmark (--benchmark-skip)"))


def run_wide(config: pytest.Config) -> argparse.Namespace | None:
    """The run's pytest-benchmark options where pytest-hpml declared them, else None."""
    return config.option if declared(config) else None
