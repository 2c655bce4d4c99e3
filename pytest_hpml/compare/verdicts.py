"""Verdicts: how each measured metric of a run compares with the stored baseline, and what the
verdict rests on.

The speed of the same code differs between processes (allocator state, thread scheduling,
clocks), and samples from one process say nothing about that: two processes running identical
code get rank-test p-values of 1e-60. So a verdict weighs the change against every source of
noise this machine has shown for the metric:

- within-run: the uncertainty of each run's median (its notch, 1.57 IQR / sqrt(n));
- between-run: the spread of the medians of separate processes, from the baseline's history
  (its last runs) and from confirmation runs (the test run again in fresh processes);
- the tolerance: a change the user declared unimportant.

The smallest change the evidence can separate from noise is the minimum detectable change
(MDC). A change within the tolerance is `unchanged`; beyond the MDC it is `regressed` or
`improved`, however noisy the runs were; between the two it is `ambiguous`, and the basis says
how large it would have to be to be caught. A worse change that only one process has shown is
`suspect`: --hpml-compare confirms it in fresh processes before the verdict is final.
Only measured metrics get verdicts: checks fail by their own limit in the run, references and
settings are shown, never compared. A metric derived from a timing follows its timing's verdict.
A metric the baseline has and the run lacks is `missing`, and fails unless the row expects it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from pytest_hpml.compare import baselines
from pytest_hpml.measure.stats import mann_whitney_u, median_uncertainty, t_quantile
from pytest_hpml.report.units import format_value
from pytest_hpml.results import Metric, Record, Verdict

DEFAULT_TOLERANCE = 0.10
DEFAULT_ALPHA = 0.01
MIN_SAMPLES_FOR_TEST = 9
#: A verdict that needs fresh processes before it is final (never left on a finished run).
SUSPECT = "suspect"


def relative_change(old: float, new: float) -> float:
    if old == new:
        return 0.0
    if old == 0:
        return math.copysign(math.inf, new)
    return (new - old) / abs(old)


@dataclass(frozen=True)
class Noise:
    """How far apart runs of identical code land on this machine, for one metric."""

    between: float | None  # stdev of ln(median) between processes; None: not known yet
    dof: int  # degrees of freedom behind `between`
    within: float  # combined relative uncertainty of the two medians compared

    def describe(self, runs_now: int, runs_before: int) -> str:
        parts = []
        if self.between is not None:
            parts.append(f"between-run spread {_pct(self.between)} from {runs_before} stored "
                         f"and {runs_now} current process(es)")
        else:
            parts.append(f"between-run spread unknown ({runs_before} stored run, "
                         f"{runs_now} current)")
        if self.within:
            parts.append(f"within-run {_pct(self.within)}")
        return ", ".join(parts)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _logs(values: list[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def noise(history: list[float], now: list[float], current: Metric, base: Metric) -> Noise:
    """Between-run spread pooled over the stored runs and the current processes (each group
    with two or more medians contributes), and the within-run uncertainty of both medians."""
    groups = [g for g in (_logs(history), _logs(now)) if len(g) >= 2]
    dof = sum(len(g) - 1 for g in groups)
    between = None
    if dof:
        pooled = sum(statistics.variance(g) * (len(g) - 1) for g in groups) / dof
        between = math.sqrt(pooled)
    within = math.hypot(median_uncertainty(current.samples or []),
                        median_uncertainty(base.samples or []))
    return Noise(between, dof, within)


def minimum_detectable_change(n: Noise, runs_now: int, runs_before: int, tolerance: float,
                              alpha: float) -> float:
    """The smallest relative change the evidence separates from noise at level alpha."""
    if n.between is not None:
        se = n.between * math.sqrt(1 / runs_now + 1 / runs_before)
        threshold = t_quantile(1 - alpha, n.dof) * se
    else:
        threshold = 3 * n.within  # one process on each side: the within-run view only
    return max(tolerance, math.expm1(threshold))


@dataclass
class Evidence:
    """One series of process values a verdict can rest on, and what it shows."""

    label: str  # "" for the values as measured
    history: list[float]  # the baseline's runs
    now: list[float]  # this run's processes, the test's own first
    change: float = 0.0
    mdc: float = math.inf
    noise: Noise | None = None


def _series(current: Metric, base: Metric) -> list[Evidence]:
    """The values as measured, and, when both runs timed the machine's yardstick, the values
    relative to it."""
    found = [Evidence("", list(base.history or [base.value]),
                      [current.value, *(current.runs or [])])]
    base_relative = base.relative_history or ([base.relative] if base.relative else None)
    if current.relative is not None and base_relative:
        found.append(Evidence("relative to the machine's yardstick", list(base_relative),
                              [current.relative, *(current.relative_runs or [])]))
    return found


def _weigh(e: Evidence, current: Metric, base: Metric, tol: float, alpha: float) -> Evidence:
    e.history = [v for v in e.history if math.isfinite(v)]
    if e.history:
        e.change = relative_change(statistics.median(e.history), statistics.median(e.now))
        e.noise = noise(e.history, e.now, current, base)
        e.mdc = minimum_detectable_change(e.noise, len(e.now), len(e.history), tol, alpha)
    return e


def reference_value(base: Metric) -> float:
    """The stored value a change is measured from: the median of the stored runs (the latest
    run alone where the baseline kept no history)."""
    finite = [v for v in base.history or [] if math.isfinite(v)]
    return statistics.median(finite) if finite else base.value


def accepted_level(base: Metric) -> str | None:
    """The stored level's last accepted change in words, e.g. "accepted on 2026-11-23 14:02:
    215.9 us -> 86.1 us"; None where no save accepted one."""
    if not base.accepted:
        return None
    last = base.accepted[-1]
    when = str(last.get("on", ""))[:16].replace("T", " ")
    return (f"accepted on {when}: {format_value(last['before'], base.unit)} -> "
            f"{format_value(last['after'], base.unit)}")


