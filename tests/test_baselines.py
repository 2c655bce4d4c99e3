"""The baseline store: file names, merging, atomic writes, and files it must never overwrite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hpml_testing import FAST, HERE, only_baseline_file

from pytest_hpml.compare import baselines, engine
from pytest_hpml.compare.baselines import BaselineError, load, save
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.machine.fingerprint import fingerprint, machine_key
from pytest_hpml.results import Metric, Record

ELSEWHERE = {**HERE, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}


def _files(folder: Path) -> list[str]:
    """The folder's files, less the lock file saves hold (kept on purpose: deleting a lock
    file another process waits on would let two saves in at once) and the .gitignore that
    keeps it out of a team's commits."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(".lock") and n != ".gitignore")


def _record(rid: str, value: float, samples: list[float] | None = None) -> Record:
    return Record(id=rid, experiment="exp", params={"k": 1},
                  metrics=[Metric("time", value, "s", "lower", samples=samples)])


def test_save_then_load(tmp_path: Path) -> None:
    path = baselines.baseline_path(tmp_path, machine_key(HERE), "quick")
    assert path.name == "test-9000-x4cores-quick.json"
    samples = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
    save(path, HERE, "quick", [_record("a", 1.0, samples)])
    base = load(path)
    assert base is not None and base.profile == "quick" and base.fingerprint == HERE
    # What verdicts use of the run's samples, not the samples: how many, and the notch of
    # their median (1.57 IQR / sqrt(n) over the median).
    stored = base.metrics_for("a")["time"]
    assert stored.samples is None and stored.n == 6
    assert stored.within == pytest.approx(1.57 * 0.075 / 6 ** 0.5, rel=1e-6)
    assert base.metrics_for("nope") == {}
    assert json.loads(path.read_text())["schema"] == baselines.SCHEMA


def test_load_of_no_file_is_none(tmp_path: Path) -> None:
    assert load(tmp_path / "none.json") is None


def test_save_merges_with_the_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, HERE, "quick", [_record("a", 1.0), _record("b", 2.0)])
    save(path, HERE, "quick", [_record("b", 3.0), _record("c", 4.0)])
    base = load(path)
    assert {k: base.metrics_for(k)["time"].value for k in base.records} == {
        "a": 1.0, "b": 3.0, "c": 4.0}


def test_a_save_stores_the_measurement_not_what_a_comparison_made_of_it(tmp_path: Path) -> None:
    record = _record("a", 1.0)
    # This run's fresh processes join the history; the verdict a comparison made is not stored.
    engine.add_processes([record], [[_record("a", 1.1)], [_record("a", 0.9)]])
    engine.judge(record, {}, Rules())
    assert record.verdicts["time"].outcome == "new"
    save(tmp_path / "b.json", HERE, "quick", [record])
    stored = load(tmp_path / "b.json").records["a"]
    assert "verdicts" not in stored and "replicates" not in stored
    assert stored["metrics"][0]["history"] == [1.0, 1.1, 0.9]


CORRUPT = b'{"schema": "pytest-hpml/baseline/1", "records": [\n'
FOREIGN = b'{"benchmarks": [{"name": "x", "value": 1}]}\n'
DAMAGED = b'{"schema": "pytest-hpml/baseline/1", "fingerprint": {}, "profile": "quick"}'


@pytest.mark.parametrize("content, message", [
    (CORRUPT, "is not valid JSON"),
    (FOREIGN, "is not a pytest-hpml baseline"),
    (DAMAGED, "is damaged"),
])
def test_an_unusable_file_is_an_error_and_left_untouched(tmp_path: Path, content: bytes,
                                                         message: str) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)
    with pytest.raises(BaselineError, match=message):
        save(path, HERE, "quick", [_record("a", 1.0)])
    assert path.read_bytes() == content
    assert _files(tmp_path) == ["b.json"]


def test_save_refuses_another_machines_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, ELSEWHERE, "quick", [_record("a", 1.0)])
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="belongs to machine 'nvidia-h100-80gb-hbm3-x8'"):
        save(path, HERE, "quick", [_record("a", 2.0)])
    assert path.read_bytes() == before


@pytest.mark.parametrize("target", ["fsync", "replace"])
def test_an_interrupted_save_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 target: str) -> None:
    from pytest_hpml.report import files

    path = tmp_path / "b.json"
    save(path, HERE, "quick", [_record("a", 1.0)])
    before = path.read_bytes()

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    # The temporary is written: interrupted before it is on disk, or at the rename itself.
    monkeypatch.setattr(files.os, target, interrupt)
    with pytest.raises(KeyboardInterrupt):
        save(path, HERE, "quick", [_record("a", 2.0), _record("b", 3.0)])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["b.json"]  # no temporary file left behind


# -- through pytest ---------------------------------------------------------------------------

