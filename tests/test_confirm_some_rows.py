"""A sweep that asks `hpml.wants` before it measures a row has a confirmation measure only the
rows it confirms: a fresh process of a 10 000-row sweep made every row again (about a second
each, twice a compare) to settle the 3-7 rows its first process showed preempted."""

from __future__ import annotations

import json
import subprocess

import pytest
from hpml_testing import FAST, save_in_processes, verdicts_of

from pytest_hpml import rerun
from pytest_hpml.fixture import Hpml
from pytest_hpml.recorder import HpmlContext
from pytest_hpml.results import Record

SWEEP = """
import os

def test_sweep(hpml):
    made = []
    for i in range(40):
        if not hpml.wants(size=i):
            continue
        made.append(i)
        slower = 50.0 if i == 3 and os.environ.get("SLOWER") else 1.0
        with hpml.row(size=i) as row:
            row.record("time", 1e-3 * (1 + i / 1000) * slower, unit="s", better="lower")
    with open("made.txt", "a") as f:  # each process: the rows it made
        f.write(",".join(map(str, made)) + "\\n")
"""


def test_a_confirmation_makes_only_the_suspected_rows(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_sweep=SWEEP)
    for _ in range(3):
        pytester.runpytest(*save_in_processes(1)).assert_outcomes(passed=1)
    made = pytester.path / "made.txt"
    made.unlink()
    out = pytester.path / "compare.json"
    pytester.runpytest(*FAST, "--hpml-compare", f"--hpml-report={out}").assert_outcomes(
        passed=1)
    assert made.read_text().splitlines() == [",".join(map(str, range(40)))]  # none confirmed

    made.unlink()
    monkeypatch.setenv("SLOWER", "1")
    result = pytester.runpytest(*FAST, "--hpml-compare", f"--hpml-report={out}")
    result.assert_outcomes(failed=1)
    # The test's own process made every row; each confirming process the suspected one, after
    # the rows made just before it (rerun.WARM_UP_ROWS), which it drops.
    assert made.read_text().splitlines() == [",".join(map(str, range(40))), "0,1,2,3",
                                             "0,1,2,3"]
    verdicts = {rid: v["time"] for rid, v in
                verdicts_of(json.loads(out.read_text(encoding="utf-8"))).items()}
    slowed = verdicts.pop("test_sweep.py::test_sweep[size=3]")
    assert slowed["outcome"] == "regressed" and slowed["processes"] == 3
    assert {(v["outcome"], v["processes"]) for v in verdicts.values()} == {("unchanged", 1)}
    result.stdout.fnmatch_lines(["*test_sweep[[]size=3[]] time*+4900.0%*"])


def test_wants_names_rows_as_hpml_row_does() -> None:
    plain = Hpml(HpmlContext(), Record("t.py::test_a", "a"))
    assert plain.wants(size=1) and plain.wants()  # a run of its own makes every row
    wanted = frozenset({"t.py::test_a[size=3,kind=x]", "t.py::test_b[p1-size=3]"})
    sweep = Hpml(HpmlContext(), Record("t.py::test_a", "a"), wanted=wanted)
    assert sweep.wants(size=3, kind="x")
    assert not sweep.wants(size=3) and not sweep.wants(kind="x", size=3) and not sweep.wants()
    with sweep.row(size=3, kind="x") as row:  # the id a wanted row gets is the one asked for
        assert row._record.id in wanted
    case = Hpml(HpmlContext(), Record("t.py::test_b[p1]", "b"), wanted=wanted)
    assert case.wants(size=3) and not case.wants(size=4)
    own = Hpml(HpmlContext(), Record("t.py::test_a", "a"), wanted=frozenset({"t.py::test_a"}))
    assert own.wants() and not own.wants(size=3)


