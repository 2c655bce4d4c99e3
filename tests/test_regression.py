"""Regression detection end to end, with process-level shifts injected: record a baseline, then
compare runs whose processes are slowed as a whole, the way a noisy runner slows them.

The experiment sleeps for a duration scaled by a factor that each new process takes from a
list in a file: the suspect run is the first process, its confirmation reruns the next ones.
So a slow process that fresh processes do not reproduce must not fail, and a slowdown that
every process shows must.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpml_testing import FAST

SLEEPER = """
    import time
    from pathlib import Path

    import pytest

    def _process_factor():
        # One factor per process, in order: the first process takes the first line.
        factors = Path("factors.txt").read_text().split()
        counter = Path("counter.txt")
        taken = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(taken + 1))
        return float(factors[min(taken, len(factors) - 1)])

    FACTOR = _process_factor()

    @pytest.mark.hpml(min_samples=10, max_time=2.0)
    def test_sleep(hpml):
        t = hpml.time(time.sleep, 0.02 * FACTOR)
        hpml.record("rate", 1 / t.median, unit="1/s", better="higher", timing=t)
"""


def _run(pytester: pytest.Pytester, factors: list[float], *args: str):
    (pytester.path / "factors.txt").write_text(" ".join(map(str, factors)))
    (pytester.path / "counter.txt").write_text("0")
    # The slowdowns here are the code's by construction (each process's factor); with the
    # yardstick off, no move of the machine's pace holds them back (under a CPU hog the pace
    # loop moved +40.7 % while a sleep slowed by 50 %: the machine's move by that rule).
    # The machine's moves are tests/test_share_of_slow_calls.py's subject.
    return pytester.runpytest(*FAST, "-rA", "--hpml-report=report.json",
                              "--hpml-yardstick=off", *args)


def _verdicts(pytester: pytest.Pytester) -> dict[str, dict]:
    """{metric name: its verdict} from the run's JSON report."""
    records = json.loads((pytester.path / "report.json").read_text())["records"]
    return {name: v for r in records for name, v in (r.get("verdicts") or {}).items()}


def _noisy(pytester: pytest.Pytester) -> bool:
    """Whether this machine was too busy to time 20 ms sleeps (IQR over 10 % of the median)."""
    records = json.loads((pytester.path / "report.json").read_text())["records"]
    return any("noisy timing" in w for r in records for w in r["warnings"])


def test_a_slow_process_is_not_a_regression_when_fresh_processes_disagree(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=SLEEPER)
    _run(pytester, [1.0], "--hpml-save-baseline").assert_outcomes(passed=1)
    # The compared process runs 40 % slow; the confirmation processes are normal.
    result = _run(pytester, [1.4, 1.0, 1.0], "--hpml-compare")
    if _noisy(pytester):
        pytest.skip("this machine was too busy to time 20 ms sleeps steadily")
    result.assert_outcomes(passed=1)
    # One or two fresh processes ran (they stop once the evidence settles the verdict).
    processes = int((pytester.path / "counter.txt").read_text())
    assert processes in (2, 3)
    time = _verdicts(pytester)["time"]
    assert time["outcome"] in ("unchanged", "ambiguous"), time
    assert f"{processes} current process(es)" in time["basis"]
    assert _verdicts(pytester)["rate"]["basis"].startswith("follows time: ")


def test_a_slowdown_every_process_shows_fails_with_its_basis(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=SLEEPER)
    _run(pytester, [1.0], "--hpml-save-baseline").assert_outcomes(passed=1)
    result = _run(pytester, [1.5, 1.5, 1.5], "--hpml-compare")
    if _noisy(pytester):
        pytest.skip("this machine was too busy to time 20 ms sleeps steadily")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "hpml: failed the comparison with the baseline:",
        "  test_bench.py::test_sleep time: * -> * ms (+*%, tolerance 10%): +*% beyond the * % "
        "this machine can detect; * process(es): +*%; between-run spread *",
        "  test_bench.py::test_sleep rate: * (-*%, tolerance 10%): follows time: *",
    ])
    verdicts = _verdicts(pytester)
    assert verdicts["time"]["outcome"] == verdicts["rate"]["outcome"] == "regressed"
    # The comparison table says how much this machine can detect.
    result.stdout.fnmatch_lines(["*metric*change*verdict*detectable*", "*",
                                 "*time*regressed*"])


def test_no_confirmation_when_asked_not_to(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=SLEEPER)
    _run(pytester, [1.0], "--hpml-save-baseline").assert_outcomes(passed=1)
    result = _run(pytester, [1.5], "--hpml-compare", "--hpml-confirm=0")
    result.assert_outcomes(failed=1)
    assert (pytester.path / "counter.txt").read_text() == "1"
    assert "between-run spread unknown" in _verdicts(pytester)["time"]["basis"]


def test_faster_is_an_improvement_and_never_confirmed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=SLEEPER)
    _run(pytester, [1.0], "--hpml-save-baseline").assert_outcomes(passed=1)
    result = _run(pytester, [0.5], "--hpml-compare")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "counter.txt").read_text() == "1"
    assert _verdicts(pytester)["time"]["outcome"] in ("improved", "ambiguous")


FIXED = """
    from pathlib import Path

    def test_sizes(hpml):
        factor = float(Path("factor.txt").read_text())
        hpml.record("bytes", 1000 * factor, unit="B", better="lower")
        hpml.record("bytes_loose", 1000 * factor, unit="B", better="lower", tolerance=0.6)
        hpml.record("accuracy", 0.9 / factor, unit="%", better="higher")
        hpml.record("layers", 10 * factor, better=None)  # no direction: never a regression
"""


