"""pytest-benchmark suites under pytest-hpml: a suite written for pytest-benchmark, using every
call form of its `benchmark` fixture, runs unchanged, saves, compares and fails on a slowdown
with pytest-hpml's message; pytest-benchmark keeps its fixture where it is active; and
--hpml-disable runs benchmarks as plain tests.

pytest-benchmark is installed here (the dev extra), so the inner runs meet both cases a user
project meets: `-p no:benchmark` hands the fixture to pytest-hpml, its absence leaves it to
pytest-benchmark.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hpml_testing import FAST, metrics_by_test, outside_xdist, run_with_json

from pytest_hpml import rerun
from pytest_hpml.benchmark_fixture import ClockChoice, choose_clock
from pytest_hpml.measure.benchmark_stats import BenchmarkStats

#: A conftest as pytest-benchmark users write them: it implements one of its hooks.
CONFTEST = """
    def pytest_benchmark_update_machine_info(config, machine_info):
        machine_info["suite"] = "pytester"
"""

#: Written for pytest-benchmark, every call form: not one line knows pytest-hpml.
SUITE = """
    import time
    from pathlib import Path

    import pytest

    # How much slower test_keyword_arguments sleeps: a file, so that the fresh processes of a
    # confirmation read the same factor.
    SLOWDOWN_FILE = Path(__file__).with_name("slowdown.txt")
    SLOWDOWN = float(SLOWDOWN_FILE.read_text()) if SLOWDOWN_FILE.exists() else 1.0


    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)


    def nap(seconds, scale=1.0):
        time.sleep(seconds * scale)
        return seconds


    @pytest.mark.benchmark(min_rounds=25, precision=0.5)
    def test_call_form(benchmark):
        assert benchmark(fib, 10) == 55
        assert benchmark.stats.stats.rounds >= 25


    def test_keyword_arguments(benchmark):
        assert benchmark(nap, 0.002, scale=SLOWDOWN) == 0.002


    def test_keyword_named_name(benchmark):
        def greet(name, clock="now"):
            return f"{name} {clock}"

        assert benchmark(greet, name="hpml", clock="later") == "hpml later"


    @pytest.mark.benchmark(group="pedantic", min_rounds=7, max_time=0.5, min_time=0.000005,
                           warmup=True, disable_gc=True, timer=time.perf_counter)
    def test_pedantic_rounds(benchmark):
        assert benchmark.pedantic(fib, args=(8,), rounds=6, warmup_rounds=2,
                                  iterations=4) == 21
        assert benchmark.stats.stats.rounds == 6


    @pytest.mark.benchmark(group="pedantic", timer=time.perf_counter)
    def test_pedantic_setup_teardown(benchmark):
        torn = []

        def setup():
            return ([3, 1, 2],), {"reverse": True}

        def teardown(data, reverse):
            torn.append(reverse)

        assert benchmark.pedantic(sorted, setup=setup, teardown=teardown, rounds=5,
                                  warmup_rounds=2) == [3, 2, 1]
        assert torn == [True] * 7  # the warm-up rounds are torn down too


    @pytest.mark.parametrize("n", [5, 10])
    def test_stats_and_extra_info(benchmark, n):
        benchmark.group = "fib"
        benchmark.extra_info["calls"] = 2 ** n
        benchmark.extra_info["algorithm"] = "naive"
        benchmark.extra_info["n"] = n  # the parameter again
        benchmark(fib, n)
        stats = benchmark.stats
        assert stats.stats.min <= stats["median"] <= stats.get("max")
        assert stats.stats.mean > 0 and stats["stddev"] >= 0 and stats.stats.iqr >= 0
        assert stats.stats.q1 <= stats.stats.q3 and stats["ops"] > 0
        assert benchmark.name == f"test_stats_and_extra_info[{n}]"
        assert benchmark.params == {"n": n} and benchmark.param == str(n)
        assert benchmark.enabled and not benchmark.disabled
