"""pytest-benchmark's command-line options where pytest-hpml serves the `benchmark` fixture
(issue 33, item 2): a project's addopts written for pytest-benchmark parse, those that mean
something set pytest-hpml's behaviour, the others are named in one line; and where
pytest-benchmark is active, however late it registers, its options are its own.

Every inner run is a user project of its own (pytester) with its own pytest.ini.
"""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, outside_xdist

from pytest_hpml.benchmark_options import OPTIONS

SUITE = """
    import pytest


    @pytest.mark.parametrize("n", [10, 100])
    @pytest.mark.benchmark(group="sums")
    def test_sum(benchmark, n):
        benchmark(sum, range(n))
        print("ROUNDS", benchmark.stats.stats.rounds)


    def test_sorted(benchmark):
        benchmark(sorted, [3, 1, 2])


    def test_plain():
        pass
"""

#: The options of the issue's real suites, in addopts: three have no meaning here.
ADDOPTS = ("--benchmark-sort=mean --benchmark-warmup --benchmark-warmup-iterations=10 "
           "--benchmark-group-by=group,param:n --benchmark-timer=time.process_time")


def _project(pytester: pytest.Pytester, addopts: str = ADDOPTS) -> None:
    pytester.makeini(f"[pytest]\naddopts = -p no:benchmark {addopts}\n")
    pytester.makepyfile(test_sums=SUITE)


def pytest_benchmark_flags() -> set[str]:
    """Every option pytest-benchmark's own plugin declares, read from its pytest_addoption."""
    plugin = pytest.importorskip("pytest_benchmark.plugin")
    flags: set[str] = set()

    class Group:
        def addoption(self, *names: str, **_: object) -> None:
            flags.update(n for n in names if n.startswith("--"))

    class Parser:
        def getgroup(self, *_: object, **__: object) -> Group:
            return Group()

        def addini(self, name: str, *_: object, **__: object) -> None:
            flags.add(f"ini:{name}")

    plugin.pytest_addoption(Parser())
    return flags


def test_every_pytest_benchmark_option_is_declared() -> None:
    assert set(OPTIONS) == pytest_benchmark_flags()