def compare_metric(current: Metric, base: Metric | None, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA, can_confirm: int = 0) -> Verdict | None:
    """The verdict of a measured metric against its stored counterpart (see _verdict); one
    that rests on a value another tool measured says so."""
    verdict = _verdict(current, base, tolerance, alpha, can_confirm)
    if verdict is not None and base is not None and base.seeded_from:
        basis = "; ".join(filter(None, (verdict.basis, seeded_basis(base.seeded_from))))
        verdict = replace(verdict, basis=basis)
    return verdict


def seeded_basis(seeded_from: str) -> str:
    return (f"the baseline is {seeded_from}: its between-run spread is unknown until "
            "pytest-hpml has saved its own runs (--hpml-save-baseline)")


def _verdict(current: Metric, base: Metric | None, tolerance: float, alpha: float,
             can_confirm: int) -> Verdict | None:
    """The verdict of a measured metric against its stored counterpart (None for a metric that
    is not compared: a check, a reference, a setting). The values of fresh processes travel in
    current.runs. With can_confirm (the fresh processes a confirmation would add), a worse
    change beyond the tolerance comes back `suspect`, to be measured again before it is final,
    unless the noise already known says no such confirmation could make it a regression."""
    if not current.compared:
        return None
    if base is None:
        return Verdict("new")
    exact = current.exact or base.exact
    tol = current.tolerance if current.tolerance is not None else 0.0 if exact else tolerance
    if not math.isfinite(current.value):
        # A number was recorded before and now there is none: the run is broken, whatever
        # the metric's direction.
        return Verdict("regressed", baseline=base.value,
                       basis=f"the value is {current.value}, not a number as in the baseline")
    if exact:
        return _judge_exactly(current, base, tol)
    # The series whose noise lets the smallest change through: relative to the yardstick where
    # the machine's drift moved the code with it, as measured where it did not (a sleep, a GPU).
    series = [_weigh(e, current, base, tol, alpha) for e in _series(current, base)]
    e = min((x for x in series if x.noise is not None), key=lambda x: x.mdc, default=None)
    if e is None:  # an old baseline that stored NaN: nothing to compare with
        return Verdict("ambiguous", baseline=base.value,
                       basis="the baseline holds no number to compare with")
    judged = partial(Verdict, baseline=reference_value(base), change=e.change, mdc=e.mdc,
                     relative=bool(e.label), accepted=accepted_level(base))
    evidence = e.noise.describe(len(e.now), len(e.history))
    if e.label:
        evidence += f"; {e.label} (as measured: {series[0].change:+.1%})"
    if abs(e.change) <= tol:
        return judged("unchanged", basis=f"within the {_pct(tol)} tolerance; {evidence}")
    if current.better is None:
        # A change with no good direction (a count, a size): shown, never a regression.
        return judged("ambiguous", basis="no better direction: shown, never judged")
    worse = e.change > 0 if current.better == "lower" else e.change < 0
    if worse and can_confirm and (
            len(e.now) > 1 or _confirmation_could_catch(e, can_confirm, tol, alpha)):
        # Measured again in fresh processes before a regression is final (a CI failure must
        # mean it) unless the noise already known says no confirmation could make it one; all
        # of them while the fresh processes still show it (stopping at the first that agrees
        # would be a test repeated until it passes), none more once one dispels it.
        return judged(SUSPECT, basis=f"{e.change:+.1%} in {len(e.now)} process(es) so far; "
                                     f"{evidence}")
    p_value = None
    caught = abs(e.change) > e.mdc
    if e.noise.between is None and caught:
        p_value = _rank_test(current, base)
        caught = p_value is None or p_value < alpha
    if not caught:
        return judged("ambiguous", p_value=p_value,
                      basis=f"{e.change:+.1%} cannot be told from this machine's noise: a "
                            f"change beyond {_pct(e.mdc)} is needed to be caught ({evidence})")
    reference = statistics.median(e.history)
    shown = ", ".join(f"{relative_change(reference, v):+.1%}" for v in e.now)
    return judged("regressed" if worse else "improved", p_value=p_value,
                  basis=f"{e.change:+.1%} beyond the {_pct(e.mdc)} this machine can detect; "
                        f"{len(e.now)} process(es): {shown}; {evidence}")


