"""A metric whose history has not learned its drift (a new test, a history restarted at an
accepted level) is assumed to drift as the baseline's other metrics learned it (their median),
where that is more than --hpml-drift (compare/drift_prior.py)."""

from __future__ import annotations

import datetime
from pathlib import Path

from hpml_testing import HERE, Measured

from pytest_hpml.compare import baselines, drift_prior
from pytest_hpml.compare.advice import Advice
from pytest_hpml.compare.results_files import compare_results
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Record, Verdict
from pytest_hpml.stored_baseline import StoredBaseline

DAY = datetime.datetime(2026, 12, 6, tzinfo=datetime.timezone.utc)
#: Three saves a few hours apart; the machine ran 15 % slower at the second and 13 % faster at
#: the third, in every process of every test.
OCCASIONS = ((0, 1.0), (180, 1.15), (360, 0.87))


def _record(rid: str, runs: list[float]) -> Record:
    metric = Measured("time", runs[0], "s", "lower", runs=runs)
    return Record(rid, "e", metrics=[metric.metric()], replicates={"time": metric.replicates()})


def _baseline(path: Path, tests: int, *, new: bool = True,
              occasions: tuple[tuple[int, float], ...] = OCCASIONS) -> baselines.Baseline:
    """`tests` tests saved on `occasions` (minutes into the day, the machine's speed), and
    with `new`, a test saved once, at the last of them."""
    for k, (minutes, speed) in enumerate(occasions):
        records = [_record(f"t{i}", [speed * (1 + i / 10) * f for f in (1.0, 1.01, 0.99)])
                   for i in range(tests)]
        if new and k == len(occasions) - 1:
            records.append(_record("new", [1.0, 1.01, 0.99]))
        when = (DAY + datetime.timedelta(minutes=minutes)).isoformat()
        baselines.save(path, HERE, "quick", records, baselines.MergePolicy(when=when))
    found = baselines.load(path)
    assert found is not None
    return found


def _verdict_of_new(path: Path, runs: list[float], **rules: float) -> Verdict:
    judged = compare_results(path, [_record("new", runs)], **rules)
    return next(r for r in judged if r.id == "new").verdicts["time"]


def test_a_new_metric_assumes_the_drift_the_baselines_metrics_learned(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    baseline = _baseline(path, 4)
    rules = StoredBaseline(baseline, Advice()).rules(Rules())
    assert rules.drift_learned_by == 4 and 0.10 < rules.drift < 0.20
    # 25 % slower in every process: past an assumed 5 % drift, not past the machine's 15 %.
    verdict = _verdict_of_new(path, [1.25, 1.26, 1.24])
    assert verdict.outcome == "ambiguous", verdict.basis
    assert "assumed (the median of what 4 of the baseline's metrics learned;" in verdict.basis
    # The metrics that learned their drift are judged by their own.
    judged = compare_results(path, [_record("t0", [1.0, 1.01, 0.99])])
    assert "learned from 3 saves" in judged[0].verdicts["time"].basis


def test_without_metrics_that_learned_a_drift_the_option_holds(tmp_path: Path) -> None:
    # Two occasions teach no metric its drift: --hpml-drift's 5 % is assumed, and 25 % is
    # caught.
    path = tmp_path / "two.json"
    _baseline(path, 4, occasions=OCCASIONS[:2])
    verdict = _verdict_of_new(path, [1.25, 1.26, 1.24])
    assert verdict.outcome == "regressed", verdict.basis
    assert "assumed (--hpml-drift;" in verdict.basis


def test_a_machine_that_drifts_less_than_the_option_keeps_the_option(tmp_path: Path) -> None:
    steady = _baseline(tmp_path / "steady.json", 4,
                       occasions=((0, 1.0), (180, 1.005), (360, 0.995)))
    assert StoredBaseline(steady, Advice()).rules(Rules()) == Rules()
    # Nor does a team that turned the drift off get one.
    drifting = _baseline(tmp_path / "b.json", 4)
    off = Rules(drift=0.0)
    assert drift_prior.of_baseline(off, drifting) == off
    # Too few metrics learned it to speak for the machine.
    few = _baseline(tmp_path / "few.json", drift_prior.MIN_METRICS - 1)
    assert drift_prior.of_baseline(Rules(), few) == Rules()


def test_the_dashboard_weighs_a_new_metric_with_the_drift_its_file_learned(
        tmp_path: Path) -> None:
    from pytest_hpml.report.dashboard import series, site

    path = tmp_path / "b.json"
    _baseline(path, 4)
    entries = {e.series.record_id: e for e in site._entries(series.read([path], []),
                                                             Rules())}
    alone = tmp_path / "alone.json"
    _baseline(alone, 0)  # the new test's save, with no other metric to learn from
    lone = site._entries(series.read([alone], []), Rules())
    assert [e.series.record_id for e in lone] == ["new"]
    # What a comparison with the new test's level can detect, with the machine's drift and
    # with --hpml-drift's: wider with the drift the file learned.
    assert entries["new"].figures.detectable > lone[0].figures.detectable + 0.05
