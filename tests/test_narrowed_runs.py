"""A run of part of the suite (a node id, -k, -m, --deselect, a shard, a path) judges only what
it ran: the rows of the tests it left out are neither "gone" nor pruned (issue 28, item 2)."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, baseline_file

PERF = """
    import pytest

    def test_matmul(hpml):
        hpml.record("time", 1e-3, unit="s")

    @pytest.mark.slow
    def test_conv(hpml):
        hpml.record("time", 2e-3, unit="s")
"""
OTHER = """
    def test_tok(hpml):
        hpml.record("time", 3e-3, unit="s")
"""
ALL_ROWS = ["tests/test_other.py::test_tok", "tests/test_perf.py::test_conv",
            "tests/test_perf.py::test_matmul"]

#: Each way of running part of the suite, with what the prune line names.
NARROWED = [
    (["tests/test_perf.py::test_matmul"], "node id tests/test_perf.py::test_matmul"),
    (["-k", "matmul"], "-k 'matmul'"),
    (["-m", "not slow and not other"], "-m 'not slow and not other'"),
    (["--deselect", "tests/test_perf.py::test_conv", "--deselect",
      "tests/test_other.py::test_tok"], "--deselect"),
    (["--hpml-shard=3/3"], "--hpml-shard=3/3"),  # the sorted node ids' third: test_matmul
    (["tests/test_perf.py"], "paths tests/test_perf.py"),
]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user project of its own: two test files under tests/, a baseline of all three."""
    pytester.makeini("[pytest]\ntestpaths = tests\nmarkers =\n    slow: slow\n    other: other\n")
    tests = pytester.mkdir("tests")
    (tests / "test_perf.py").write_text(pytester.makepyfile(PERF).read_text())
    (tests / "test_other.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.other\n"
        + pytester.makepyfile(OTHER).read_text())
    for leftover in pytester.path.glob("test_*.py"):
        leftover.unlink()
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=3)
    return pytester


def _rows(project: pytest.Pytester) -> list[str]:
    data = json.loads(baseline_file(project.path / "baselines").read_text())
    return [r["id"] for r in data["records"]]


@pytest.mark.parametrize(("narrowing", "named"), NARROWED, ids=[n for _, n in NARROWED])
def test_a_narrowed_comparison_never_calls_the_rest_gone(project: pytest.Pytester,
                                                         narrowing: list[str], named: str
                                                         ) -> None:
    result = project.runpytest(*FAST, "--hpml-compare", *narrowing)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    assert "not in this suite" not in out and "no test makes any more" not in out, out


@pytest.mark.parametrize(("narrowing", "named"), NARROWED, ids=[n for _, n in NARROWED])
def test_a_narrowed_save_prunes_nothing_and_says_so(project: pytest.Pytester,
                                                    narrowing: list[str], named: str) -> None:
    result = project.runpytest(*FAST, "--hpml-save-baseline", "--hpml-prune-baseline",
                               *narrowing)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([f"hpml: --hpml-prune-baseline: nothing was pruned: this run "
                                 f"selected part of the suite ({named}); prune on a run of the "
                                 "whole suite"])
    assert _rows(project) == ALL_ROWS


def test_a_run_of_the_whole_suite_still_prunes_a_deleted_test(project: pytest.Pytester) -> None:
    (project.path / "tests" / "test_other.py").unlink()
    # Named as testpaths names it, the suite is whole: the deleted test's row is pruned.
    result = project.runpytest(*FAST, "--hpml-save-baseline", "--hpml-prune-baseline", "tests")
    result.stdout.fnmatch_lines(["*dropped 1 row(s) of tests that are gone*"])
    assert _rows(project) == ALL_ROWS[1:]


def test_a_shard_that_is_not_one_of_n_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest(*FAST, "--hpml-shard=4/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hpml-shard: '4/3': give the shard as I/N with 1 <= I <= N, "
                                 "e.g. --hpml-shard=1/3"])


def test_the_shards_are_disjoint_and_cover_the_suite(project: pytest.Pytester) -> None:
    ran = []
    for index in (1, 2, 3):
        result = project.runpytest(*FAST, f"--hpml-shard={index}/3", "-v")
        ran += [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert sorted(ran) == ALL_ROWS


def test_a_shard_under_xdist_never_calls_the_rest_gone(project: pytest.Pytester) -> None:
    # The workers deselect; the controller knows the run is a shard from its option.
    result = project.runpytest_subprocess(*FAST, "-n", "2", "--hpml-compare",
                                          "--hpml-save-baseline", "--hpml-prune-baseline",
                                          "--hpml-shard=3/3")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "not in this suite" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*nothing was pruned: this run selected part of the suite "
                                 "(--hpml-shard=3/3)*"])
    assert _rows(project) == ALL_ROWS
