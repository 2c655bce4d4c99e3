"""Verdicts that hold on a noisy runner: tolerance first, then the noise this machine has shown
(within a run, between processes), a suspected regression confirmed in fresh processes, derived
metrics that follow their timing, and a basis that says what each verdict rests on."""

from __future__ import annotations

import math
import random

import pytest
from hpml_testing import Measured, compare_metric, judged

from pytest_hpml.compare import engine, noise
from pytest_hpml.compare.verdicts import SUSPECT, Rules


def _m(value: float, better: str | None = "lower", samples: list[float] | None = None,
       tolerance: float | None = None, history: list[float] | None = None,
       runs: list[float] | None = None) -> Measured:
    """A time; `runs`: its values in this run's fresh processes (a save's or confirmations)."""
    return Measured("time", value, "s", better, samples=samples, tolerance=tolerance,
                    history=history, runs=runs)


def _samples(median: float, spread: float, n: int = 30, seed: int = 0) -> list[float]:
    """n samples around `median`, uniformly +-spread (relative): a process's own noise."""
    rng = random.Random(seed)
    return [median * (1 + spread * (2 * rng.random() - 1)) for _ in range(n)]


# -- tolerance, directions, new ------------------------------------------------------------------

@pytest.mark.parametrize("better, old, new, verdict", [
    ("lower", 1.0, 1.05, "unchanged"),
    ("lower", 1.0, 1.2, "regressed"),
    ("lower", 1.0, 0.8, "improved"),
    ("higher", 1.0, 0.8, "regressed"),
    ("higher", 1.0, 1.2, "improved"),
    (None, 1.0, 2.0, "ambiguous"),  # no good direction: shown, never a regression
    ("lower", 0.0, 0.0, "unchanged"),
    ("lower", 0.0, 1.0, "regressed"),
])
def test_fixed_values_are_judged_by_the_tolerance(better, old, new, verdict) -> None:
    # No drift assumed: the tolerance is all that is known (the drift has tests of its own).
    m = compare_metric(_m(new, better), _m(old, better), drift=0.0)
    assert m.outcome == verdict
    assert m.baseline == old and m.p_value is None
    if old:
        assert m.change == pytest.approx((new - old) / old)
        assert m.mdc == pytest.approx(0.10)  # nothing but the tolerance is known


def test_new_metric_and_per_metric_tolerance() -> None:
    assert compare_metric(_m(1.0), None).outcome == "new"
    assert compare_metric(_m(1.15), _m(1.0), tolerance=0.2, drift=0).outcome == "unchanged"
    assert compare_metric(_m(1.15), _m(1.0), tolerance=0.1, drift=0).outcome == "regressed"
    # A metric's own tolerance (record(tolerance=...) or the hpml marker) wins over the option.
    assert compare_metric(_m(1.15, tolerance=0.5), _m(1.0), tolerance=0.1,
                          drift=0).outcome == "unchanged"


@pytest.mark.parametrize("better", ["lower", "higher", None])
@pytest.mark.parametrize("new", [float("nan"), float("inf")])
def test_no_number_where_there_was_one_is_a_regression(better, new: float) -> None:
    m = compare_metric(_m(new, better=better), _m(1.0, better=better))
    assert m.outcome == "regressed" and "not a number" in m.basis
    record = judged(_m(new, better=better), base={"time": _m(1.0, better=better)})
    assert engine.failures(record, Rules()) == [
        f"r time: {new} where the baseline has 1.000 s (the run produced no number)"]


def test_a_stored_nan_is_never_an_improvement() -> None:
    assert compare_metric(_m(1.0), _m(float("nan"))).outcome == "ambiguous"


# -- one process on each side: suspect, then confirmed or not ------------------------------------

def test_a_slower_process_is_only_a_suspect_until_fresh_processes_confirm() -> None:
    base = _m(1.0, samples=_samples(1.0, 0.02, seed=1))
    # Identical code in a process that ran 14 % slow as a whole: samples of the two processes
    # do not overlap, so a rank test of the samples alone would call it significant.
    current = _m(1.14, samples=_samples(1.14, 0.02, seed=2))
    first = compare_metric(current, base, can_confirm=2)
    assert first.outcome == SUSPECT and "+14.0% in 1 process(es) so far" in first.basis
    # Two fresh processes land where the baseline was: the slow one was the process.
    confirmed = compare_metric(_m(1.14, samples=_samples(1.14, 0.02, seed=2),
                                  runs=[1.01, 0.99]), base)
    assert confirmed.outcome in ("unchanged", "ambiguous")
    assert confirmed.change == pytest.approx(0.01)  # the median of the three processes