def test_a_pair_at_ref_makes_only_the_suspected_rows(pytester: pytest.Pytester) -> None:
    """--hpml-compare-ref's pairs (a process here and one at REF) run for the rows the first
    pair suspects: a sweep that asks hpml.wants makes only those, on both sides."""
    log = pytester.path.parent / f"{pytester.path.name}-made.txt"
    sweep = SWEEP.replace('open("made.txt", "a")', f'open({str(log)!r}, "a")')
    pytester.makepyfile(test_sweep=sweep)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *step], cwd=pytester.path, check=True, capture_output=True)
    # Row 3 slower here only (REF's processes see the environment too: a file of this tree).
    (pytester.path / "test_sweep.py").write_text(
        sweep.replace('os.environ.get("SLOWER")', 'os.path.exists("slower.txt")'))
    (pytester.path / "slower.txt").write_text("")
    out = pytester.path / "ref.json"
    result = pytester.runpytest(*FAST, "--hpml-compare-ref=HEAD", f"--hpml-report={out}")
    result.assert_outcomes(failed=1)
    every = ",".join(map(str, range(40)))
    made = log.read_text().splitlines()
    # Every row here and at REF (the first pair), then each pair the suspected row, after the
    # rows just before it.
    assert sorted(made[:2]) == [every, every] and made[2:] and set(made[2:]) == {"0,1,2,3"}, \
        made
    verdicts = {rid: v["time"] for rid, v in
                verdicts_of(json.loads(out.read_text(encoding="utf-8"))).items()}
    assert verdicts.pop("test_sweep.py::test_sweep[size=3]")["outcome"] == "regressed"
    assert {v["outcome"] for v in verdicts.values()} == {"unchanged"}


#: SWEEP whose first call in each process is 20x (a forked process's pages, its caches, cold),
#: and whose row 30 was preempted once, in the test's own process.
COLD = SWEEP.replace("import os\n", "import os\n\nCALLS = []\n", 1).replace(
    '        slower = 50.0 if i == 3 and os.environ.get("SLOWER") else 1.0\n',
    """        slower = 20.0 if not CALLS else 1.0
        CALLS.append(i)
        if i == 30 and os.environ.get("HICCUP") and not os.path.exists("hiccup.txt"):
            open("hiccup.txt", "w").close()
            slower *= 20.0
""")
assert "CALLS" in COLD and "HICCUP" in COLD


def test_a_confirmation_times_the_rows_before_a_suspected_one_first(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row preempted in the test's own process is measured again after the rows the run made
    just before it: timed first in each confirming process, it ran cold there too, and a
    confirmation of unchanged code failed the comparison."""
    pytester.makepyfile(test_sweep=COLD)
    for _ in range(3):
        pytester.runpytest(*save_in_processes(1)).assert_outcomes(passed=1)
    made = pytester.path / "made.txt"
    made.unlink()
    monkeypatch.setenv("HICCUP", "1")
    out = pytester.path / "compare.json"
    result = pytester.runpytest(*FAST, "--hpml-compare", f"--hpml-report={out}")
    result.assert_outcomes(passed=1)
    # Each confirming process made rows 27-29 first (its cold call among them), then row 30:
    # two of them, as the median of the first two processes still showed the change.
    assert made.read_text().splitlines() == [",".join(map(str, range(40))), "27,28,29,30",
                                             "27,28,29,30"]
    report = json.loads(out.read_text(encoding="utf-8"))
    verdicts = {rid: v["time"] for rid, v in verdicts_of(report).items()}
    hiccup = verdicts.pop("test_sweep.py::test_sweep[size=30]")
    assert hiccup["outcome"] == "unchanged" and hiccup["processes"] == 3
    assert {(v["outcome"], v["processes"]) for v in verdicts.values()} == {("unchanged", 1)}
    # The rows it warmed up with keep the test's own process alone: their values are dropped.
    measured_again = {r["id"] for r in report["records"] if r.get("replicates")}
    assert measured_again == {"test_sweep.py::test_sweep[size=30]"}


def test_the_rows_a_fresh_process_warms_up_with_are_those_made_just_before() -> None:
    made = [Record(f"t.py::test_a[size={i}]", "a", test="t.py::test_a") for i in range(10)]
    ids = [r.id for r in rerun.warm_up([made[5], made[6]], made)]
    assert sorted(ids) == [made[i].id for i in (2, 3, 4)]  # 5 is wanted: measured anyway
    assert [r.id for r in rerun.warm_up([made[1]], made)] == [made[0].id]
    assert rerun.warm_up([made[0]], made) == []  # the first row of the run: none before it
    other = Record("t.py::test_b[size=1]", "b", test="t.py::test_b")
    assert rerun.warm_up([other], made) == []
