"""Verdicts: how each measured metric of a run compares with the stored baseline, and what the
verdict rests on.

The speed of the same code differs between processes (allocator state, thread scheduling,
clocks), and samples from one process say nothing about that: two processes running identical
code get rank-test p-values of 1e-60. So a verdict weighs the change against every source of
noise this machine has shown for the metric (pytest_hpml.compare.noise):

- within-run: the uncertainty of each run's median (its notch, 1.57 IQR / sqrt(n));
- between processes measured together: the baseline's saves, and this run's processes (the
  test's own and its confirmations in fresh processes);
- between occasions: the day's drift, learned from the saves in the history, assumed until
  then (--hpml-drift);
- the tolerance: a change the user declared unimportant.

The smallest change the evidence can separate from noise is the minimum detectable change
(MDC). A change within the tolerance is `unchanged`; beyond the MDC it is `regressed` or
`improved`, however noisy the runs were; between the two it is `ambiguous`, and the basis says
how large it would have to be to be caught. A worse change that only one process has shown is
`suspect`: --hpml-compare confirms it in fresh processes before the verdict is final. A metric
whose MDC exceeds --hpml-max-detectable is a blind spot, and its verdict says so.

Relative to the machine's yardstick: a CPU timing may be judged relative to a memcpy timed
between its samples, or to the machine's compute pace (a fixed Python loop timed after each
chunk of samples, which moved with Python-heavy calls where a memcpy did not), each only where
it tracks the metric (compare/evidence.py: between processes run together, or over six runs or
more), and the one whose noise lets the smaller change through; such a verdict never points
the other way than the values as measured (a machine that slowed the yardstick and not the
code must not make an unchanged metric `improved`): then the values as measured decide. A
first process whose time relative to its pace is worse beyond the tolerance, where the pace
is not known not to track it, is measured again in fresh processes even when the value as
measured looks fine: a faster stretch of the machine than the save's hides a slowdown.

The rows of a test that record the same metric (a sweep) are judged as one family
(compare/families.py): each row at the test's alpha shared by its rows, with the spread and
tails the rows show together as a floor.

Only measured metrics get verdicts: checks fail by their own limit in the run, references and
settings are shown, never compared. A metric derived from a timing follows its timing's verdict.
A metric the baseline has and the run lacks is `missing`, and fails unless the row expects it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache, partial

from pytest_hpml.compare import machine_moves, modes
from pytest_hpml.compare.basis import (
    NO_DIRECTION,
    bimodal_note,
    caught_words,
    not_caught,
    relative_change,
    seeded_basis,
    suspected,
    within_tolerance,
)
from pytest_hpml.compare.detectable import beyond, confirms
from pytest_hpml.compare.evidence import (
    PACED,
    Evidence,
    machine_modes,
    series,
    tracking,
)
from pytest_hpml.compare.families import Family
from pytest_hpml.compare.noise import (
    DEFAULT_DRIFT,
    SPEED_UNITS,
    Advice,
    blind_spot,
    estimate,
    pct,
)
from pytest_hpml.compare.stored import Stored
from pytest_hpml.frozen import evolve
from pytest_hpml.measure.stats import mann_whitney_u, median_uncertainty
from pytest_hpml.results import Metric, Replicates, Verdict

DEFAULT_TOLERANCE = 0.10
DEFAULT_ALPHA = 0.01
#: A detectable change beyond this is a blind spot, flagged (--hpml-max-detectable).
DEFAULT_MAX_DETECTABLE = 0.5
MIN_SAMPLES_FOR_TEST = 9
#: A verdict that needs fresh processes before it is final (never left on a finished run).
SUSPECT = "suspect"


@dataclass(frozen=True)
class Rules:
    """What a comparison holds a change to (the run's options, declared once in
    pytest_hpml.policy; the command line's own), carried through every verdict."""

    tolerance: float = DEFAULT_TOLERANCE
    alpha: float = DEFAULT_ALPHA
    drift: float = DEFAULT_DRIFT  # assumed for times and rates until the history knows it
    max_detectable: float | None = DEFAULT_MAX_DETECTABLE  # blind spots beyond it (None: never)
    strict_blind: bool = False  # a blind spot fails the comparison (--hpml-strict-blind-spots)
    # Where nothing can be measured again (two saved reports): a regression resting on one
    # process a side, with no spread between processes known, is `unconfirmed`, not
    # `regressed` (two processes of the same code differ by more than their samples show).
    unconfirmed_alone: bool = False
    fail_unconfirmed: bool = False  # an unconfirmed regression fails too (--fail-unconfirmed)
    # The evidence was measured on this run's occasion, in turns with it (--hpml-compare-ref):
    # its processes' modes are told apart at a narrower gap (compare/modes.py).
    one_occasion: bool = False
    # The metrics of the baseline whose learned drift (their median) `drift` is, where it is
    # theirs and not --hpml-drift's (compare/drift_prior.py); 0: --hpml-drift's.
    drift_learned_by: int = 0

    @property
    def mode_gap(self) -> float:
        """The least gap between modes of the processes, in logs."""
        return modes.ONE_OCCASION_GAP if self.one_occasion else modes.MODE_GAP

    def tolerance_of(self, metric: Metric, base: Stored | None = None) -> float:
        """The tolerance a metric's change is held to: its own, else 0 for an exact figure,
        else the run's."""
        if metric.tolerance is not None:
            return metric.tolerance
        return 0.0 if metric.exact or (base is not None and base.exact) else self.tolerance


@lru_cache(maxsize=64)
def _at_alpha(rules: Rules, alpha: float) -> Rules:
    """`rules` at a family's share of alpha: one per family, not one per row (a 10 000-row
    sweep's rows each built their own)."""
    return replace(rules, alpha=alpha)


def _weigh(e: Evidence, current: Metric, base: Stored, tol: float, rules: Rules,
           family: Family | None = None) -> Evidence:
    e.history = [v for v in e.history if math.isfinite(v)]
    if e.history:
        now = [v for v in e.now if math.isfinite(v)] or e.now
        e.change = relative_change(statistics.median(e.history), statistics.median(now))
        within = math.hypot(median_uncertainty(current.samples or []), base.within)
        drift = rules.drift if current.unit in SPEED_UNITS else 0.0
        e.noise = estimate(e.history, e.saves, e.now, within, drift, e.saves_together,
                           rules.drift_learned_by)
        if family is not None:
            e.noise = family.floor(e.noise, e.label)
        e.mdc = e.noise.mdc(tol, rules.alpha)
    return e


def _untrusted(verdict: Verdict) -> Verdict:
    """A verdict against a seeded baseline: another tool's run, in another environment (2
    threads against 1 turned unchanged code into -99.9 %), decides nothing."""
    outcome = {"regressed": "unconfirmed", "improved": "ambiguous"}.get(verdict.outcome)
    return replace(verdict, outcome=outcome) if outcome else verdict


def judge_metric(current: Metric, now: Replicates, base: Stored | None, rules: Rules,
                 can_confirm: int = 0, advice: Advice | None = None,
                 family: Family | None = None) -> Verdict | None:
    """The verdict of a measured metric, measured in the processes `now` (the test's own
    first), against its evidence `base` in the same unit and direction (the engine checks and
    converts them first); None for a metric that is not compared (a check, a reference, a
    setting). With can_confirm (the fresh processes a confirmation would add), a worse change
    beyond the tolerance comes back `suspect`, to be measured again before it is final, unless
    the noise already known says no such confirmation could make it a regression. One that
    rests on a value another tool measured says so. A row of a `family` (the test's rows
    recording the metric) is judged at the family's share of alpha, with the family's pooled
    spread as a floor (compare/families.py)."""
    if not current.compared:
        return None
    if base is None:
        return Verdict("new", unit=current.unit, current=now.value,
                       processes=len(now.values))
    if family is not None:
        rules = _at_alpha(rules, family.alpha(rules.alpha))
    # A seeded baseline: fresh processes would confirm a change against another environment.
    verdict = _verdict(current, now, base, rules, 0 if base.seeded_from else can_confirm,
                       advice or Advice(), family)
    verdict = evolve(verdict, unit=current.unit, processes=len(now.values),
                     accepted=verdict.accepted or base.last_accepted())
    if base.seeded_from:
        basis = "; ".join(filter(None, (verdict.basis, seeded_basis(base.seeded_from))))
        verdict = _untrusted(replace(verdict, basis=basis))
    return verdict


def _verdict(current: Metric, now: Replicates, base: Stored, rules: Rules, can_confirm: int,
             advice: Advice, family: Family | None = None) -> Verdict:
    tol = rules.tolerance_of(current, base)
    if not math.isfinite(now.value):
        # A number was recorded before and now there is none: the run is broken, whatever
        # the metric's direction.
        return Verdict("regressed", baseline=base.reference, current=now.value,
                       basis=f"the value is {now.value}, not a number as in the baseline")
    if current.exact or base.exact:
        return _judge_exactly(current, now, base, tol)
    found = machine_modes(base, now, rules.mode_gap)
    if found is not None and len(found.stored) >= 2:
        return _judge_modes(found, current, now, base, tol, rules, can_confirm, advice)
    if found is not None and found.new and found.now >= 2:
        # Some of this run's processes at the stored level, some in a mode the history never
        # saw: a switch of modes, which says nothing of the code. The next save learns it (a
        # comparison with processes measured now has nothing to learn it from).
        other, unseen = (
            ("the other side's processes in one; a switch of modes is not judged",
             "a change of this metric cannot be seen this run") if rules.one_occasion else
            ("the baseline's runs in one; a switch of modes is not judged, and a save learns "
             "the new mode", "until then a change of this metric cannot be seen"))
        said = (f"bimodal: this run's {len(now.values)} processes landed in {found.now} modes "
                f"({found.describe()}), {other}")
        return Verdict("ambiguous", baseline=base.reference, current=now.value,
                       change=relative_change(base.reference, now.value), basis=said,
                       blind=f"{said}: {unseen}")
    raw, *others = [_weigh(e, current, base, tol, rules, family) for e in series(now, base)]
    relative, words = [], []
    pace_tracks: bool | None = None  # what the history says of the compute pace, if enough
    for other in others:  # the yardstick's series, the compute pace's
        tracks, told = tracking(raw, other)
        words += [told] if told else []
        if other.label == PACED and told:
            pace_tracks = tracks
        if tracks and other.noise is not None:
            relative.append(other)
    said = "; ".join(words)
    # Relative to the yardstick (or the compute pace) where it tracks the metric and lets a
    # smaller change through.
    e = min((x for x in (raw, *relative) if x.noise is not None), key=lambda x: x.mdc,
            default=None)
    if e is None:  # an old baseline that stored NaN: nothing to compare with
        return Verdict("ambiguous", baseline=base.value, current=now.value,
                       basis="the baseline holds no number to compare with")
    verdict = _judge(e, current, now, base, tol, rules, can_confirm,
                     (f"; {said}; judged as measured" if e is raw else f"; {said}")
                     if said else "")
    if e is not raw and verdict.outcome in ("regressed", "improved", SUSPECT) and \
            raw.change * e.change <= 0 and raw.noise is not None:
        if not e.together:
            # The yardstick moved on its own: a verdict relative to it that the values as
            # measured do not show in the same direction would be invented.
            note = (f"; {e.label} {e.change:+.1%} {verdict.outcome}, but the values as "
                    "measured moved the other way: judged as measured")
            e = raw
            verdict = _judge(raw, current, now, base, tol, rules, can_confirm, note)
        elif abs(raw.change) > tol:
            # This run's processes moved with the yardstick, but a move as measured beyond the
            # tolerance the other way says the metric follows it by less than it moved: a
            # softmax read -19.2 % as measured and +26.8 % relative to a pace 1.57x faster
            # than the save's (a false alarm, 2026-11-28). Not judged either way.
            verdict = replace(verdict, outcome="ambiguous", basis=(
                f"{e.label} {e.change:+.1%}, as measured {raw.change:+.1%}: the values moved "
                f"beyond the {pct(tol)} tolerance the other way, so they follow the yardstick "
                f"by less than it moved; not judged ({verdict.basis})"))
        # Otherwise the verdict relative to it stands: within the tolerance as measured, a move
        # of the machine that this run's processes followed (50 % more work read -4 % in a
        # stretch 1.6x faster, +50 % relative to the pace) is the machine's, not invented.
    paced = next((o for o in others if o.label == PACED and o.noise is not None), None)
    if can_confirm and paced is not None and pace_tracks is not False and \
            verdict.outcome not in (SUSPECT, "regressed") and current.better == "lower" and \
            paced.change > tol:
        # A faster stretch of the machine than the save's hides what the time relative to its
        # pace shows (50 % more work read +4 % as measured, and the pace +25 %): measured
        # again, so that processes run together can show whether the pace tracks the metric.
        again = _judge(paced, current, now, base, tol, rules, can_confirm,
                       f"; as measured {e.change:+.1%}, {verdict.outcome}")
        if again.outcome == SUSPECT:
            return again
    # A blind spot is what the noise hides; a wide tolerance is the user's own choice.
    noisy = e.noise.mdc(0.0, rules.alpha) if e.noise is not None else 0.0
    if rules.max_detectable and noisy > rules.max_detectable:
        verdict = evolve(verdict, blind=blind_spot(e.noise, noisy, rules.max_detectable,
                                                   rules.alpha, advice))
    if family is not None and verdict.outcome in ("regressed", "improved", SUSPECT):
        verdict = family.hold_within_tails(verdict, raw.history, raw.now)
    if verdict.outcome in ("regressed", "improved", SUSPECT):
        # Held back where the machine's own moves explain it (compare/machine_moves.py),
        # unless the verdict already rests on a pace seen to track the metric in this run.
        if not (e.label == PACED and e.together):
            verdict = machine_moves.held_back(verdict, current, base, tol, pace_tracks) or \
                verdict
    return verdict


def _judge(e: Evidence, current: Metric, now: Replicates, base: Stored, tol: float,
           rules: Rules, can_confirm: int, note: str, baseline: float | None = None) -> Verdict:
    """The verdict that the series `e` supports; `note` is added to its evidence; `baseline`:
    the stored level the change is measured from (default: the stored runs' median)."""
    assert e.noise is not None
    judged = partial(Verdict, baseline=base.reference if baseline is None else baseline,
                     current=now.value, change=e.change, mdc=e.mdc, relative=bool(e.label))
    evidence = e.noise.describe() + note
    if e.label:
        as_measured = relative_change(base.reference, now.value)
        evidence += f"; {e.label} (as measured: {as_measured:+.1%})"
    if abs(e.change) <= tol:
        return judged("unchanged", basis=within_tolerance(tol, evidence))
    if current.better is None:
        # A change with no good direction (a count, a size): shown, never a regression.
        return judged("ambiguous", basis=NO_DIRECTION)
    worse = e.change > 0 if current.better == "lower" else e.change < 0
    if worse and can_confirm and confirms(e.noise, e.change, e.mdc, len(e.now), can_confirm,
                                          tol, rules.alpha):
        # Measured again in fresh processes before a regression is final (a CI failure must
        # mean it) unless the noise already known says no confirmation could make it one; all
        # of them while the fresh processes still show it (stopping at the first that agrees
        # would be a test repeated until it passes), none more once one dispels it. A change
        # caught already is confirmed too: more processes can raise the detectable change
        # where the drift dominates (the degrees of freedom fall to the drift's few), and a
        # 12 ms stall of one row of a 10 000-row sweep failed a compare in its one process.
        return judged(SUSPECT, basis=suspected(e.change, len(e.now), evidence))
    p_value = None
    caught = beyond(e.change, e.mdc)
    if e.noise.between is None and caught:
        p_value = _rank_test(current, base)
        caught = p_value is None or p_value < rules.alpha
    if not caught:
        return judged("ambiguous", p_value=p_value, basis=not_caught(e.change, e.mdc, evidence))
    if worse and rules.unconfirmed_alone and e.noise.between is None and len(e.now) < 2:
        return judged("unconfirmed", p_value=p_value,
                      basis=f"{e.change:+.1%}, in one process a side: the spread between "
                            "processes is unknown, so nothing confirms it (a save with "
                            "--hpml-baseline-processes, or --hpml-compare, which confirms in "
                            f"fresh processes, can); {evidence}")
    return judged("regressed" if worse else "improved", p_value=p_value,
                  basis=caught_words(e.change, e.mdc, statistics.median(e.history), e.now,
                                     evidence))


def _judge_modes(found: modes.Modal, current: Metric, now: Replicates, base: Stored,
                 tol: float, rules: Rules, can_confirm: int, advice: Advice) -> Verdict:
    """A metric whose stored runs hold several modes: each value measured from the level of the
    mode nearest to it, stored runs and this run's processes alike, and judged as measured
    (the yardstick's view of a mode switch would be noise)."""
    saves = base.history_saves if base.history else None
    e = _weigh(Evidence("", found.normalized(base.runs), saves, found.normalized(now.values),
                        base.saves_together), current, base, tol, rules)
    if e.noise is None:
        return Verdict("ambiguous", baseline=base.reference, current=now.value,
                       basis="the baseline holds no number to compare with")
    anchor = found.nearest(now.value) if now.value > 0 else base.reference
    verdict = _judge(e, current, now, base, tol, rules, can_confirm, bimodal_note(found),
                     baseline=anchor)
    noisy = e.noise.mdc(0.0, rules.alpha)
    if rules.max_detectable and noisy > rules.max_detectable:
        verdict = evolve(verdict, blind=blind_spot(e.noise, noisy, rules.max_detectable,
                                                   rules.alpha, advice))
    return verdict


def _judge_exactly(current: Metric, now: Replicates, base: Stored, tol: float) -> Verdict:
    """An exact figure against the stored one: no noise, so any change beyond the tolerance is
    a change, and measuring again would give the same figure."""
    change = relative_change(base.value, now.value)
    judged = partial(Verdict, baseline=base.value, current=now.value, change=change, mdc=tol)
    shown = f"{base.value:.6g} -> {now.value:.6g} {current.unit}".rstrip()
    if abs(change) <= tol:
        return judged("unchanged", basis=f"exact figure: {shown}"
                      + (f", within the {pct(tol)} tolerance" if change else ""))
    if current.better is None:
        return judged("ambiguous", basis=f"exact figure changed: {shown}; no better "
                                         "direction: shown, not judged")
    worse = change > 0 if current.better == "lower" else change < 0
    return judged("regressed" if worse else "improved",
                  basis=f"exact figure changed: {shown} ({change:+.1%})")


def _rank_test(current: Metric, base: Stored) -> float | None:
    """With one process on each side, the p-value of the rank test of their samples, where
    there are enough (None otherwise): it cannot see process-to-process noise, so it only
    ever holds a verdict back."""
    if not (current.samples and base.samples and len(current.samples) >= MIN_SAMPLES_FOR_TEST
            and len(base.samples) >= MIN_SAMPLES_FOR_TEST):
        return None
    return mann_whitney_u(current.samples, base.samples)[1]