def test_a_real_slowdown_is_confirmed_by_every_fresh_process() -> None:
    base = _m(1.0, samples=_samples(1.0, 0.02, seed=1))
    current = _m(1.31, samples=_samples(1.31, 0.02, seed=2), runs=[1.29, 1.30])
    m = compare_metric(current, base)
    assert m.outcome == "regressed"
    assert m.change == pytest.approx(0.30)
    assert "3 process(es): +31.0%, +29.0%, +30.0%" in m.basis
    assert "beyond the" in m.basis and "this machine can detect" in m.basis
    assert 0.10 <= m.mdc < 0.30


def test_processes_that_disagree_leave_the_verdict_ambiguous_with_what_it_would_take() -> None:
    base = _m(1.0)
    m = compare_metric(_m(1.25, runs=[1.02, 1.5]), base)
    assert m.outcome == "ambiguous"
    assert f"a change beyond {100 * m.mdc:.1f} % is needed to be caught" in m.basis
    assert m.mdc > 0.25


def test_without_confirmation_the_within_run_view_decides() -> None:
    base = _m(1.0, samples=_samples(1.0, 0.02, seed=1))
    current = _m(1.30, samples=_samples(1.30, 0.02, seed=2))
    m = compare_metric(current, base, can_confirm=0)
    assert m.outcome == "regressed" and "between-run spread unknown" in m.basis


def test_a_change_far_beyond_the_noise_regresses_even_on_a_noisy_run() -> None:
    # IQR 18 % of the median (the old rule called this run too noisy for any verdict), but
    # +153 % is far beyond anything that spread can explain.
    base = _m(1.0, samples=_samples(1.0, 0.18, n=100, seed=3))
    current = _m(2.53, samples=_samples(2.53, 0.18, n=100, seed=4), runs=[2.5, 2.6])
    m = compare_metric(current, base)
    assert m.outcome == "regressed"
    assert compare_metric(_m(2.53, samples=_samples(2.53, 0.18, n=100, seed=4)), base,
                          can_confirm=0).outcome == "regressed"


def test_samples_that_overlap_that_much_cannot_carry_a_verdict() -> None:
    old = [0.5, 1.5, 0.7, 1.3, 0.9, 1.1, 1.0, 0.6, 1.4, 1.0]
    new = [0.6, 1.9, 0.8, 1.6, 1.3, 1.4, 1.3, 0.7, 1.8, 1.2]
    m = compare_metric(_m(1.3, samples=new), _m(1.0, samples=old))
    assert m.outcome == "ambiguous" and m.change == pytest.approx(0.3)
    assert m.mdc > 0.3 and "within-run" in m.basis


# -- history: the between-run spread this machine has shown ---------------------------------------

def test_history_sets_the_detectable_change() -> None:
    quiet = _m(1.0, history=[1.0, 1.01, 0.99, 1.0, 1.02])  # processes agree within ~1 %
    noisy = _m(1.0, history=[1.0, 1.2, 0.85, 1.1, 0.9])  # processes differ by ~15 %
    a = compare_metric(_m(1.2), quiet)
    b = compare_metric(_m(1.2), noisy)
    assert a.outcome == "regressed" and a.mdc < 0.2
    assert b.outcome == "ambiguous" and b.mdc > 0.2
    assert "from 5 stored and 1 current process(es)" in a.basis


def test_the_reference_is_the_median_of_the_stored_runs() -> None:
    # One fast baseline process among five does not make every later run look slow.
    m = compare_metric(_m(1.0), _m(0.8, history=[1.0, 1.0, 0.99, 1.01, 0.8]))
    assert m.outcome == "unchanged" and m.change == pytest.approx(0.0)


# -- derived metrics and whole records ------------------------------------------------------------