"""

NOT_USED_TIMER = "@pytest.mark.benchmark(timer=...) is not used"


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_bench_suite=SUITE)


def _ids(name: str) -> str:
    return f"test_bench_suite.py::{name}"


def test_a_pytest_benchmark_suite_runs_unchanged_under_pytest_hpml(
        pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result, document = run_with_json(pytester, "-p", "no:benchmark")
    result.assert_outcomes(passed=7)
    output = result.stdout.str()
    assert "hpml: benchmark fixture: pytest-hpml's (pytest-benchmark is installed, not " \
           "active)" in output
    # Options that mean nothing here are said once per run, not once per test.
    assert output.count(NOT_USED_TIMER) == 1
    assert "pytest_benchmark_update_machine_info: pytest-benchmark's hook(s), implemented in " \
           "a conftest, are not called under pytest-hpml" in output
    metrics = metrics_by_test(document)
    assert set(metrics) == {_ids(n) for n in (
        "test_call_form", "test_keyword_arguments", "test_keyword_named_name",
        "test_pedantic_rounds", "test_pedantic_setup_teardown",
        "test_stats_and_extra_info[5]", "test_stats_and_extra_info[10]")}
    for name, found in metrics.items():
        assert found["time"]["unit"] == "s" and found["time"]["better"] == "lower", name
    # min_rounds, and precision as the stopping rule: precision=0.5 at pytest-benchmark's 95 %
    # confidence is a standard error of 0.5 / 1.96 of the mean. The first batch of 25 stops the
    # sampling where it is that precise (a CPU hog can make it not, and sampling then goes on).
    call_form = metrics[_ids("test_call_form")]["time"]["samples"]
    first = call_form[:25]
    target = 0.5 / statistics.NormalDist().inv_cdf(0.975)
    precise = statistics.stdev(first) / math.sqrt(25) / statistics.fmean(first) <= target
    assert len(call_form) == 25 if precise else len(call_form) > 25, call_form
    assert len(metrics[_ids("test_pedantic_rounds")]["time"]["samples"]) == 6
    assert len(metrics[_ids("test_pedantic_setup_teardown")]["time"]["samples"]) == 5
    fib10 = metrics[_ids("test_stats_and_extra_info[10]")]
    assert fib10["calls"] == {"name": "calls", "value": 1024.0, "unit": "", "kind": "setting"}
    assert "n" not in fib10  # extra_info repeating a parameter: its column shows it
    records = {r["id"]: r for r in document["records"]}
    assert records[_ids("test_stats_and_extra_info[10]")]["experiment"] == "benchmark 'fib'"
    assert records[_ids("test_stats_and_extra_info[10]")]["params"] == {
        "n": 10, "test": "test_bench_suite.py::test_stats_and_extra_info", "algorithm": "naive"}
    assert records[_ids("test_pedantic_rounds")]["experiment"] == "benchmark 'pedantic'"
    assert records[_ids("test_call_form")]["experiment"] == "benchmark"


def test_the_suite_saves_compares_and_fails_on_a_slowdown_with_hpmls_message(
        pytester: pytest.Pytester) -> None:
    _suite(pytester)
    baselines = pytester.path / "baselines"
    saved = pytester.runpytest(*FAST, "-p", "no:benchmark", "--hpml-save-baseline",
                               f"--hpml-baselines={baselines}")
    saved.assert_outcomes(passed=7)
    stored = json.loads(next(baselines.glob("*.json")).read_text())
    assert _ids("test_keyword_arguments") in {r["id"] for r in stored["records"]}

    # The 2 ms nap takes 20 ms: a nap does not follow the machine's compute pace, which a
    # loaded machine (xdist's other worker) moved 5.5x between the save and this compare, and
    # a 4x slowdown was then less than the pace's move, judged not a change of the code.
    (pytester.path / "slowdown.txt").write_text("10")
    compared = pytester.runpytest(*FAST, "-p", "no:benchmark", "--hpml-compare",
                                  f"--hpml-baselines={baselines}", "-rf")
    output = compared.stdout.str()
    assert "FAILED test_bench_suite.py::test_keyword_arguments" in output
    failure = output[output.index("_ test_keyword_arguments _"):]
    assert failure.splitlines()[1] == "hpml: failed the comparison with the baseline:"
    assert f"{_ids('test_keyword_arguments')} time: " in failure
    # Confirmed in fresh processes, which hand the fixture to pytest-hpml as this run did.
    assert "beyond the" in failure and "3 process(es)" in failure


def test_under_xdist_the_workers_lines_are_said_once_by_the_controller(
        pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess(*FAST, "-p", "no:benchmark", "-n", "2")
    result.assert_outcomes(passed=7)
    assert result.stdout.str().count(NOT_USED_TIMER) == 1


def test_pytest_benchmark_keeps_its_fixture_where_it_is_active(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    outside_xdist(monkeypatch)
    _suite(pytester)
    result, document = run_with_json(pytester, "--benchmark-max-time=0.01",
                                     "--benchmark-json=run.json")
    result.assert_outcomes(passed=7)
    assert "hpml: benchmark fixture: pytest-benchmark's (it is active; -p no:benchmark gives " \
           "the fixture to pytest-hpml)" in result.stdout.str()
    assert document["records"] == []  # pytest-hpml recorded nothing of pytest-benchmark's
    assert len(json.loads((pytester.path / "run.json").read_text())["benchmarks"]) == 7


COUNTED = """
    from pathlib import Path

    CALLS = Path(__file__).with_name("calls.txt")


    def counted(tag):
        with CALLS.open("a") as f:
            f.write(tag + "\\n")
        return tag


    def test_benchmark(benchmark):
        assert benchmark(counted, "benchmark") == "benchmark"
        assert benchmark.disabled and benchmark.stats.stats.rounds == 1


    def test_pedantic(benchmark):
        setups = []
        assert benchmark.pedantic(counted, setup=lambda: setups.append(1), args=("pedantic",),
                                  rounds=5, warmup_rounds=2) == "pedantic"
        assert setups == [1]


    def test_hpml_time(hpml):
        timing = hpml.time(counted, "hpml")
        hpml.record_bandwidth("bandwidth", 8, timing)  # figures from the timing still compute
        assert timing.result == "hpml"
