"""benchmark.extra_info under a name the row already uses (issue 31 item 14): the table's test
column (or a parameter) keeps its value; the extra figure is shown beside it."""

from __future__ import annotations

import pytest
from hpml_testing import run_with_json


def test_extra_info_named_test_does_not_replace_the_test_column(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="""
        import pytest

        @pytest.mark.parametrize("size", [4])
        def test_t(benchmark, size):
            benchmark.extra_info["test"] = "mine"
            benchmark.extra_info["size"] = "large"  # not the parameter's value
            benchmark(sum, range(size))
    """)
    result, document = run_with_json(pytester, "-p", "no:benchmark")
    result.assert_outcomes(passed=1)
    params = document["records"][0]["params"]
    assert params["test"] == "test_x.py::test_t"  # the file too: same-named tests apart
    assert params["extra_info.test"] == "mine"
    assert params["size"] == 4 and params["extra_info.size"] == "large"
