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


class _Config:
    def __init__(self) -> None:
        self.stash = pytest.Stash()


@pytest.mark.parametrize(("wanted", "started", "starts"), [(True, False, True),
                                                           (True, True, False),
                                                           (False, False, False)])
def test_a_judgement_starts_the_server_beside_it_and_leaves_it_ready(
        monkeypatch: pytest.MonkeyPatch, wanted: bool, started: bool, starts: bool) -> None:
    from pytest_hpml import rerun

    calls: list[str] = []
    monkeypatch.setattr(rerun, "_start_in_background", lambda modules: calls.append("start"))
    monkeypatch.setattr(rerun, "wait_for_forkserver", lambda: calls.append("wait") or 0.0)
    monkeypatch.setattr(rerun, "forkserver_started", lambda: started)
    config = _Config()
    if wanted:
        config.stash[rerun._WANTED] = True
    with rerun.forkserver_beside(config):  # type: ignore[arg-type]
        calls.append("judging")
    # Started before the judgement where a run wants one and none runs; waited for after it
    # always, so that no import runs beside the next timed sample.
    assert calls == (["start"] if starts else []) + ["judging", "wait"]


SWEEP = """
import pathlib

ROWS = {rows}


def test_sweep(hpml):
    slow = float(pathlib.Path("slow.txt").read_text())
    for i in range(ROWS):
        if hpml.wants(size=i):
            with hpml.row(size=i) as row:
                row.record("time", (slow if i == 7 else 1.0) * (1 + i % 3 / 100), unit="s",
                           better="lower")
"""

CONFTEST = """
import pathlib
import sys

from pytest_hpml import rerun
from pytest_hpml.machine import forkserver

_start, _run = rerun._start_in_background, forkserver.run_pytest


def _logged(what, act):
    def logged(*args, **kwargs):
        with pathlib.Path("{log}").open("a") as log:  # what, and the function that asked
            log.write(f"{{what}} from {{sys._getframe(1).f_code.co_name}}\\n")
        return act(*args, **kwargs)
    return logged


rerun._start_in_background = _logged("start", _start)
forkserver.run_pytest = _logged("fresh process", _run)
"""


def test_a_sweep_of_thousands_of_rows_starts_the_server_while_it_is_judged(
        pytester: pytest.Pytester) -> None:
    from pytest_hpml.stored_baseline import FORKSERVER_BESIDE_ROWS

    log = pytester.path / "calls.txt"
    pytester.makepyfile(test_sweep=SWEEP.format(rows=FORKSERVER_BESIDE_ROWS))
    pytester.makeconftest(CONFTEST.format(log=log.as_posix()))
    (pytester.path / "slow.txt").write_text("1.0")
    pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline", "--hpml-baselines=bl"
                                  ).assert_outcomes(passed=1)
    log.unlink(missing_ok=True)
    (pytester.path / "slow.txt").write_text("4.0")
    result = pytester.runpytest_subprocess(*FAST, "--hpml-compare", "--hpml-baselines=bl")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regressed: test_sweep[[]size=7[]] time: 1.010 s -> 4.040 s*"])
    # Started beside the judgement, before the first confirmation asked for a process (a
    # start at the configuration, where torch is installed, is stopped once the collection
    # shows these tests never import it).
    calls = log.read_text().splitlines()
    assert "start from forkserver_beside" in calls, calls
    assert calls.index("start from forkserver_beside") < calls.index(
        "fresh process from run_fresh"), calls