def test_a_derived_metric_follows_its_timing() -> None:
    time = Measured("time", 1.3, "s", "lower", runs=[1.31, 1.29])
    bandwidth = Measured("bandwidth", 1 / 1.3, "B/s", "higher", derived_from="time",
                         runs=[0.76, 0.78])
    old = {"time": Measured("time", 1.0, "s", "lower"),
           "bandwidth": Measured("bandwidth", 1.0, "B/s", "higher")}
    record = judged(time, bandwidth, base=old)
    assert record.outcome("time") == record.outcome("bandwidth") == "regressed"
    assert record.verdict("bandwidth").basis.startswith("follows time: ")
    # Its own change (the median of its processes against its own baseline), its timing's call.
    assert record.verdict("bandwidth").change == pytest.approx(1 / 1.3 - 1)
    assert record.verdict("bandwidth").unit == "B/s"


def test_a_record_reports_missing_metrics() -> None:
    old = {"time": Measured("time", 1.0, "s", "lower"),
           "bandwidth": Measured("bandwidth", 5e9, "B/s", "higher")}
    current = judged(Measured("time", 1.0, "s", "lower"),
                     Measured("flops", 1e9, "FLOP/s", "higher"), base=old)
    assert [current.outcome(n) for n in ("time", "flops")] == ["unchanged", "new"]
    assert (current.outcome("bandwidth"), current.verdict("bandwidth").baseline) == (
        "missing", 5e9)
    assert engine.failures(current, Rules())[0].startswith(
        "r bandwidth: in the baseline (5 GB/s) but not recorded by this run")


def test_minimum_detectable_change_grows_with_the_spread_and_shrinks_with_runs() -> None:
    def mdc(between: float, now: int, before: int) -> float:
        return noise.Noise(between, dof=4, within=0.0, runs_now=now,
                              runs_before=before).mdc(0.0, 0.01)

    few, more, wider = mdc(0.05, 1, 1), mdc(0.05, 3, 5), mdc(0.10, 3, 5)
    assert few > more and wider > more
    assert more == pytest.approx(math.expm1(3.7469 * 0.05 * math.sqrt(1 / 3 + 1 / 5)), rel=1e-3)


def test_the_yardstick_removes_the_machines_drift_where_it_moved_the_code_with_it() -> None:
    # The machine ran 30 % slower during this run: the code's time and the yardstick's both.
    base = Measured("time", 1.0, "s", "lower", yardstick=2.0, history=[1.0, 1.05, 0.95],
                  relative_history=[0.5, 0.51, 0.49])
    slower_machine = Measured("time", 1.3, "s", "lower", yardstick=2.6, runs=[1.32, 1.28],
                            relative_runs=[0.505, 0.495])
    m = compare_metric(slower_machine, base)
    assert m.outcome == "unchanged" and m.change == pytest.approx(0.0)
    assert "relative to the machine's yardstick (as measured: +30.0%)" in m.basis
    assert m.relative
    # Slower code on the same machine: the yardstick stays, the relative time moves.
    slower_code = Measured("time", 1.3, "s", "lower", yardstick=2.0, runs=[1.31, 1.29],
                         relative_runs=[0.655, 0.645])
    assert compare_metric(slower_code, base).outcome == "regressed"


def test_a_workload_the_yardstick_does_not_track_is_judged_as_measured() -> None:
    # A sleep: steady as measured, while the yardstick's drift would only add noise.
    base = Measured("time", 1.0, "s", "lower", yardstick=2.0, history=[1.0, 1.0, 1.0],
                  relative_history=[0.5, 0.4, 0.6])
    m = compare_metric(Measured("time", 1.5, "s", "lower", yardstick=2.0, runs=[1.5, 1.5],
                              relative_runs=[0.9, 0.6]), base)
    assert m.outcome == "regressed" and "the yardstick does not track this metric" in m.basis
    assert not m.relative and m.change == pytest.approx(0.5)


def test_no_confirmation_where_no_number_of_fresh_processes_could_catch_the_change() -> None:
    # Five stored runs spread by ~10 %: a +12 % change in one process could not become a
    # regression with two more processes as noisy, so none are started for it ...
    base = _m(1.0, history=[1.0, 1.12, 0.9, 1.05, 0.95])
    m = compare_metric(_m(1.12), base, can_confirm=2)
    assert m.outcome == "ambiguous" and "is needed to be caught" in m.basis
    # ... while +60 % is worth measuring again.
    assert compare_metric(_m(1.6), base, can_confirm=2).outcome == SUSPECT


