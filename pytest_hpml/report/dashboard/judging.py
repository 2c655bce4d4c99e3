"""The dashboard's numbers, by the plugin's own rules: the level a comparison measures a change
from, the verdict of the latest run (its report's) or of the latest save against the level
before it, the smallest change this machine can detect at the current level, and blind spots.

Every figure comes from the comparison engine (compare/verdicts.py and compare/noise.py)
through the few small functions at the top of this module, so that a change of the engine's
names is one place to repoint, and the dashboard never says other than what --hpml-compare
would. The series is judged as measured (the yardstick's relative series is the comparison's
business, not the history's picture).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from pytest_hpml.compare import engine, noise, provenance, verdicts
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.report.dashboard.series import Series
from pytest_hpml.report.units import format_value
from pytest_hpml.results import Metric, Record, Replicates, Verdict

# -- the engine, through these alone --------------------------------------------------------------

def level_of(metric: Stored) -> float:
    """The stored value a change is measured from (the median of the stored runs)."""
    return metric.reference


def judge_saves(rows: list[tuple[Record, dict[str, Stored]]], rules: Rules) -> None:
    """The verdicts --hpml-compare gives each row (a save's run: its metrics and the values of
    its processes) against its evidence (the row's stored metrics as they stood before), with no
    confirmation runs: the engine's, on the rows together, so that a test's rows recording one
    metric are one family and a derived figure follows its timing."""
    evidence = {record.id: base for record, base in rows}
    engine.judge_rows([record for record, _ in rows], evidence.__getitem__, rules)


def noise_of(values: list[float], counts: list[int], metric: Stored, rules: Rules,
             ids: list[str | None] | None = None) -> noise.Noise:
    """The noise of the current level, as a comparison with it would weigh it: the spread
    between the processes of each save, the drift between occasions (saves of one hour are
    one; `ids`: each save's id, which dates it), assumed until learned, and the notch of the
    latest run's median on each side."""
    within = math.sqrt(2) * metric.within
    drift = rules.drift if metric.unit in noise.SPEED_UNITS else 0.0
    return noise.estimate(values, counts, [statistics.median(values)], within, drift,
                          provenance.occasions_in_time(ids))


def detectable(n: noise.Noise, tolerance: float, alpha: float, processes: int) -> float:
    return n.mdc(tolerance, alpha, runs_now=processes)


def blind_sentence(n: noise.Noise, noisy: float, rules: Rules) -> str:
    return noise.blind_spot(n, noisy, rules.max_detectable, rules.alpha)


def relative_change(old: float, new: float) -> float:
    return verdicts.relative_change(old, new)


# -- the figures of one series --------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    level: float | None  # the current level
    latest: float | None  # the latest value: the run's, else the latest save's median
    verdict: Verdict | None  # the latest verdict
    verdict_from: str  # what the verdict is: "run", "save", "accepted", "" (first save)
    detectable: float | None  # the relative change a comparison with the level can detect
    tolerance: float
    processes: int  # processes of the latest save: the run the detectable change is for
    blind: str | None  # a blind spot in words: the noise hides changes beyond the limit

    @property
    def change(self) -> float | None:
        return self.verdict.change if self.verdict is not None else None

    @property
    def outcome(self) -> str:
        if self.verdict is None:
            return "first save"
        return f"accepted ({self.verdict.outcome})" if self.verdict_from == "accepted" else \
            self.verdict.outcome


def tolerance_of(metric: Stored, rules: Rules) -> float:
    if metric.tolerance is not None:
        return metric.tolerance
    return 0.0 if metric.exact else rules.tolerance


def _base(s: Series, saves: list) -> Stored:
    """The stored metric as it stood before the latest save."""
    values = [v for save in saves for v in save.values]
    return replace(s.metric, value=values[-1], history=values,
                   history_saves=[len(save.values) for save in saves], samples=None,
                   relative_history=None, paced_history=None, yardstick=None, accepted=None,
                   history_save_ids=[save.id for save in saves] or None)


def _latest_save(s: Series) -> tuple[Metric, Replicates]:
    """The latest save as a run: its processes' values (a save's processes in the order a
    report holds them: the test's own first)."""
    values = s.saves[-1].values
    m = s.metric
    return (Metric(m.name, values[0], m.unit, m.better, tolerance=m.tolerance, exact=m.exact,
                   derived_from=m.derived_from), engine.processes_of(values))


def _accepted_by_latest(s: Series) -> Verdict | None:
    """The change the latest save accepted (its history restarted at the new level)."""
    if not s.accepted or not s.saves:
        return None
    last = s.accepted[-1]
    if not (last.save == s.saves[-1].id and last.save) and not (
            last.save is None and len(s.saves) == 1):
        return None
    change = relative_change(last.before, last.after)
    better = s.metric.better
    outcome = "ambiguous" if better is None else (
        "regressed" if (change > 0) == (better == "lower") else "improved")
    commit = f"commit {last.commit[:10]}" if last.commit else "commit unknown"
    return Verdict(outcome, baseline=last.before, change=change, basis=(
        f"the latest save ({last.on[:16].replace('T', ' ')}, {commit}) showed "
        f"{format_value(last.before, s.metric.unit)} -> {format_value(last.after, s.metric.unit)}"
        f" ({change:+.1%}), beyond what this machine can detect: it was accepted, and the "
        "history starts at the new level"))


def _judged_by_save(s: Series) -> bool:
    """Whether the series' verdict is its latest save's against the level before it."""
    return (s.run is None or s.run.verdict is None) and _accepted_by_latest(s) is None \
        and len(s.saves) >= 2 and all(save.values for save in s.saves)


def save_verdicts(found: list[Series], rules: Rules) -> dict[str, Verdict]:
    """The verdict of each series judged by its latest save, by Series.key: each file's latest
    saves judged as the runs they were, row by row (the metrics of a row together, the rows of
    a test together), as --hpml-compare judged them."""
    files: dict[tuple[str, str], dict[str, tuple[Record, dict[str, Stored]]]] = {}
    judged: list[tuple[Series, Record]] = []
    for s in found:
        if not _judged_by_save(s):
            continue
        current, values = _latest_save(s)
        record, base = files.setdefault((s.machine, s.profile), {}).setdefault(
            s.record_id, (Record(s.record_id, s.experiment, test=s.node), {}))
        record.metrics.append(current)
        record.replicates[s.name] = values
        base[s.name] = _base(s, s.saves[:-1])
        judged.append((s, record))
    for rows in files.values():
        judge_saves(list(rows.values()), rules)
    return {s.key: verdict for s, record in judged
            if (verdict := record.verdict(s.name)) is not None}


def figures(s: Series, rules: Rules, judged: dict[str, Verdict] | None = None) -> Figures:
    """The figures of a series: from its latest run's report where one was given, else from
    its history (the latest save against the level before it). `judged`: save_verdicts() of
    every series shown (else the series is judged as the only row of its file)."""
    values = [v for save in s.saves for v in save.values]
    counts = [len(save.values) for save in s.saves if save.values]
    tolerance = tolerance_of(s.metric, rules)
    processes = len(s.saves[-1].values) if s.saves else 1
    level = level_of(s.metric) if values else None
    latest = statistics.median(s.saves[-1].values) if s.saves and s.saves[-1].values else None
    verdict, source = None, ""
    run = s.run
    if run is not None and run.verdict is not None:
        verdict, source = run.verdict, "run"
        latest = run.values.value
    elif (accepted := _accepted_by_latest(s)) is not None:
        verdict, source = accepted, "accepted"
    elif _judged_by_save(s):
        judged = save_verdicts([s], rules) if judged is None else judged
        verdict, source = judged.get(s.key), "save"
    found, blind = None, None
    if values and s.metric.exact:
        found = tolerance
    elif values:
        n = noise_of(values, counts, s.metric, rules,
                     [save.id for save in s.saves if save.values])
        found = detectable(n, tolerance, rules.alpha, processes)
        noisy = detectable(n, 0.0, rules.alpha, processes)
        if noisy > rules.max_detectable:
            blind = blind_sentence(n, noisy, rules)
    if verdict is not None and source == "run" and verdict.mdc is not None:
        # What the latest comparison could detect, with the processes it had: the report's.
        found, blind = verdict.mdc, verdict.blind
    return Figures(level, latest, verdict, source, found, tolerance, processes, blind)
