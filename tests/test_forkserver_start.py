"""When the forkserver of fresh processes starts: beside the collection where it imports what
takes seconds (torch, a conftest's modules), when first needed where it imports pytest and the
plugin alone (a suite's every compare waited for those imports before its first test)."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

LEAN_SUITE = """
import json
import pathlib

from pytest_hpml.machine import forkserver


def test_work(hpml):
    seen = pathlib.Path("server-during-the-run.txt")
    if not seen.exists():  # the run's own process (a fresh one finds the file written)
        seen.write_text(json.dumps(forkserver.preloaded()))
    hpml.record("work", float(pathlib.Path("work.txt").read_text()), unit="s", better="lower")
"""


def test_a_suite_without_torch_starts_its_forkserver_when_a_confirmation_needs_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_lean=LEAN_SUITE)
    (pytester.path / "work.txt").write_text("1.0")
    pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline", "--hpml-baselines=bl",
                                  "--hpml-baseline-processes=1").assert_outcomes(passed=1)
    (pytester.path / "server-during-the-run.txt").unlink()
    (pytester.path / "work.txt").write_text("3.0")
    result = pytester.runpytest_subprocess(*FAST, "--hpml-compare", "--hpml-baselines=bl")
    result.assert_outcomes(failed=1)
    # No server while the run's own test ran: it was not waited for, nor importing beside it.
    assert json.loads((pytester.path / "server-during-the-run.txt").read_text()) is None
    # ... and the regression was still confirmed in fresh processes, which started one.
    result.stdout.fnmatch_lines(["*work: 1.000 -> 3.000 s*; 3 process(es): +200.0%, +200.0%*"])
