"""The report of a suite written for pytest-benchmark (issue 33, item 6): tables split by the
benchmark's group, two tests named alike in two files told apart, each cell in its own unit
where one unit cannot read a column, extra_info booleans as true/false and a None parameter
as None, object parameters by pytest's ids. A user project of its own, run with -p no:benchmark."""

from __future__ import annotations

import pytest
from hpml_testing import FAST

FIRST = """
    import time

    import pytest


    @pytest.mark.benchmark(group="parse")
    @pytest.mark.parametrize("limit", [None, 3])
    def test_parse(benchmark, limit):
        benchmark.extra_info["cached"] = limit is None
        benchmark(sorted, [3, 1, 2])


    class BaseConverter:
        pass


    class Custom:
        pass


    @pytest.mark.benchmark(group="convert")
    @pytest.mark.parametrize("converter", [BaseConverter, Custom()], ids=["base", "custom"])
    def test_convert(benchmark, converter):
        benchmark(repr, converter)


    @pytest.mark.benchmark(group="wide")
    @pytest.mark.parametrize("seconds", [0.0, 0.03])
    def test_wide(benchmark, seconds):
        benchmark.pedantic(time.sleep if seconds else abs, args=(seconds,), rounds=3)
"""

SECOND = """
    import pytest


    @pytest.mark.benchmark(group="parse")
    def test_parse(benchmark):
        benchmark(sorted, [2, 1])
"""


def test_the_report_of_a_pytest_benchmark_suite_reads_as_its_users_expect(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:benchmark\n")
    pytester.makepyfile(test_first=FIRST, test_second=SECOND)
    result = pytester.runpytest(*FAST, "--hpml-report")
    result.assert_outcomes(passed=7)
    output = result.stdout.str()
    # Object parameters by the ids pytest gave them, never a repr or a memory address.
    convert = output[output.index("\nbenchmark 'convert'"):output.index("\nbenchmark 'wide'")]
    assert "base " in convert and "custom " in convert, convert
    assert "<class" not in output and " at 0x" not in output
    # One table per group, as pytest-benchmark prints them.
    parse = output[output.index("\nbenchmark 'parse'"):output.index("\nbenchmark 'wide'")]
    wide = output[output.index("\nbenchmark 'wide'"):]
    # Two tests named test_parse in two files: two rows, each naming its file.
    assert "test_first.py::test_parse" in parse and "test_second.py::test_parse" in parse
    rows = [line.split() for line in parse.splitlines() if "test_first.py::test_parse " in line]
    assert sorted(row[0] for row in rows) == ["3", "None"], parse  # None, not a blank
    assert sorted(row[2] for row in rows) == ["false", "true"], parse  # extra_info booleans
    # Microseconds beside 30 ms: each cell its own unit, never '3.028e+05 ± 11058 us'.
    assert "e+0" not in wide, wide
    assert " ms" in wide and (" ns" in wide or " us" in wide), wide