def _fixed(pytester: pytest.Pytester, factor: float, *args: str):
    (pytester.path / "factor.txt").write_text(str(factor))
    return pytester.runpytest(*FAST, "-rA", *args)


def test_fixed_values_regress_by_tolerance_once_reruns_agree(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sizes=FIXED)
    _fixed(pytester, 1.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    same = _fixed(pytester, 1.0, "--hpml-compare", "--hpml-report")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*bytes *unchanged*", "*bytes_loose*unchanged*",
                               "*accuracy*unchanged*", "*layers*unchanged*"])

    slow = _fixed(pytester, 1.3, "--hpml-compare", "--hpml-report")
    slow.assert_outcomes(failed=1)
    # Deterministic values: the reruns give the same numbers, so the tolerance decides.
    slow.stdout.fnmatch_lines([
        "hpml: failed the comparison with the baseline:",
        "  test_sizes.py::test_sizes bytes: 1 -> 1.300 kB (+30.0%, tolerance 10%): *",
        "  test_sizes.py::test_sizes accuracy: 0.9000 -> 0.6923 % (-23.1%, tolerance 10%): *",
    ])
    assert "test_sizes bytes_loose:" not in slow.stdout.str()
    slow.stdout.fnmatch_lines(["*bytes *regressed*", "*bytes_loose*unchanged*",
                               "*accuracy*regressed*", "*layers*ambiguous*"])

    better = _fixed(pytester, 0.5, "--hpml-compare", "--hpml-report")
    better.assert_outcomes(passed=1)
    better.stdout.fnmatch_lines(["*bytes *improved*", "*accuracy*improved*"])


def test_tolerance_option_widens_the_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sizes=FIXED)
    _fixed(pytester, 1.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    _fixed(pytester, 1.3, "--hpml-compare", "--hpml-tolerance=0.5").assert_outcomes(passed=1)
    _fixed(pytester, 1.3, "--hpml-compare", "--hpml-confirm=0").assert_outcomes(failed=1)


def test_a_metric_gone_from_the_test_is_missing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="def test_m(hpml):\n    hpml.record('a', 1.0, better='lower')\n"
                               "    hpml.record('b', 2.0, better='lower')\n")
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    pytester.makepyfile(test_m="def test_m(hpml):\n    hpml.record('a', 1.0, better='lower')\n")
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    # A metric the baseline has and the run lacks fails the comparison ...
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_m b: in the baseline (2) but not recorded by this run; "
                                 "if that is expected*hpml.expect_missing(...)*",
                                 "*test_m*a*unchanged*", "*test_m*b*2 *missing*"])
    # ... unless the test says it may be missing.
    pytester.makepyfile(test_m="def test_m(hpml):\n    hpml.record('a', 1.0, better='lower')\n"
                               "    hpml.expect_missing('b')\n")
    pytester.runpytest(*FAST, "--hpml-compare").assert_outcomes(passed=1)
    pytester.makepyfile(test_m="import pytest\n\n@pytest.mark.hpml(expect_missing=['b'])\n"
                               "def test_m(hpml):\n    hpml.record('a', 1.0, better='lower')\n")
    pytester.runpytest(*FAST, "--hpml-compare").assert_outcomes(passed=1)


def test_an_out_of_memory_row_regresses_from_fitting(pytester: pytest.Pytester) -> None:
    (pytester.path / "size.txt").write_text("10")
    pytester.makepyfile(
        """
        from pathlib import Path

        def test_batch(hpml):
            with hpml.catch_out_of_memory():
                size = int(Path("size.txt").read_text())
                if size > 100:
                    raise MemoryError("cannot allocate a batch of that size")
                hpml.record("peak", size * 1e6, unit="B", better="lower")
        """
    )
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    (pytester.path / "size.txt").write_text("1000")
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "test_batch fits_in_memory: 1 -> 0" in out  # the finding regressed ...
    assert "test_batch peak:" not in out  # ... and its missing metrics are expected
    result.stdout.fnmatch_lines(["*out of memory*"])


def test_the_json_report_keeps_every_verdict_field(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sizes=FIXED)
    _fixed(pytester, 1.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    _fixed(pytester, 1.0, "--hpml-compare", "--hpml-report=report.json").assert_outcomes(
        passed=1)
    report = json.loads(Path(pytester.path / "report.json").read_text())
    bytes_ = next(r["verdicts"]["bytes"] for r in report["records"])
    assert {"outcome", "change", "baseline", "current", "mdc", "basis", "unit",
            "processes"} <= set(bytes_)


def test_a_save_measures_in_fresh_processes_so_the_first_baseline_knows_the_spread(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=SLEEPER)
    _run(pytester, [1.0, 2.0, 0.5], "--hpml-save-baseline", "--hpml-baseline-processes=3",
         "--hpml-save-budget=all").assert_outcomes(passed=1)
    assert (pytester.path / "counter.txt").read_text() == "3"
    stored = json.loads(next((pytester.path / "baselines").glob("*.json")).read_text())
    history = {m["name"]: m["history"] for r in stored["records"] for m in r["metrics"]}
    assert len(history["time"]) == len(history["rate"]) == 3
    # The run's own process (factor 1) first, then the fresh ones (factors 2 and 0.5), as
    # every path folds them (compare/engine.merge).
    own, slow, fast = history["time"]
    assert fast < own < slow
    # With the spread known, a comparison needs no confirmation to call an identical run.
    result = _run(pytester, [1.0], "--hpml-compare")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "counter.txt").read_text() == "1"
    assert "from 3 stored and 1 current" in _verdicts(pytester)["time"]["basis"]
