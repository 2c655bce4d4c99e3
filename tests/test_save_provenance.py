"""Which save each stored value came from: the baseline file's table of saves (date and commit),
the save ids of each metric's history and accepted levels, kept small, read from older files,
and checked as the rest of the file is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hpml_testing import FAST, HERE, baseline_file

from pytest_hpml.compare import baselines, engine, provenance
from pytest_hpml.compare.history import MergePolicy
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.machine import revision
from pytest_hpml.results import Metric, Record, Replicates

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def _save(path: Path, value: float, when: str, commit: str | None = SHA, keep: int = 30,
          rid: str = "a", **policy: object) -> dict:
    metric = Metric("time", value, "s", "lower", samples=[value] * 20)
    record = Record(rid, "e", metrics=[metric], replicates={
        "time": Replicates((value, value * 1.001, value * 0.999))})
    found = baselines.load(path)  # the new levels, judged as a save judges them
    engine.judge(record, found.metrics_for(rid) if found else {}, Rules())
    baselines.save(path, HERE, "quick", [record],
                   MergePolicy(keep=keep, when=when, commit=commit, **policy))
    return json.loads(path.read_text())


def _metric(document: dict, rid: str = "a") -> dict:
    return next(r for r in document["records"] if r["id"] == rid)["metrics"][0]


# -- the commit ---------------------------------------------------------------------------------

def test_the_commit_is_the_ci_variable_first_then_git_then_none(tmp_path: Path) -> None:
    assert revision.from_environment({"GITHUB_SHA": SHA.upper()}) == SHA
    # A CI variable that is not a full hash (a branch, an abbreviation) is not a commit.
    assert revision.from_environment({"GITHUB_SHA": "main", "CI_COMMIT_SHA": OTHER}) == OTHER
    assert revision.from_environment({"GITHUB_SHA": SHA[:12]}) is None
    assert revision.current_commit(tmp_path, {}) is None  # not a git repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert revision.current_commit(tmp_path, {}) == head
    assert revision.current_commit(tmp_path / ".", {"CI_COMMIT_SHA": SHA}) == SHA

    def no_git(*args: object, **kwargs: object) -> subprocess.CompletedProcess:
        raise OSError("git vanished")
    assert revision.current_commit(tmp_path, {}, run=no_git) is None


# -- the store ----------------------------------------------------------------------------------

def test_each_save_names_its_date_and_commit_and_each_history_entry_its_save(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _save(path, 1.0, "2026-05-01T10:00:00+00:00", SHA)
    document = _save(path, 1.0, "2026-05-02T10:00:00+00:00", None)
    m = _metric(document)
    assert m["history_saves"] == [3, 3]
    first, second = m["history_save_ids"]
    assert document["saves"] == {first: {"on": "2026-05-01T10:00:00+00:00", "commit": SHA},
                                 second: {"on": "2026-05-02T10:00:00+00:00", "commit": None}}
    assert first < second and len(first) <= 6  # in time order, and short
    loaded = baselines.load(path)
    assert loaded.saves == document["saves"]


def test_saves_of_the_same_second_get_different_ids(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for _ in range(3):
        document = _save(path, 1.0, "2026-05-01T10:00:00+00:00")
    assert len(set(_metric(document)["history_save_ids"])) == 3 == len(document["saves"])


def test_an_accepted_level_names_its_save_and_the_history_restarts_with_its_id(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _save(path, 1.0, "2026-05-01T10:00:00+00:00", SHA)
    document = _save(path, 0.5, "2026-05-02T10:00:00+00:00", OTHER)  # twice as fast
    m = _metric(document)
    [level] = m["accepted"]
    assert level["save"] == m["history_save_ids"][0]
    assert document["saves"][level["save"]]["commit"] == OTHER
    # The first save's values left the history with the old level: its entry is kept only
    # while something refers to it, and nothing does.
    assert list(document["saves"]) == [level["save"]]


def test_ids_are_trimmed_with_the_history_and_unreferenced_saves_dropped(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for day in range(1, 6):
        document = _save(path, 1.0, f"2026-05-0{day}T10:00:00+00:00", keep=7)
    m = _metric(document)
    # 5 saves of 3 values, 7 kept: the oldest kept save lost two of its values.
    assert m["history_saves"] == [1, 3, 3] and len(m["history_save_ids"]) == 3
    assert [document["saves"][i]["on"][:10] for i in m["history_save_ids"]] == [
        "2026-05-03", "2026-05-04", "2026-05-05"]
    assert set(document["saves"]) == set(m["history_save_ids"])
    # Rows pruned take their saves with them; rows of other tests keep theirs.
    _save(path, 2.0, "2026-05-06T10:00:00+00:00", keep=7, rid="b", prune=frozenset({"a"}))
    document = json.loads(path.read_text())
    assert [r["id"] for r in document["records"]] == ["b"]
    assert list(document["saves"]) == _metric(document, "b")["history_save_ids"]


def test_a_file_written_before_saves_were_recorded_is_read_and_extended(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _save(path, 1.0, "2026-05-01T10:00:00+00:00")
    old = json.loads(path.read_text())
    del old["saves"]
    for m in (m for r in old["records"] for m in r["metrics"]):
        del m["history_save_ids"]
    path.write_text(json.dumps(old))
    assert baselines.load(path).saves == {}
    document = _save(path, 1.0, "2026-05-02T10:00:00+00:00")
    m = _metric(document)
    # The older save's provenance is unknown, and said so (null), aligned with its count.
    assert m["history_saves"] == [3, 3] and m["history_save_ids"][0] is None
    assert list(document["saves"]) == [m["history_save_ids"][1]]


@pytest.mark.parametrize("damage, message", [
    (lambda d, m: d.update(saves=[1]), "saves is list"),
    (lambda d, m: d["saves"].update(x={"on": "yesterday", "commit": None}), "not an ISO"),
    (lambda d, m: next(iter(d["saves"].values())).update(commit="main"), "full commit hash"),
    (lambda d, m: m.update(history_save_ids=[]), "history_save_ids holds"),
    (lambda d, m: m.update(history_save_ids=["zzz"]), "names save 'zzz'"),
    (lambda d, m: m.update(accepted=[{"on": "2026-05-01", "before": 1, "after": 2,
                                      "save": "gone"}]), "accepted level names save 'gone'"),
])
def test_damaged_provenance_is_an_error_naming_the_file(tmp_path: Path, damage, message: str
                                                        ) -> None:
    path = tmp_path / "b.json"
    _save(path, 1.0, "2026-05-01T10:00:00+00:00")
    document = json.loads(path.read_text())
    damage(document, _metric(document))
    path.write_text(json.dumps(document))
    with pytest.raises(baselines.BaselineError, match=rf"{path}.*{message}"):
        baselines.load(path)
    before = path.read_text()
    with pytest.raises(baselines.BaselineError):  # and a save never overwrites it
        _save(path, 1.0, "2026-05-02T10:00:00+00:00")
    assert path.read_text() == before


def test_a_save_id_is_the_time_in_base_36_seconds() -> None:
    assert provenance.new_save_id("1970-01-01T00:00:35Z", []) == "z"
    assert provenance.new_save_id("1970-01-01T00:00:35Z", ["z"]) == "10"
    # numpy.base_repr(1777629600, 36): the same number written by another hand
    assert provenance.new_save_id("2026-05-01T10:00:00+00:00", []) == "tecrs0"


# -- as a team saves ------------------------------------------------------------------------------

def test_a_save_in_a_git_repository_records_its_head(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in revision.CI_COMMIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_t="def test_t(hpml):\n    hpml.record('n', 1.0, unit='s')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True, cwd=pytester.path)
    subprocess.run([*git, "add", "-A"], check=True, cwd=pytester.path)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True, cwd=pytester.path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=pytester.path, check=True).stdout.strip()
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("GITHUB_SHA", OTHER)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    document = json.loads(baseline_file(pytester.path / "baselines").read_text())
    ids = document["records"][0]["metrics"][0]["history_save_ids"]
    assert [document["saves"][i]["commit"] for i in ids] == [head, OTHER]


def test_the_saves_kept_are_those_some_row_refers_to_found_in_any_row() -> None:
    # The walk stops once every save of the table is found; the saves kept are those of a
    # walk of every row, wherever the rows referring to them are.
    import random

    rng = random.Random(17)
    for _ in range(300):
        table = {f"s{i}": {"on": f"2026-11-{10 + i:02d}T00:00:00+00:00"} for i in range(5)}
        rows = [{"metrics": [{"history_save_ids": rng.sample([*table, None], rng.randint(0, 3)),
                              "accepted": [{"save": rng.choice([*table, "gone"])}]
                              if rng.random() < 0.1 else None}]}
                for _ in range(rng.randint(0, 30))]
        every = set().union(*(provenance.referenced([row]) for row in rows))
        assert list(provenance.kept(table, rows)) == [k for k in table if k in every]