"""


def test_hpml_disable_runs_benchmarks_as_plain_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_counted=COUNTED)
    # With --hpml-save-baseline it is a usage error (test_option_values.py).
    result, document = run_with_json(pytester, "-p", "no:benchmark", "--hpml-disable")
    result.assert_outcomes(passed=3)
    assert "hpml: --hpml-disable: benchmarks run as plain tests" in result.stdout.str()
    calls = (pytester.path / "calls.txt").read_text().split()
    assert sorted(calls) == ["benchmark", "hpml", "pedantic"]  # each called once
    assert document["records"] == []


BROKEN_MARKERS = {
    "@pytest.mark.benchmark(rounds=3)": "unknown @pytest.mark.benchmark option(s) ?'rounds'?",
    "@pytest.mark.benchmark(min_rounds=0)": "@pytest.mark.benchmark(min_rounds=0): min_rounds "
                                            "takes an int >= 1",
    "@pytest.mark.benchmark(precision=2, confidence=1.5)": "confidence one in (0, 1)",
}


@pytest.mark.parametrize("marker", BROKEN_MARKERS)
def test_a_malformed_benchmark_marker_stops_the_run_naming_the_test(
        pytester: pytest.Pytester, marker: str) -> None:
    pytester.makepyfile(f"""
        import pytest

        {marker}
        def test_x(benchmark):
            benchmark(len, "abc")
    """)
    result = pytester.runpytest(*FAST, "-p", "no:benchmark")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *test_x*{BROKEN_MARKERS[marker]}*"])


def test_misuse_is_an_error_that_says_what_to_do(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_twice(benchmark):
            benchmark(len, "a")
            benchmark(len, "b")

        def test_iterations_with_setup(benchmark):
            benchmark.pedantic(len, setup=lambda: (("a",), {}), iterations=3)

        def test_setup_and_args(benchmark):
            benchmark.pedantic(len, args=("a",), setup=lambda: (("b",), {}))
    """)
    result = pytester.runpytest(*FAST, "-p", "no:benchmark")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([
        "*FixtureAlreadyUsed: the benchmark fixture can be used once per test; it was used as "
        "benchmark(...) already*",
        "*ValueError: benchmark.pedantic: iterations > 1 cannot be used with setup*",
        "*TypeError: benchmark.pedantic: setup returned the arguments, so args= and kwargs= "
        "must be left out*"])