def _judge_exactly(current: Metric, base: Metric, tol: float) -> Verdict:
    """An exact figure against the stored one: no noise, so any change beyond the tolerance is
    a change, and measuring again would give the same figure."""
    change = relative_change(base.value, current.value)
    judged = partial(Verdict, baseline=base.value, change=change, mdc=tol,
                     accepted=accepted_level(base))
    shown = f"{base.value:.6g} -> {current.value:.6g} {current.unit}".rstrip()
    if abs(change) <= tol:
        return judged("unchanged", basis=f"exact figure: {shown}"
                      + (f", within the {_pct(tol)} tolerance" if change else ""))
    if current.better is None:
        return judged("ambiguous", basis=f"exact figure changed: {shown}; no better "
                                         "direction: shown, not judged")
    worse = change > 0 if current.better == "lower" else change < 0
    return judged("regressed" if worse else "improved",
                  basis=f"exact figure changed: {shown} ({change:+.1%})")


def _confirmation_could_catch(e: Evidence, extra: int, tol: float, alpha: float) -> bool:
    """Whether `extra` more processes, as noisy as those seen so far, could bring the detectable
    change below this change: if not, running them would only cost time."""
    n = e.noise
    if n is None or n.between is None:
        return True  # the spread between processes is unknown until they run
    more = Noise(n.between, n.dof + extra, n.within)
    return abs(e.change) > minimum_detectable_change(more, len(e.now) + extra, len(e.history),
                                                     tol, alpha)


def _rank_test(current: Metric, base: Metric) -> float | None:
    """With one process on each side, the p-value of the rank test of their samples, where
    there are enough (None otherwise): it cannot see process-to-process noise, so it only
    ever holds a verdict back."""
    if not (current.samples and base.samples and len(current.samples) >= MIN_SAMPLES_FOR_TEST
            and len(base.samples) >= MIN_SAMPLES_FOR_TEST):
        return None
    return mann_whitney_u(current.samples, base.samples)[1]


def follow_timings(record: Record) -> None:
    """Metrics derived from a timing take that timing's verdict (a bandwidth regresses exactly
    when its time does): one decision per measurement, whatever is derived from it. The
    derived metric keeps its own baseline and change."""
    for m in record.metrics:
        source = record.metric(m.derived_from) if m.derived_from else None
        if (source is None or source.verdict is None or m.verdict is None
                or m.verdict.outcome == "new" or not math.isfinite(m.value)):
            continue
        m.verdict = replace(source.verdict, baseline=m.verdict.baseline,
                            change=m.verdict.change, relative=m.verdict.relative,
                            basis=f"follows {source.name}: {source.verdict.basis}")


