"""The timing policy of a run and of each test: command-line options and @pytest.mark.hpml
(a pytest plugin module). Defaults live in TimingConfig; this module only overrides them.

    @pytest.mark.hpml(min_samples=3, max_time=2.0, warmup=1, cold_l2=False, target_rse=0.01,
                      yardstick=False, tolerance=0.2, expect_missing=["time"])

A malformed marker is a usage error at collection that names the test and says what to write.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest

from pytest_hpml.measure.timing import POLICY_RULES, TimingConfig
from pytest_hpml.session import add_option

TIMING_OPTIONS = tuple(f.name for f in fields(TimingConfig)
                       if f.name not in ("min_sample_time", "max_samples"))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_names(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)) or v == "*"


#: Every option of @pytest.mark.hpml: (check, what to write). The timing options are checked
#: by the rules TimingConfig checks itself with.
MARKER_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{name: POLICY_RULES[name] for name in TIMING_OPTIONS},
    "tolerance": (lambda v: _is_number(v) and v >= 0, "a fraction >= 0, e.g. tolerance=0.2"),
    "expect_missing": (_is_names, "a list of metric names, or '*', e.g. "
                                  "expect_missing=['time']"),
}


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """The merged @pytest.mark.hpml options of a test (closest marker wins), validated."""
    merged: dict[str, Any] = {}
    for marker in reversed(list(item.iter_markers("hpml"))):
        if marker.args:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.hpml takes keyword options only, got "
                f"{marker.args!r}; write e.g. @pytest.mark.hpml(min_samples=3)")
        for key, value in marker.kwargs.items():
            if key not in MARKER_OPTIONS:
                raise pytest.UsageError(
                    f"{item.nodeid}: unknown @pytest.mark.hpml option {key!r}; known: "
                    f"{', '.join(MARKER_OPTIONS)}")
            check, what = MARKER_OPTIONS[key]
            if not check(value):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.hpml({key}={value!r}): "
                                        f"{key} takes {what}")
            merged[key] = value
    return merged


def timing_config(item: pytest.Item, profile: str) -> TimingConfig:
    """The run's policy (profile defaults, command line) with this test's marker on top."""
    opt = item.config.option
    run_wide = dict(max_time=opt.hpml_max_time, min_samples=opt.hpml_min_samples,
                    target_rse=opt.hpml_target_rse,
                    yardstick=None if opt.hpml_yardstick == "on" else False)
    test_wide = {k: v for k, v in marker_options(item).items() if k in TIMING_OPTIONS}
    return TimingConfig.for_profile(profile, **{**run_wide, **test_wide})


def plain_run(config: pytest.Config) -> bool:
    """--hpml-disable: benchmarks run as plain tests (each timed function called once)."""
    return bool(config.option.hpml_disable)


def _number(kind: type, text: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
    if not math.isfinite(value):
        # An infinite time cap never ends a timing; nan compares false with every bound.
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` > 0, with a message that says so."""
    def parse(text: str) -> Any:
        value = _number(kind, text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    return parse


def non_negative(kind: type) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` >= 0 (a count: 0 turns the thing off)."""
    def parse(text: str) -> Any:
        value = _number(kind, text)
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= 0 (0: none)")
        return value
    return parse


def fraction(text: str) -> float:
    """An argparse type: a fraction in [0, 10), with a message that says so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give a fraction such as 0.1 for 10 %") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; give a fraction such as 0.1")
    return value


def budget(text: str) -> float:
    """An argparse type: a fraction of the run's time (fraction), or "all": no limit."""
    if text.strip().lower() == "all":
        return math.inf
    return fraction(text)


def significance(text: str) -> float:
    """An argparse type: a significance level, a probability strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # said below, with the range
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the significance level is a probability between 0 and 1 (exclusive); "
            f"typical values are 0.01 (the default) and 0.05")
    return value


def path_option(text: str) -> str:
    """An argparse type: a path that is not empty (an empty one would silently mean the
    default, or nothing)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a file or folder name, or leave "
                                         "the option out")
    return text


def git_ref_option(text: str) -> str:
    """An argparse type: a git ref that is not empty (an unset $BASE_REF in CI would
    otherwise turn the comparison off silently)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty git ref (an unset variable?); give a branch, "
                                         "a tag or a commit, e.g. --hpml-compare-ref=origin/main, "
                                         "or leave the option out")
    return text


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    defaults = TimingConfig()
    add_option(parser, "--hpml-max-time", pin=True, type=positive(float), metavar="SECONDS",
               help="cap on the sampling time of one timing (default 3 s full, 0.5 s quick)")
    add_option(parser, "--hpml-min-samples", pin=True, type=positive(int), metavar="N",
               help=f"minimum samples per timing ({defaults.min_samples})")
    add_option(parser, "--hpml-target-rse", pin=True, type=positive(float), metavar="FRACTION",
               help="stop sampling at this relative standard error of the mean "
                    f"({defaults.target_rse})")
    add_option(parser, "--hpml-yardstick", pin=True, choices=("on", "off"), default="on",
               help="on (default): CPU timings also time a fixed memory copy between their "
                    "samples, and comparisons judge them relative to it (the machine's own "
                    "speed drifts on shared runners); off: raw timings only")
    # pytest-benchmark's --benchmark-disable, for hpml.time and the benchmark fixture alike:
    # the ordinary test job runs the benchmarks for their correctness checks only.
    add_option(parser, "--hpml-disable", action="store_true",
               help="run benchmarks as plain tests: each function given to hpml.time or "
                    "benchmark is called once; nothing is timed, recorded, compared or saved "
                    "(checks still fail the test)")


@pytest.hookimpl(tryfirst=True)  # before a comparison or a save starts anything
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hpml(**options): timing and comparison options for this "
                            f"test: {', '.join(MARKER_OPTIONS)}")
    if plain_run(config):
        # A plain run records nothing: a comparison would fail every test as a row the run did
        # not make, and a save would write nothing without a word.
        opt = config.option
        asked = [name for name, given in (
            ("--hpml-compare", getattr(opt, "hpml_compare", False)),
            ("--hpml-compare-ref", getattr(opt, "hpml_compare_ref", None)),
            ("--hpml-save-baseline", getattr(opt, "hpml_save_baseline", False))) if given]
        if asked:
            raise pytest.UsageError(
                f"--hpml-disable runs benchmarks as plain tests and measures nothing, so "
                f"{' and '.join(asked)} would have nothing to "
                f"{'save' if asked == ['--hpml-save-baseline'] else 'compare or save'}: "
                "leave out one or the other")


def pytest_report_header(config: pytest.Config) -> str | None:
    if plain_run(config):
        return ("hpml: --hpml-disable: benchmarks run as plain tests (each timed function "
                "called once); nothing is timed, recorded, compared or saved")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker_options(item)  # a malformed marker stops the run before any test, naming it
