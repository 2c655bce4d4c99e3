"""A job keeps several reports of one run (--hpml-report once per format) and a short summary
for a pull-request comment or a job summary (--hpml-summary), in user projects of their own."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

EXPERIMENT = """
    import os

    def test_tokenize(hpml):
        hpml.record("time", float(os.environ.get("TIME", "1e-3")), unit="s", better="lower")

    def test_count(hpml):
        hpml.record("count", 42.0, unit="1", better="higher")
"""


def test_the_report_option_given_once_per_format_writes_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-report=out/a.md", "--hpml-report=out/a.json",
                                "--hpml-report=out/a.csv")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["hpml: wrote out/a.md", "hpml: wrote out/a.json",
                                 "hpml: wrote out/a.csv"])
    assert "test_tokenize" in (pytester.path / "out" / "a.md").read_text()
    assert len(json.loads((pytester.path / "out" / "a.json").read_text())["records"]) == 2
    assert (pytester.path / "out" / "a.csv").read_text().count("\n") >= 3
    # The same file twice is refused before the tests run, naming both.
    result = pytester.runpytest(*FAST, "--hpml-report=out/a.md", "--hpml-report=out/./a.md")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--hpml-report=out/a.md and --hpml-report=out/./a.md name "
                                 "the same file*"])


def test_the_summary_says_the_verdicts_and_nothing_else(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(EXPERIMENT)
    assert pytester.runpytest(*FAST, "--hpml-save-baseline",
                              "--hpml-baseline-processes=1").ret == 0
    monkeypatch.setenv("TIME", "3e-3")  # the tokenizer three times slower
    slower = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-confirm=0",
                                "--hpml-summary=out/summary.md")
    assert slower.ret != 0
    text = (pytester.path / "out" / "summary.md").read_text()
    assert "**1 metric(s) failed**" in text and "1 regressed" in text and "1 unchanged" in text
    assert "- regressed: test_tokenize time: 1.000 ms -> 3.000 ms (+200.0%" in text
    assert "test_count" not in text  # an unchanged metric is counted, not listed
    assert "|" not in text  # no table


def test_a_summary_that_is_not_markdown_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-summary=out/summary.json")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*the summary is Markdown; name a .md file*"])