def test_addopts_written_for_pytest_benchmark_run_and_the_unused_are_named_once(
        pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = pytester.runpytest(*FAST, "--hpml-report", "-s")
    result.assert_outcomes(passed=4)
    output = result.stdout.str()
    line = ("hpml: pytest-benchmark option(s) not used by pytest-hpml: --benchmark-timer, "
            "--benchmark-warmup, --benchmark-warmup-iterations (docs/API.md says why)")
    assert output.count(line) == 1
    # --benchmark-group-by=group,param:n: one table per group and value of n, as there.
    for title in ("benchmark 'sums' n=10", "benchmark 'sums' n=100"):
        assert f"\n{title}\n" in output
    assert "\nbenchmark\n" in output  # test_sorted: no group, no n


def test_min_rounds_max_time_json_and_disable_are_applied(pytester: pytest.Pytester) -> None:
    _project(pytester, "--benchmark-min-rounds=40 --benchmark-max-time=0.02 "
                       "--benchmark-json=bench.json")
    fast = [a for a in FAST if not a.startswith("--hpml-max-time")]
    result = pytester.runpytest(*fast, "-s")
    result.assert_outcomes(passed=4)
    rounds = [int(line.split()[-1]) for line in result.stdout.lines
              if line.startswith("ROUNDS") or "ROUNDS" in line]
    assert rounds and min(rounds) >= 40, result.stdout.str()
    document = json.loads((pytester.path / "bench.json").read_text())
    assert len(document["records"]) == 3
    assert "not used by pytest-hpml" not in result.stdout.str()

    disabled = pytester.runpytest(*FAST, "-s", "--benchmark-disable")
    disabled.assert_outcomes(passed=4)
    assert "ROUNDS 1" in disabled.stdout.str()
    enabled = pytester.runpytest(*FAST, "-s", "--benchmark-disable", "--benchmark-enable")
    assert "ROUNDS 1\n" not in enabled.stdout.str()


def test_skip_and_only_select_as_pytest_benchmark_does(pytester: pytest.Pytester) -> None:
    _project(pytester, "")
    pytester.runpytest(*FAST, "--benchmark-skip").assert_outcomes(passed=1, skipped=3)
    pytester.runpytest(*FAST, "--benchmark-only").assert_outcomes(passed=3, skipped=1)


def test_save_then_compare_with_compare_fail_judge_with_the_baseline(
        pytester: pytest.Pytester) -> None:
    _project(pytester, f"--hpml-baselines={pytester.path / 'baselines'}")
    pytester.runpytest(*FAST, "--benchmark-save=first").assert_outcomes(passed=4)
    assert len(list((pytester.path / "baselines").glob("*.json"))) == 1
    compared = pytester.runpytest(*FAST, "--benchmark-compare", "--benchmark-compare-fail",
                                  "min:50%", "mean:0.001", "--hpml-report")
    output = compared.stdout.str()
    assert "Comparison with baseline" in output
    assert "--benchmark-compare-fail mean:0.001 (pytest-hpml judges relative change)" in output


def test_bad_values_stop_the_run_saying_what_to_write(pytester: pytest.Pytester) -> None:
    _project(pytester, "")
    result = pytester.runpytest(*FAST, "--benchmark-group-by=colour")
    result.stderr.fnmatch_lines(["*--benchmark-group-by=colour: colour is not one of group, "
                                 "name, fullname, func, fullfunc, param, param:NAME*"])
    result = pytester.runpytest(*FAST, "--benchmark-json=bench.txt")
    result.stderr.fnmatch_lines(["*--benchmark-json=bench.txt: *name a file ending in .json"])


@pytest.mark.parametrize("how", ["entry point", "conftest after -p no:benchmark"])
def test_where_pytest_benchmark_is_active_its_options_are_its_own(
        pytester: pytest.Pytester, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_benchmark")
    outside_xdist(monkeypatch)
    pytester.makepyfile(test_sums=SUITE)
    args = ["-p", "no:cacheprovider", "--benchmark-min-rounds=3", "--benchmark-disable-gc",
            "--benchmark-json=bench.json"]
    if how.startswith("conftest"):
        pytester.makeconftest("pytest_plugins = ['pytest_benchmark.plugin']")
        args += ["-p", "no:benchmark"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=4)
    assert "pytest-benchmark's (it is active" in result.stdout.str()
    # pytest-benchmark's own JSON (its "benchmarks" list), not pytest-hpml's report.
    assert len(json.loads((pytester.path / "bench.json").read_text())["benchmarks"]) == 3


def test_every_run_that_timed_something_ends_with_a_summary_table(
        pytester: pytest.Pytester) -> None:
    """Issue 33, item 5: pytest-benchmark prints a table by default; so does pytest-hpml."""
    _project(pytester, "--benchmark-sort=name")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=4)
    output = result.stdout.str()
    assert "hpml summary" in output
    # Split as pytest-benchmark splits its table: one per group, the ungrouped in their own;
    # rows by name within each, as --benchmark-sort=name asks.
    result.stdout.re_match_lines([r"-+ hpml summary: benchmark 'sums' -+",
                                  r"test +median ± IQR +min +max +samples",
                                  r"test_sums.py::test_sum\[100\] .*",
                                  r"test_sums.py::test_sum\[10\] .*",
                                  r"-+ hpml summary -+",
                                  r"test_sums.py::test_sorted +\S+ ± \S+ [nu]s .*",
                                  r" +--hpml-report: every metric, .*"])
    assert output.count("--hpml-no-timings-table: no summary") == 1  # under the last only
    quiet = pytester.runpytest(*FAST, "-q")
    quiet.stdout.fnmatch_lines(["hpml: 3 timing(s) of 3 test(s); the table: run without -q, "
                                "or --hpml-report"])
    assert "hpml summary" not in quiet.stdout.str()
    for off in ("--hpml-no-timings-table", "--benchmark-disable"):
        result = pytester.runpytest(*FAST, off)
        result.assert_outcomes(passed=4)
        assert "hpml summary" not in result.stdout.str()
        assert "timing(s) of" not in result.stdout.str()
    pytester.makeini("[pytest]\naddopts = -p no:benchmark\nhpml_no_timings_table = true\n")
    assert "hpml summary" not in pytester.runpytest(*FAST).stdout.str()
