"""What a run says while its fresh processes run: a CI log (no terminal) gets one line per
batch that took a while and nothing for quick ones; a terminal gets a live line."""

from __future__ import annotations

import pytest
from hpml_testing import FAST

from pytest_hpml.progress import FreshProgress

SLOW_TEST = """
    import os
    import time

    def test_slow_step(hpml):
        time.sleep(3.0)  # a test of some seconds: its confirmations take as long
        hpml.record("step_time", float(os.environ.get("STEP", "1e-3")), unit="s",
                    better="lower")
"""


def test_a_ci_log_gets_one_line_for_confirmations_that_took_a_while(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SLOW_TEST)
    assert pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline",
                                         "--hpml-baseline-processes=1").ret == 0
    pytester.makeconftest("import os\nos.environ['STEP'] = '3e-3'\n")  # three times slower
    result = pytester.runpytest_subprocess(*FAST, "--hpml-compare", "--hpml-confirm=2")
    assert result.ret != 0
    # The confirmations run one process at a time: a line for each, as each took seconds.
    result.stdout.fnmatch_lines(["hpml: confirmation of test_a_ci_log*.py::test_slow_step: "
                                 "1 process(es) in * s"])
    assert "process 1 of 2" not in result.stdout.str()  # no live line without a terminal


def test_under_xdist_the_controller_says_a_workers_slow_confirmations(
        pytester: pytest.Pytester) -> None:
    """A worker has no terminal: its line rides on the test's report, and the controller says
    it, naming the worker."""
    pytester.makepyfile(SLOW_TEST)
    assert pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline",
                                         "--hpml-baseline-processes=1").ret == 0
    pytester.makeconftest("import os\nos.environ['STEP'] = '3e-3'\n")  # three times slower
    result = pytester.runpytest_subprocess(*FAST, "-n", "2", "--hpml-compare",
                                           "--hpml-confirm=2")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["hpml: [[]gw?[]] confirmation of test_under_xdist*.py::"
                                 "test_slow_step: 1 process(es) in * s"])


class FakeTerminal:
    def __init__(self, tty: bool) -> None:
        self.isatty, self.out = tty, []

    def ensure_newline(self) -> None:
        self.out.append("<newline>")

    def rewrite(self, line: str, erase: bool = False) -> None:
        self.out.append(f"\r{line}")

    def line(self, text: str) -> None:
        self.out.append(f"{text}\n")

    def write_line(self, text: str) -> None:
        self.out.append(f"{text}\n")


class FakeConfig:
    def __init__(self, terminal: FakeTerminal) -> None:
        self.pluginmanager = type("PM", (), {"get_plugin": staticmethod(lambda name: terminal)})


def test_a_terminal_gets_a_live_line_with_the_process_and_the_budget_left() -> None:
    clock = iter([0.0, 1.0, 30.0, 31.5])
    tty = FakeTerminal(tty=True)
    progress = FreshProgress(FakeConfig(tty), "baseline process", ["a.py::t1", "a.py::t2"], 2,
                             deadline=41.0, now=lambda: next(clock))
    progress.starting(0)
    progress.starting(1)
    progress.done()
    assert tty.out == [
        "<newline>",
        "\rhpml: baseline process of a.py::t1 and 1 more: process 1 of 2, 40 s left in the budget",
        "\rhpml: baseline process of a.py::t1 and 1 more: process 2 of 2, 11 s left in the budget",
        "\rhpml: baseline process of a.py::t1 and 1 more: 2 process(es) in 31.5 s", "\n"]
    # Quick batches stay out of a CI log.
    log = FakeTerminal(tty=False)
    clock = iter([0.0, 1.0])
    quick = FreshProgress(FakeConfig(log), "confirmation", ["a.py::t"], 1, None,
                          now=lambda: next(clock))
    quick.starting(0)
    quick.done()
    assert log.out == []


def test_under_xdist_a_workers_live_line_reaches_the_controller_and_no_warning_is_left(
        pytester: pytest.Pytester) -> None:
    """Issue 28: a worker's "process i of n" reaches the controller while the processes run
    (xdist's warning channel, the one a worker has mid-test), and the controller keeps it out
    of the warnings summary: a progress line is not a warning."""
    pytester.makepyfile(SLOW_TEST)
    assert pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline",
                                         "--hpml-baseline-processes=1").ret == 0
    pytester.makeconftest("""
        import os
        import time
        from pathlib import Path

        os.environ['STEP'] = '3e-3'  # three times slower

        def pytest_warning_recorded(warning_message, nodeid):
            if type(warning_message.message).__name__ == "ProgressNote":
                with Path("notes.txt").open("a") as notes:
                    notes.write(f"{time.time()} {warning_message.message.args}\\n")
    """)
    result = pytester.runpytest_subprocess(*FAST, "-n", "2", "--hpml-compare",
                                           "--hpml-confirm=2")
    assert result.ret != 0
    assert "warnings" not in result.parseoutcomes()
    assert "ProgressNote" not in result.stdout.str()
    notes = (pytester.path / "notes.txt").read_text().splitlines()
    said = [line.split(" ", 1)[1] for line in notes]
    # Two confirmations, one process each: each announced, then said done.
    assert len(said) == 4, said
    assert "confirmation of test_under_xdist_a_workers_live_line" in said[0]
    assert ": process 1 of 1" in said[0] and said[0].endswith("False)")
    assert "1 process(es) in" in said[1] and said[1].endswith("True)")


class FakeReporter(FakeTerminal):
    def __init__(self) -> None:
        super().__init__(tty=True)
        self.stats: dict[str, list] = {}


def test_the_controller_draws_a_workers_note_as_its_live_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings
    from types import SimpleNamespace

    from pytest_hpml import progress

    tr = FakeReporter()
    config = SimpleNamespace(stash=pytest.Stash(), pluginmanager=SimpleNamespace(
        get_plugin=lambda name: tr))
    monkeypatch.setattr(progress, "_CONTROLLER", [config])
    for line, done in (("hpml: [gw1] confirmation of t.py::a: process 1 of 2", False),
                       ("hpml: [gw1] confirmation of t.py::a: 2 process(es) in 4.0 s", True)):
        note = warnings.WarningMessage(progress.ProgressNote(line, done),
                                       progress.ProgressNote, "progress.py", 0)
        tr.stats["warnings"] = [SimpleNamespace(message=f"progress.py:0: ProgressNote: {line}")]
        progress.pytest_warning_recorded(note, "t.py::a", "runtest")
        assert "warnings" not in tr.stats  # taken back out: not a warning
    assert tr.out == ["\rhpml: [gw1] confirmation of t.py::a: process 1 of 2",
                      "\rhpml: [gw1] confirmation of t.py::a: 2 process(es) in 4.0 s", "\n"]