def compare_record(record: Record, old: dict[str, Metric], tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA, can_confirm: int = 0) -> list[Metric]:
    """Verdicts for every metric of `record` against `old` (the baseline's metrics of the same
    row); returns a 'missing' metric for each baseline metric the row lacks."""
    for metric in record.metrics:
        metric.verdict = compare_metric(metric, old.get(metric.name), tolerance, alpha,
                                        can_confirm)
    follow_timings(record)
    missing = []
    for name, base in old.items():
        if record.metric(name) is None and base.compared:
            missing.append(Metric(name=name, value=math.nan, unit=base.unit, better=base.better,
                                  verdict=Verdict("missing", baseline=reference_value(base)),
                                  note=None if not record.may_miss(name) else "expected"))
    return missing


def suspects(record: Record) -> list[str]:
    return [m.name for m in record.metrics if outcome(m) == SUSPECT]


def outcome(metric: Metric) -> str | None:
    """The metric's verdict in one word, None where it has none."""
    return metric.verdict.outcome if metric.verdict else None


def failures(record: Record, tolerance: float = DEFAULT_TOLERANCE) -> list[str]:
    """One line per metric of a compared record that fails the comparison."""
    lines = []
    for m in record.metrics:
        v = m.verdict
        if v is None:
            continue
        if v.outcome == "regressed" and not math.isfinite(m.value):
            lines.append(f"{record.id} {m.name}: {m.value} where the baseline has "
                         f"{v.baseline:.6g} {m.unit}".rstrip() + " (the run produced no number)")
        elif v.outcome == "regressed":
            tol = m.tolerance if m.tolerance is not None else 0.0 if m.exact else tolerance
            lines.append(f"{record.id} {m.name}: "
                         + f"{v.baseline:.6g} -> {m.value:.6g} {m.unit}".rstrip()
                         + f" ({v.change:+.1%}, tolerance {tol:.0%}): {v.basis}")
        elif v.outcome == "missing" and not record.may_miss(m.name):
            was = f"{v.baseline:.6g} {m.unit}".strip()
            lines.append(f"{record.id} {m.name}: in the baseline ({was}) but "
                         "not recorded by this run; if that is expected (an out-of-memory "
                         "batch, a removed metric), call hpml.expect_missing(...) in the test")
    return lines


def read_results(path: str | Path) -> list[Record]:
    """The records of a results file: a JSON report (--hpml-report=run.json) or a baseline
    file. A file that is neither, or a damaged one, is a ValueError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"cannot read results from {path}: {what}") from None
    baseline = isinstance(data, dict) and str(data.get("schema", "")).startswith(
        baselines.SCHEMA_PREFIX)
    if baseline or (isinstance(data, dict) and isinstance(data.get("records"), list)):
        # A baseline of this version or another is read by the store's own rules.
        found = baselines.parse(path, text).records.values() if baseline else data["records"]
        try:
            return [Record.from_dict(r) for r in found]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = "baseline file" if baseline else "pytest-hpml report"
            raise ValueError(f"{path} is a damaged {what}: {exc!r}") from None
    raise ValueError(f"{path} is neither a pytest-hpml JSON report nor a baseline file")


def compare_results(baseline: str | Path | list[Record], current: str | Path | list[Record], *,
                    tolerance: float = DEFAULT_TOLERANCE,
                    alpha: float = DEFAULT_ALPHA) -> list[Record]:
    """The stable entry point for tools: `current`'s records with the verdict of every
    measured metric against `baseline` (each a results file or a list of records), as
    --hpml-compare gives them without confirmation runs; baseline metrics a record lacks come
    back as 'missing'. The caller's records are not changed."""
    old = baseline if isinstance(baseline, list) else read_results(baseline)
    new = current if isinstance(current, list) else read_results(current)
    by_id = {r.id: {m.name: m for m in r.metrics} for r in old}
    out = []
    for record in new:
        record = Record.from_dict(record.to_dict())  # the caller's records stay as they were
        record.metrics.extend(compare_record(record, by_id.get(record.id, {}), tolerance, alpha))
        out.append(record)
    return out
