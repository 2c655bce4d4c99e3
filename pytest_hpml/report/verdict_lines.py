"""The terminal's lines of a comparison: one per noteworthy verdict and one per blind spot,
as the comparison table shows them, a sweep's rows of one kind counted past the first few."""

from __future__ import annotations

from pytest_hpml.report.lines import capped
from pytest_hpml.report.tables import BLIND_MARK, blind_key, blind_spots, comparison_rows
from pytest_hpml.results import Record

#: The verdicts worth a line of their own in the terminal summary of a comparison.
NOTEWORTHY = ("regressed", "unconfirmed", "missing", "improved", "ambiguous")


def verdict_lines(records: list[Record]) -> list[str]:
    """One line per regressed, missing, improved or ambiguous metric (in that order), as the
    comparison table shows it: for the terminal summary of --hpml-compare without a report.
    A sweep's rows of one kind are counted past the first few."""
    rows = comparison_rows(records)
    lines = []
    for outcome in NOTEWORTHY:
        for experiment, params, metric, before, now, change, verdict, detectable in rows:
            if verdict != outcome:
                continue
            where = f"{experiment}[{params}]" if params else experiment
            shown = f"{before} -> {now}" if now else f"{before} -> (not recorded)"
            extra = ", ".join(x for x in (change, f"detectable {detectable}" if detectable
                                          else "") if x)
            lines.append(((outcome, experiment, metric), f"{outcome}: {where} {metric}: {shown}"
                          + (f" ({extra})" if extra else "")))
    return capped(lines, "of the test too")


def blind_spot_lines(records: list[Record]) -> list[str]:
    """One line per blind spot, for the terminal summary of a comparison without a report; a
    sweep's rows are counted past the first few."""
    return capped([(blind_key(r, name), f"{BLIND_MARK} {r.id} {name}: {blind}")
                   for r, name, blind in blind_spots(records)], "are blind spots too")
