"""One comparison engine (issue 27): every path that judges a metric (a compare against the
stored baseline, a compare against a git ref measured now, the command line, a save that
accepts a change) gives the same verdict for the same numbers, with one set of rules. Each of
the issue's defects as a user project meets it."""

from __future__ import annotations

import ast
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hpml_testing import FAST, ROOT, git

#: A save that measures every test in three processes, whatever they cost.
SAVE3 = ("--hpml-save-baseline", "--hpml-baseline-processes=3", "--hpml-save-budget=all")

#: A test whose value in each process is the next of values.txt (a counter beside the test
#: file counts the processes): the run's own process first, then its fresh processes.
PER_PROCESS = """
    import os
    from pathlib import Path

    import pytest

    def _value():
        here = Path(__file__).parent
        values = (here / "values.txt").read_text().split()
        counter = here / "counter.txt"
        taken = int(counter.read_text() or 0) if counter.exists() else 0
        counter.write_text(str(taken + 1))
        return float(values[taken % len(values)])

    MS = _value()

    @pytest.mark.hpml_sweep("size", quick=[2], full=[2])
    def test_copy(hpml, size):
        timing = hpml.record_timing("time", [MS * 1e-3 * f for f in (0.99, 1.0, 1.01)])
        hpml.record_bandwidth("bandwidth", 1e6 * size, timing)
"""


def _values(folder: Path, *values: float) -> None:
    (folder / "values.txt").write_text(" ".join(map(str, values)))
    (folder / "counter.txt").write_text("")


def _stored(folder: Path) -> dict[str, dict]:
    data = json.loads(next((folder / "baselines").glob("*.json")).read_text())
    return {m["name"]: m for r in data["records"] for m in r["metrics"]}


# -- 1, 9: a change accepted by a save moves a figure and its timing together ----------------

def test_a_save_accepts_a_timing_and_its_bandwidth_together(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_copy=PER_PROCESS)
    # Three processes spread by about 30 %: a 5x speed-up is beyond that noise, for the time
    # (-80 %) as for the bandwidth (+400 %).
    _values(pytester.path, 10, 14, 7)
    pytester.runpytest(*FAST[:-1], *SAVE3
                       ).assert_outcomes(passed=1)
    _values(pytester.path, 2, 2.8, 1.4)
    accept = pytester.runpytest(*FAST[:-1], "--hpml-save-baseline",
                                "--hpml-baseline-processes=3", "--hpml-save-budget=all")
    accept.assert_outcomes(passed=1)
    accept.stdout.fnmatch_lines(["*2 metric(s) changed beyond what this machine can detect*"
                                 "time: 10.00 -> 2.000 ms (improved)*bandwidth: 200 -> 1,000 MB/s "
                                 "(improved)"])
    stored = _stored(pytester.path)
    assert stored["time"]["history"] == pytest.approx([2e-3, 2.8e-3, 1.4e-3])  # no 10 ms mixed in
    assert len(stored["bandwidth"]["history"]) == 3
    assert len(stored["time"]["accepted"]) == len(stored["bandwidth"]["accepted"]) == 1
    # The next compare of the same code: both unchanged, on one clean level each.
    _values(pytester.path, 2, 2.8, 1.4)
    again = pytester.runpytest(*FAST[:-1], "--hpml-compare", "--hpml-report")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*test_copy*size=2*time*2.000 ms*2.000 ms*+0.0%*unchanged*",
                                "*test_copy*size=2*bandwidth*+0.0%*unchanged*"])
    # 9: each accepted level is said in its metric's unit, with the row's parameters.
    notes = [line.strip() for line in again.stdout.lines if ": accepted on " in line]
    assert [n.split(": accepted on ")[0] for n in notes] == [
        "test_copy [size=2] time", "test_copy [size=2] bandwidth"]
    assert notes[0].endswith(": 10.00 ms -> 2.000 ms")
    assert notes[1].endswith(": 200 MB/s -> 1 GB/s")


# -- 2: the value a verdict rests on is the value shown, everywhere --------------------------