FIXED = """
    import pytest

    @pytest.mark.parametrize("k", [1, 2])
    def test_fixed(hpml, k):
        hpml.record("size", 10.0 * k, unit="B", better="lower")
"""


def test_save_baseline_writes_machine_and_profile_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=2)
    expected = pytester.path / "baselines" / f"{machine_key(fingerprint())}-quick.json"
    assert only_baseline_file(pytester.path / "baselines") == expected
    result.stdout.fnmatch_lines([f"hpml: wrote {expected}"])
    base = load(expected)
    assert sorted(base.records) == ["test_save_baseline_writes_machine_and_profile_file.py::"
                                    f"test_fixed[{k}]" for k in (1, 2)]


def test_save_baseline_into_a_chosen_folder_merges(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "store"
    pytester.runpytest(*FAST, f"--hpml-baselines={folder}", "--hpml-save-baseline",
                       "-k", "1").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest(*FAST, f"--hpml-baselines={folder}", "--hpml-save-baseline",
                       "-k", "2").assert_outcomes(passed=1, deselected=1)
    assert not (pytester.path / "baselines").exists()
    assert len(load(only_baseline_file(folder)).records) == 2


@pytest.mark.parametrize("content, message", [
    (CORRUPT, "is not valid JSON"),
    (FOREIGN, "is not a pytest-hpml baseline"),
])
def test_unusable_baseline_stops_compare_and_save(pytester: pytest.Pytester, content: bytes,
                                                  message: str) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "baselines"
    folder.mkdir()
    path = folder / f"{machine_key(fingerprint())}-quick.json"
    path.write_bytes(content)

    result = pytester.runpytest(*FAST, "--hpml-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # before any test runs
    assert f"baseline file {path} {message}" in result.stderr.str()

    # A save checks the file before the tests too: hours of GPU work are not run into it.
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"baseline file {path} {message}" in result.stderr.str()
    assert path.read_bytes() == content
    assert _files(folder) == [path.name]


def test_another_machines_baseline_is_not_compared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "baselines"
    path = folder / f"{machine_key(fingerprint())}-quick.json"
    save(path, ELSEWHERE, "quick", [_record("x", 1.0)])  # copied here from a GPU box
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    result.assert_outcomes(passed=2)
    line = (f"hpml: --hpml-compare: {path} was recorded on 'nvidia-h100-80gb-hbm3-x8', not on "
            "this machine*not compared.")
    result.stdout.fnmatch_lines([line])
    assert result.stdout.str().count("was recorded on") == 1  # said once, not per test
    result.stdout.fnmatch_lines(["*size*new*"])


def test_compare_without_a_baseline_says_so_and_everything_is_new(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("no baseline for this machine") == 1
    result.stdout.fnmatch_lines(["*every metric is 'new'. Record one with --hpml-save-baseline."])
    result.stdout.fnmatch_lines(["Comparison with baseline", "*", "*", "*k=1*size*new*",
                                 "*k=2*size*new*"])
    assert not (pytester.path / "baselines").exists()  # comparing never writes


def test_a_software_upgrade_is_said_not_a_new_machine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    path = pytester.path / "baselines" / f"{machine_key(fingerprint())}-quick.json"
    before_upgrade = {**fingerprint(), "torch": "1.0.0"}
    save(path, before_upgrade, "quick", [_record("x", 1.0)])
    result = pytester.runpytest(*FAST, "--hpml-compare")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"hpml: --hpml-compare: software changed since the baseline: "
                                 f"torch 1.0.0 -> {fingerprint()['torch']}"])


def test_failed_tests_are_not_saved_into_the_baseline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_ok(hpml):
            hpml.record("x", 1.0, better="lower")

        def test_wrong(hpml):
            hpml.record("x", 2.0, better="lower")
            assert False, "the kernel computed the wrong result"
        """
    )
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["hpml: --hpml-save-baseline: 1 row(s) of tests that did not "
                                 "pass (failed, xfail, or an error in teardown) not saved; their "
                                 "previous baseline entries are kept."])
    stored = load(only_baseline_file(pytester.path / "baselines"))
    assert [k.rsplit("::", 1)[1] for k in stored.records] == ["test_ok"]


def test_a_stored_list_of_numbers_is_checked_as_each_number_is() -> None:
    # The loader checks a list at C speed where its sum can tell; one by one where it cannot.
    import random

    from pytest_hpml.compare import baseline_rules

    odd = [True, False, 1, 0, 1.0, 0.0, -3, 10**400, float("inf"), -float("inf"),
           float("nan"), "1.0", None, [1.0], 1.7e308, -1.7e308, 2.5e-6]
    rng = random.Random(5)
    refused = 0
    for _ in range(3000):
        values = [rng.choice(odd) if rng.random() < 0.2 else rng.uniform(-1e3, 1e3)
                  for _ in range(rng.randint(0, 5))]
        each = all(baseline_rules._finite_number(v) for v in values)
        assert baseline_rules._finite_numbers(values) == each, values
        refused += not each
    assert 500 < refused < 2500


def test_a_row_is_encoded_as_the_json_encoder_encodes_it() -> None:
    # The save's one C encoder writes the text JSONEncoder.encode writes, and refuses what it
    # refuses (no NaN, no infinity in a file the loader would refuse).
    import random

    rng = random.Random(7)
    words = ["time", "é", "\u2603", 'a"b', "tab\there", "", "über/ms"]
    for _ in range(300):
        row = {rng.choice(words) + str(i): rng.choice([
            rng.uniform(-1e9, 1e9), rng.randint(-10**20, 10**20), None, True, False,
            rng.choice(words), [rng.random() for _ in range(rng.randint(0, 4))],
            {"on": rng.choice(words), "before": 1e-7}]) for i in range(rng.randint(0, 6))}
        assert baselines._encode_row(row) == baselines._ROW.encode(row), row
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            baselines._encode_row({"history": [1.0, bad]})


def test_a_merged_metric_is_stored_as_the_stored_metric_writes_itself() -> None:
    # The merge makes the file's dict of a metric without building a Stored: the same keys in
    # the same order (a row's line in the file is unchanged), none of them None, `exact` only
    # where true, over every optional field and a second save onto the first.
    import random

    from pytest_hpml.compare import history
    from pytest_hpml.compare.stored import Stored
    from pytest_hpml.results import Replicates, Verdict

    rng = random.Random(11)
    seen: set[str] = set()
    existing: dict = {}
    for save_number in range(3):
        records = []
        for i in range(40):
            optional = {k: v for k, v in {
                "samples": [rng.uniform(1, 2) for _ in range(rng.choice([0, 3, 40]))] or None,
                "tolerance": rng.choice([None, 0.1]), "iqr": rng.choice([None, 0.01]),
                "yardstick": rng.choice([None, 2e-3]), "exact": rng.random() < 0.1,
                "compute_yardstick": rng.choice([None, 1.5e-3]),
                "derived_from": rng.choice([None, "time"])}.items() if rng.random() < 0.6}
            metric = Metric("t", rng.uniform(1, 2), rng.choice(["s", "B"]),
                            rng.choice(["lower", "higher"]), **optional)
            record = Record(f"r{i}", "e", metrics=[metric])
            processes = rng.choice([1, 3])
            record.replicates["t"] = Replicates(*(
                tuple(rng.uniform(low, low * 2) for _ in range(processes))
                if low == 1 or rng.random() < 0.5 else None for low in (1, 0.5, 0.25)))
            if rng.random() < 0.3:  # a new level: the change accepted
                record.verdicts["t"] = Verdict("regressed", unit=metric.unit, baseline=1.0,
                                               change=0.5, mdc=0.1)
            records.append(record)
        existing, *_ = history.extend(existing, records, history.MergePolicy(
            keep=5, when=f"2026-11-2{save_number}T10:00:00+00:00", save_id=f"s{save_number}",
            seeded_from="pytest-benchmark 0001" if save_number == 0 else None))
        for row in existing.values():
            for m in row["metrics"]:
                assert list(m.items()) == list(Stored.from_dict(m).to_dict().items()), m
                seen.update(m)
    assert seen == {"name", "value", "unit", "better", "exact", "tolerance", "derived_from",
                    "iqr", "yardstick", "compute_yardstick", "n", "notch", "p10", "p90",
                    "history", "relative_history", "paced_history", "history_saves",
                    "history_save_ids", "accepted", "seeded_from"}, seen


def test_a_saves_check_refuses_what_a_loads_check_refuses() -> None:
    # A save checks what it writes without building a Stored (build=False): the same rules,
    # the same words, on valid and damaged metrics alike.
    import random

    from pytest_hpml.compare import baseline_rules

    rng = random.Random(13)
    choices = {"name": ["time", "", 3, None], "value": [1e-3, -0.5, 0.0, "1", float("nan")],
               "unit": ["s", "B", "", 7], "better": ["lower", "higher", None, "up"],
               "samples": [None, [1.0, 2.0], [1.0, -1.0], [1.0, float("inf")], "x"],
               "tolerance": [None, 0.1, -1, "5%", True], "history": [None, [1.0, 2.0]]}
    outcomes = set()
    for _ in range(2000):
        m = {k: rng.choice(v) for k, v in choices.items() if rng.random() < 0.8}
        said = []
        for build in (True, False):
            try:
                baseline_rules.check_metric("r", m, build=build)
                said.append(None)
            except baseline_rules.Invalid as exc:
                said.append(str(exc))
        assert said[0] == said[1], m
        outcomes.add(said[0] is None)
    assert outcomes == {True, False}
