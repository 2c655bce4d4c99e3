"""The terminal's lines of a comparison: one per noteworthy verdict and one per blind spot,
as the comparison table shows them, a sweep's rows of one kind counted past the first few."""

from __future__ import annotations

from pytest_hpml.report.lines import capped
from pytest_hpml.report.tables import (
    BLIND_MARK,
    blind_key,
    blind_spots,
    comparison_row,
    in_table_order,
)
from pytest_hpml.results import Record, Verdict

#: The verdicts worth a line of their own in the terminal summary of a comparison.
NOTEWORTHY = ("regressed", "unconfirmed", "missing", "improved", "ambiguous")

#: A row's metric and its verdict, as the lines say them.
Judged = tuple[Record, str, Verdict]


def verdict_lines(records: list[Record]) -> list[str]:
    """One line per regressed, missing, improved or ambiguous metric (in that order), as the
    comparison table shows it: for the terminal summary of --hpml-compare without a report.
    A sweep's rows of one kind are counted past the first few (and only the lines shown are
    put in words: a 10 000-row sweep's took 0.08 s to format for the few shown)."""
    ordered = in_table_order([r for r in records
                              if any(v.outcome in NOTEWORTHY for v in r.verdicts.values())])
    # One walk of the rows, each line put with its outcome's (5 walks of a sweep's 5 000
    # noteworthy rows were half of these lines' time).
    by_outcome: dict[str, list[tuple[tuple[str, ...], Judged]]] = {
        outcome: [] for outcome in NOTEWORTHY}
    for r in ordered:
        test = r.experiment.rsplit("::", 1)[-1]
        for name, v in r.verdicts.items():
            lines = by_outcome.get(v.outcome)
            if lines is not None:
                lines.append(((v.outcome, test, name), (r, name, v)))
    return capped([line for outcome in NOTEWORTHY for line in by_outcome[outcome]],
                  "of the test too", say=_line)


def _line(judged: Judged) -> str:
    experiment, params, metric, before, now, change, outcome, detectable = \
        comparison_row(*judged)
    where = f"{experiment}[{params}]" if params else experiment
    shown = f"{before} -> {now}" if now else f"{before} -> (not recorded)"
    extra = ", ".join(x for x in (change, f"detectable {detectable}" if detectable else "")
                      if x)
    return f"{outcome}: {where} {metric}: {shown}" + (f" ({extra})" if extra else "")


def blind_spot_lines(records: list[Record]) -> list[str]:
    """One line per blind spot, for the terminal summary of a comparison without a report; a
    sweep's rows are counted past the first few."""
    return capped([(blind_key(r, name), (r, name, v)) for r, name, v in blind_spots(records)],
                  "are blind spots too", say=_blind_line)


def _blind_line(spot: Judged) -> str:
    record, name, verdict = spot
    return f"{BLIND_MARK} {record.id} {name}: {verdict.blind}"