def test_a_change_one_process_shows_beyond_the_noise_is_confirmed_before_it_fails() -> None:
    # Three saves whose levels moved more than their processes: the drift dominates, and two
    # more processes would leave the degrees of freedom to its few, raising the detectable
    # change (a tripled time was 'regressed' in its one process, never measured again).
    base = _m(1.0, history=[1.0, 1.04, 0.97, 1.12, 0.95, 0.99])
    base.history_saves = [3, 1, 2]
    alone = compare_metric(_m(3.0), base, alpha=1e-3)
    assert alone.outcome == "regressed" and alone.change > alone.mdc  # caught, no confirming
    m = compare_metric(_m(3.0), base, alpha=1e-3, can_confirm=2)
    assert m.outcome == SUSPECT and m.processes == 1, m.basis


# -- exact figures ---------------------------------------------------------------------------------

def _exact(value: float, better: str | None = "lower", tolerance: float | None = None
           ) -> Measured:
    return Measured("registers", value, "", better, exact=True, tolerance=tolerance)


@pytest.mark.parametrize("better, old, new, verdict", [
    ("lower", 168, 168, "unchanged"),
    ("lower", 168, 169, "regressed"),  # one register more is a change: no noise to hide in
    ("lower", 168, 160, "improved"),
    ("higher", 64, 0, "regressed"),  # tensor-core instructions gone
    (None, 1000, 1001, "ambiguous"),  # a count without a better direction: shown, not judged
])
def test_an_exact_figure_is_judged_without_a_noise_model(better, old, new, verdict) -> None:
    # The run-wide tolerance (10 %) does not apply to an exact figure: 0 unless it gives one.
    m = compare_metric(_exact(new, better), _exact(old, better), tolerance=0.10, can_confirm=2)
    assert m.outcome == verdict, m.basis
    assert "exact figure" in m.basis


def test_an_exact_figure_is_never_measured_again_and_keeps_its_own_tolerance() -> None:
    # Measuring a compile-time figure again gives the same figure: no `suspect`, no reruns.
    regressed = compare_metric(_exact(2048), _exact(1024), can_confirm=2)
    assert regressed.outcome == "regressed" and regressed.change == pytest.approx(1.0)
    within = compare_metric(_exact(1030, tolerance=0.01), _exact(1024), can_confirm=2)
    assert within.outcome == "unchanged"
    record = judged(_exact(2048), base={"registers": _exact(1024)})
    assert engine.failures(record, Rules()) == [
        f"r registers: 1,024 -> 2,048 (+100.0%, tolerance 0%): {regressed.basis}"]


def test_a_blind_spots_fix_counts_the_processes_a_side_already_has() -> None:
    from pytest_hpml.compare.advice import StoredAdvice
    from pytest_hpml.compare.noise import Noise, blind_spot

    advice = StoredAdvice(confirm=2, processes=3)  # the defaults
    # A save of 3 processes against one current process. Spread 10 %: three on each side
    # suffice; the save has them already and a suspected regression's confirmations give the
    # comparison's side as many, so no option is named that would change nothing.
    enough = Noise(between=0.10, dof=2, within=0.0, runs_now=1, runs_before=3)
    assert enough.processes_for(0.5, 0.01) == 3
    assert blind_spot(enough, 0.8, 0.5, 0.01, advice).endswith(
        "more processes: 3 on each side would bring it under the limit (the confirmations a "
        "suspected regression gets (--hpml-confirm=2) already measure 3 processes)")
    # Spread 15 %: four on each side, so the save and the confirmations need more.
    more = Noise(between=0.15, dof=2, within=0.0, runs_now=1, runs_before=3)
    assert blind_spot(more, 0.8, 0.5, 0.01, advice).endswith(
        "more processes: 4 on each side would bring it under the limit (saves of 4 processes "
        "(--hpml-baseline-processes=4); --hpml-confirm=3)")


def test_a_detectable_change_of_millions_of_percent_is_said_as_over_the_limit() -> None:
    # Processes far apart on both sides: a t quantile of few degrees of freedom, exponentiated,
    # read as a figure of dozens of digits ("a change beyond 566969304328455457546960896.0 %").
    m = compare_metric(_m(1.3, runs=[1.0, 2.5]), _m(1.0, history=[0.5, 1.5]))
    assert m.outcome == "ambiguous" and m.mdc > 10
    assert "a change over ±1000% is needed to be caught" in m.basis