def test_the_current_value_shown_is_the_one_the_verdict_rests_on(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_copy=PER_PROCESS)
    _values(pytester.path, 4, 4, 4)
    pytester.runpytest(*FAST[:-1], *SAVE3
                       ).assert_outcomes(passed=1)
    # The test's own process is slow (6 ms), its two confirmations are not (4.4 ms): the verdict
    # rests on the median of the three, 4.4 ms, and so must every output.
    _values(pytester.path, 6, 4.4, 4.4)
    result = pytester.runpytest(*FAST[:-1], "--hpml-compare", "--hpml-report",
                                "--hpml-report=r.csv", "--hpml-export-benchmark-action=a.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*4.400 ± *",  # the experiment table's cell
                                 "*test_copy*size=2*time*4.000 ms*4.400 ms*+10.0%*"])
    with open(pytester.path / "r.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["metric"] == "time")
    assert float(row["value"]) == pytest.approx(4.4e-3) and row["processes"] == "3"
    exported = json.loads((pytester.path / "a.json").read_text())
    assert exported[0]["value"] == pytest.approx(4.4e-3)


# -- 3: one function folds fresh-process values, one judges -------------------------------------

PACKAGE = ROOT / "pytest_hpml"


def _calls(name: str) -> set[str]:
    """The plugin's modules that call `name` (a function or a class)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                if called == name:
                    found.add(str(path.relative_to(PACKAGE)))
    return found


def test_one_function_folds_process_values_and_one_judges() -> None:
    # Process values are made into Replicates by the engine's merge alone (results.py reads
    # them back and gives a lone process's value); metrics are judged by judge_metric, called
    # by the engine alone.
    assert _calls("Replicates") <= {"results.py", "compare/engine.py"}
    assert _calls("merge") <= {"compare/engine.py", "compare/history.py"}  # history: the store's
    assert _calls("judge_metric") == {"compare/engine.py"}
    assert _calls("judge") - {"compare/engine.py", "stored_baseline.py", "saving.py",
                              "base_ref.py", "compare/results_files.py",
                              "report/dashboard/judging.py"} == set()


def test_a_save_keeps_the_processes_in_the_order_a_report_holds_them(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_copy=PER_PROCESS)
    _values(pytester.path, 3, 5, 4)
    pytester.runpytest(*FAST[:-1], *SAVE3,
                       "--hpml-report=save.json").assert_outcomes(passed=1)
    report = json.loads((pytester.path / "save.json").read_text())
    held = report["records"][0]["replicates"]["time"]["values"]
    assert held == pytest.approx([3e-3, 5e-3, 4e-3])  # the run's own process first
    assert _stored(pytester.path)["time"]["history"] == pytest.approx(held)


# -- 4, 5: units and directions are the baseline's, or the comparison says why not ------------

UNITS = """
    import os

    def test_latency(hpml):
        unit, value, better = os.environ["UNIT"], float(os.environ["VALUE"]), os.environ["BETTER"]
        if os.environ.get("KIND") == "setting":
            hpml.setting("latency", value, unit)
        else:
            hpml.record("latency", value, unit=unit, better=better, samples=[value] * 10)
"""


def _units(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, unit: str,
           value: float, *args: str, better: str = "lower", kind: str = "measured"
           ) -> pytest.RunResult:
    for name, given in (("UNIT", unit), ("VALUE", str(value)), ("BETTER", better),
                        ("KIND", kind)):
        monkeypatch.setenv(name, given)
    return pytester.runpytest(*FAST, *args)


def test_units_are_converted_where_commensurable_and_refused_where_not(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_latency_units=UNITS)
    _units(pytester, monkeypatch, "ms", 5, "--hpml-save-baseline").assert_outcomes(passed=1)
    # Saved as 5 ms, now 0.010 s: twice as slow, not 99.8 % faster.
    slower = _units(pytester, monkeypatch, "s", 0.010, "--hpml-compare")
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(["*test_latency latency: 5.000 -> 10.00 ms (+100.0%*"
                                 "the baseline's values converted from ms to s*"])
    same = _units(pytester, monkeypatch, "s", 0.005, "--hpml-compare", "--hpml-report")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*latency*5.000 ms*5.000 ms*+0.0%*unchanged*"])
    # A figure in another quantity is refused, saying what to do.
    other = _units(pytester, monkeypatch, "B/s", 5, "--hpml-compare", better="higher")
    other.assert_outcomes(failed=1)
    other.stdout.fnmatch_lines(["*test_latency latency: the unit changed: ms in the baseline, "
                                "B/s now, which measure different things; record the new figure "
                                "under a new name, or accept it*"])


def test_rates_in_scaled_units_compare_as_the_same_quantity(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_latency_units=UNITS)
    _units(pytester, monkeypatch, "B/s", 2e9, "--hpml-save-baseline",
           better="higher").assert_outcomes(passed=1)
    same = _units(pytester, monkeypatch, "GB/s", 2.0, "--hpml-compare", "--hpml-report",
                  better="higher")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*latency*+0.0%*unchanged*"])


def test_a_flipped_direction_or_a_figure_no_longer_measured_fails_with_its_reason(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_latency_units=UNITS)
    _units(pytester, monkeypatch, "s", 1.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    flipped = _units(pytester, monkeypatch, "s", 2.0, "--hpml-compare", better="higher")
    flipped.assert_outcomes(failed=1)
    flipped.stdout.fnmatch_lines(["*latency: better was 'lower' in the baseline and is 'higher' "
                                  "now: a change cannot be judged across a flipped direction*"])
    assert "improved" not in flipped.stdout.str()
    setting = _units(pytester, monkeypatch, "s", 1.0, "--hpml-compare", kind="setting")
    setting.assert_outcomes(failed=1)
    setting.stdout.fnmatch_lines(["*test_latency latency: measured in the baseline, recorded as a "
                                  "setting now; if intended, a save accepts it*"])


# -- 6: the command line says what OLD has and NEW lacks, and compares like with like ----------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_hpml", *args], text=True,
                          capture_output=True, timeout=300)


def _report(path: Path, rows: dict[str, float], profile: str = "quick",
            cpu: str = "Test CPU") -> Path:
    records = [{"id": f"t.py::{name}", "experiment": f"t.py::{name}",
                "metrics": [{"name": "time", "value": value, "unit": "s", "better": "lower"}]}
               for name, value in rows.items()]
    path.write_text(json.dumps({"fingerprint": {"cpu": cpu, "cpu_cores": 2}, "profile": profile,
                                "records": records}))
    return path


def test_the_command_line_fails_on_a_row_new_lacks_and_refuses_other_machines(
        tmp_path: Path) -> None:
    old = _report(tmp_path / "old.json", {"test_a": 1.0, "test_b": 1.0})
    new = _report(tmp_path / "new.json", {"test_a": 1.0})
    done = _cli("compare", str(old), str(new))
    assert done.returncode == 1, done.stdout
    assert "1 row(s) of OLD that NEW does not have" in done.stdout
    assert "t.py::test_b time: in the baseline (1.000 s) but not recorded by this run" in \
        done.stdout
    narrowed = _cli("compare", str(old), str(new), "--allow-missing")
    assert narrowed.returncode == 0 and "said, not failed (--allow-missing)" in narrowed.stdout
    elsewhere = _report(tmp_path / "full.json", {"test_a": 1.0, "test_b": 1.0}, profile="full")
    refused = _cli("compare", str(old), str(elsewhere))
    assert refused.returncode == 2
    assert "profile: quick in OLD, full in NEW" in refused.stderr
    assert "--allow-other-machine" in refused.stderr
    anyway = _cli("compare", str(old), str(elsewhere), "--allow-other-machine")
    assert anyway.returncode == 0 and "compared anyway (--allow-other-machine)" in anyway.stdout


# -- the same numbers give the same verdict on every path ------------------------------------------

#: The test at its base commit and in the working tree: the n-th process of each side reads the
#: n-th of VALUES (a counter beside the test file; a worktree at REF has its own).
SIDE = """
    from pathlib import Path

    VALUES = {values!r}

    def _value():
        counter = Path(__file__).with_name("counter.txt")
        taken = int(counter.read_text() or 0) if counter.exists() else 0
        counter.write_text(str(taken + 1))
        return VALUES[taken % len(VALUES)]

    VALUE = _value()

    def test_step(hpml):
        hpml.record("time", VALUE, unit="s", samples=[VALUE] * 10)
"""
BASE = [1.0, 1.02, 0.98]


def _side(folder: Path, values: list[float]) -> None:
    (folder / "test_step.py").write_text(
        "\n".join(line[4:] for line in SIDE.format(values=values).splitlines()))
    (folder / "counter.txt").write_text("")


def _time_verdict(report: Path) -> dict:
    return json.loads(report.read_text())["records"][0]["verdicts"]["time"]


@pytest.mark.parametrize("now, outcome", [([1.5, 1.5, 1.5], "regressed"),
                                          ([1.0, 1.0, 1.0], "unchanged"),
                                          ([0.6, 0.6, 0.6], "improved")])
def test_the_stored_baseline_the_ref_and_the_command_line_agree(
        pytester: pytest.Pytester, now: list[float], outcome: str) -> None:
    repo = pytester.path
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:benchmark\n")
    (repo / ".gitignore").write_text("counter.txt\n*.json\nbaselines/\nsaves/\n")
    _side(repo, BASE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    same = ("--hpml-drift=0",)  # one occasion on every path: --hpml-compare-ref has no drift

    # The stored baseline: a save of three processes at the base, then a comparison.
    pytester.runpytest(*FAST[:-1], *same, "--hpml-save-baseline",
                       "--hpml-baseline-processes=3", "--hpml-save-budget=all",
                       "--hpml-report=old.json"
                       ).assert_outcomes(passed=1)
    _side(repo, now)
    pytester.runpytest(*FAST[:-1], *same, "--hpml-compare", "--hpml-report=stored.json")
    # The git ref measured now: every test on both sides, three processes each (a regression
    # stands in 2N-1 before it fails: N=2 gives it three too).
    _side(repo, now)
    n = 2 if outcome == "regressed" else 3
    pytester.runpytest(*FAST[:-1], "--hpml-compare-ref=HEAD", "--hpml-compare-ref-all",
                       f"--hpml-compare-ref-processes={n}", "--hpml-report=ref.json")
    # The command line: the base's save report against one of the working tree's three
    # processes (a save into a folder of its own writes them into its report).
    _side(repo, now)
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-baselines=saves",
                       "--hpml-baseline-processes=3", "--hpml-save-budget=all",
                       "--hpml-report=new.json"
                       ).assert_outcomes(passed=1)
    cli = subprocess.run([sys.executable, "-m", "pytest_hpml", "compare", "old.json",
                          "new.json", "--drift=0", "--format=csv"], cwd=repo, text=True,
                         capture_output=True, timeout=300)
    row = next(csv.DictReader(cli.stdout.splitlines()))

    stored, ref = _time_verdict(repo / "stored.json"), _time_verdict(repo / "ref.json")
    assert stored["outcome"] == ref["outcome"] == row["verdict"] == outcome
    for key in ("baseline", "current", "change"):
        assert stored[key] == pytest.approx(ref[key]), key
    assert float(row["baseline"]) == pytest.approx(stored["baseline"])
    assert float(row["change"]) == pytest.approx(stored["change"])
    assert float(row["value"]) == pytest.approx(stored["current"])
    assert cli.returncode == (1 if outcome == "regressed" else 0)
    if outcome == "regressed":
        # A suspected regression was confirmed: three processes on each side on every path,
        # so the same evidence and the same detectable change.
        assert stored["processes"] == ref["processes"] == int(row["processes"]) == 3
        assert stored["mdc"] == pytest.approx(ref["mdc"])
        assert float(row["detectable"]) == pytest.approx(stored["mdc"])


@pytest.mark.parametrize("measures", ["every row", "the suspected rows"])
def test_a_confirmation_judges_again_the_rows_it_could_change_and_leaves_none_suspect(
        measures: str) -> None:
    """The suspected rows are measured again, round after round while they stay suspect, and
    end with a final verdict; a row more processes could change (`ambiguous`: a slowed row
    whose first process landed in a fast speed) is judged again where the round measured it
    (a test that asks hpml.wants makes only the suspected rows); a row the test's own process
    settled `unchanged` keeps that verdict (a preempted call in the fresh process would
    otherwise be the next round's suspect)."""
    from pytest_hpml.compare import settling
    from pytest_hpml.results import Metric, Record, Replicates, Verdict

    rows = [Record(f"r{i}", "e", metrics=[Metric("time", 1.0, "s")]) for i in range(4)]
    # What each judgement would say of each row, round by round (left: rounds still possible).
    script = {3: ("suspect", "unchanged", "suspect", "ambiguous"),
              2: ("suspect", "suspect", "unchanged", "regressed"),
              1: ("regressed", "suspect", "unchanged", "regressed"),
              0: ("regressed", "regressed", "ambiguous", "regressed")}
    judged: list[tuple[int, list[str]]] = []
    measured: list[list[str]] = []

    def judge_all(left: int, asked: list[Record]) -> None:
        judged.append((left, [r.id for r in asked]))
        for row, outcome in zip(rows, script[left], strict=True):
            if any(row is r for r in asked):
                row.verdicts = {"time": Verdict(outcome, processes=len(
                    row.values_of("time").values))}

    def measure_more(pending: list[Record]) -> None:
        measured.append([r.id for r in pending])
        for row in rows if measures == "every row" else pending:
            row.replicates["time"] = Replicates((*row.values_of("time").values, 1.0))

    done = settling.settle(rows, judge_all, settling.suspected, measure_more, rounds=3)
    assert measured == [["r0", "r2"], ["r0"]] and done == 2
    if measures == "every row":
        assert judged == [(3, ["r0", "r1", "r2", "r3"]), (2, ["r0", "r2", "r3"]),
                          (1, ["r0", "r3"])]
        assert [r.verdicts["time"].outcome for r in rows] == [
            "regressed", "unchanged", "unchanged", "regressed"]
    else:
        assert judged == [(3, ["r0", "r1", "r2", "r3"]), (2, ["r0", "r2"]), (1, ["r0"])]
        assert [r.verdicts["time"].outcome for r in rows] == [
            "regressed", "unchanged", "unchanged", "ambiguous"]

    # The budget spent with rows still suspect: a final verdict on what was measured.
    for row in rows:
        row.verdicts, row.replicates = {}, {}
    judged.clear()
    measured.clear()
    spent = settling.Budget(seconds=1e-9, spent=1.0)
    done = settling.settle(rows, judge_all, settling.suspected, measure_more, rounds=3,
                           budget=spent)
    assert done == 0 and measured == []
    assert judged == [(3, ["r0", "r1", "r2", "r3"]), (0, ["r0", "r2"])]
    assert [r.verdicts["time"].outcome for r in rows] == [
        "regressed", "unchanged", "ambiguous", "ambiguous"]
