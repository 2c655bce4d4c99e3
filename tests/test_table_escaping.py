"""Ids, params and experiment names in the tables (issue 31 item 5): a `|` or a newline in a
Markdown table (report and comparison) stays in its cell and its row, a newline in a title
adds no heading; ESC and CR from a test reach the terminal as escapes (\\x1b, \\r)."""

from __future__ import annotations

import re

import pytest
from hpml_testing import FAST

ODD = """
    def test_t(hpml):
        hpml.experiment = "t\\n## x"
        for kind in ("a|b", "c\\nd", "e\\x1b[31mred\\rf"):
            with hpml.row(kind=kind) as row:
                row.record("time", 1e-3, unit="s")
"""


def _cells(line: str) -> int:
    """The cells of a Markdown table row as GitHub splits it (an escaped `\\|` is no border)."""
    return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))


def _assert_tables_hold(text: str) -> None:
    tables = [block.splitlines() for block in text.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2, text  # the report's table and the comparison
    for rows in tables:
        assert all(line.startswith("|") for line in rows), text
        assert all(_cells(line) == _cells(rows[0]) for line in rows), text
    assert not any(line.startswith("## x") for line in text.splitlines()), text
    assert r"a\|b" in text and "c<br>d" in text and r"e\x1b[31mred\rf" in text
    assert "\x1b" not in text and "\r" not in text  # the characters themselves


def test_markdown_report_and_comparison_tables_escape_their_medium(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ODD)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report=r.md")
    result.assert_outcomes(passed=1)
    text = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "Comparison with baseline" in text  # the comparison table is in it
    _assert_tables_hold(text)


def test_the_terminal_table_shows_control_characters_escaped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ODD)
    result = pytester.runpytest(*FAST, "--hpml-report")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert r"e\x1b[31mred\rf" in out
    assert "\x1b" not in out and "\r" not in out  # the characters themselves