def test_stats_carry_pytest_benchmarks_fields() -> None:
    class Fixture:
        name = fullname = "t"
        group = param = params = None
        extra_info: dict = {}

    stats = BenchmarkStats([5.0, 1.0, 3.0, 2.0, 4.0, 100.0], 2, Fixture())
    assert stats.stats is stats and stats.iterations == 2
    assert (stats.min, stats.max, stats.rounds, stats.total) == (1.0, 100.0, 6, 115.0)
    assert stats["median"] == 3.5 and stats.get("mean") == pytest.approx(115 / 6)
    assert (stats.q1, stats.q3, stats.iqr) == (2.25, 4.75, 2.5)
    assert stats.ld15iqr == 1.0 and stats.hd15iqr == 5.0  # 100 lies beyond Q3 + 1.5 IQR
    assert stats.iqr_outliers == 1 and stats.stddev_outliers == 1 and stats.outliers == "1;1"
    assert stats.ops == pytest.approx(6 / 115)
    assert set(stats.as_dict()) == set(BenchmarkStats.fields)
    assert stats.get("nonexistent", 7) == 7


class _OnGpu:
    is_cuda = True  # what a CUDA tensor says


@pytest.mark.parametrize(("args", "kwargs", "params", "started", "expected"), [
    ((1, "a"), {}, {}, False, ClockChoice("cpu", "device", False)),
    ((_OnGpu(),), {}, {}, False, ClockChoice("cuda", "device", False)),
    (([(_OnGpu(),)],), {}, {}, False, ClockChoice("cuda", "device", False)),
    ((), {"x": {"y": _OnGpu()}}, {}, False, ClockChoice("cuda", "device", False)),
    ((), {"device": "cuda:1"}, {}, False, ClockChoice("cuda", "device", False)),
    ((1,), {}, {"device": "cuda"}, False, ClockChoice("cuda", "device", False)),
    ((1,), {}, {}, True, ClockChoice("cuda", "host", True)),
], ids=["cpu", "tensor", "nested", "keyword", "device-string", "device-param", "closure"])
def test_the_clock_follows_the_device_of_the_call(args, kwargs, params, started,
                                                 expected) -> None:
    assert choose_clock(args, kwargs, params, cuda_started=lambda: started) == expected


def test_the_fixture_is_documented() -> None:
    api = (Path(__file__).resolve().parents[1] / "docs" / "API.md").read_text()
    for name in ("benchmark.pedantic", "--hpml-disable", "-p no:benchmark",
                 "python -m pytest_hpml compare", "python -m pytest_hpml seed"):
        assert name in api, name


def test_confirmation_reruns_keep_the_runs_plugin_choices(pytester: pytest.Pytester) -> None:
    # A fresh process runs the invocation's own arguments (pytest_hpml.rerun), its -p choices
    # among them, as they were given.
    given = ["-q", "-p", "no:benchmark", "-pno:cacheprovider", "-p", "xdist", "--pdb"]
    config = pytester.parseconfig(*given)
    assert rerun.arguments(config, Path("spec.json"), Path("fresh"))[:len(given)] == given


#: A closure over GPU work: CUDA started in the process, nothing in the call's arguments says
#: so. torch.cuda's two calls are faked, so the wall clock's synchronize runs here.
CLOSURE_CONFTEST = """
    import pytest
    import torch

    CALLS = []


    @pytest.fixture(autouse=True)
    def cuda_started(monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: CALLS.append("sync"))
"""

CLOSURE_TEST = """
    from conftest import CALLS


    def step():
        CALLS.append("step")
        return 7


    def test_closure(benchmark):
        assert benchmark(step) == 7
        assert CALLS[:4] == ["step", "sync", "step", "sync"]
        assert CALLS.count("step") == CALLS.count("sync") > 10


    def test_pedantic_closure(benchmark):
        CALLS.clear()
        assert benchmark.pedantic(step, rounds=3, warmup_rounds=1) == 7
        assert CALLS == ["step", "sync"] * 4
"""


def test_a_closure_over_gpu_work_is_synchronized_after_each_call(pytester: pytest.Pytester
                                                                 ) -> None:
    pytester.makeconftest(CLOSURE_CONFTEST)
    pytester.makepyfile(test_closure=CLOSURE_TEST)
    result, document = run_with_json(pytester, "-p", "no:benchmark")
    result.assert_outcomes(passed=2)
    assert all(metrics["time"]["value"] > 0 for metrics in metrics_by_test(document).values())
