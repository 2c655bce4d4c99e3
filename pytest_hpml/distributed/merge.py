"""The records of one test from every rank of a job, as one set: what rank 0 judges, reports
and saves.

Every rank runs the same test, so every rank makes the same rows. Where the ranks agree on a
metric (a figure computed from results every rank gathered, a count, a setting) the job's value
is that value, and a job's records are those of a single process with the same numbers: the
same verdicts. Where they differ (each rank timed its own part), the job's value is the worst
rank's by the metric's direction, as a data-parallel step takes as long as its slowest rank: the
longest time, the lowest rate, with that rank's samples and yardstick as its evidence. A metric
without a direction keeps the lowest rank's value. Rows only some ranks made are kept as made.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from pytest_hpml.results import Metric, Record


def _worst(metrics: list[tuple[int, Metric]]) -> tuple[int, Metric]:
    better = metrics[0][1].better
    if better == "lower":
        return max(metrics, key=lambda rm: (rm[1].value, -rm[0]))
    if better == "higher":
        return min(metrics, key=lambda rm: (rm[1].value, rm[0]))
    return metrics[0]


def _note(metric: Metric, ranks: int) -> str:
    worst = {"lower": "the highest", "higher": "the lowest"}.get(metric.better or "",
                                                                "the lowest rank's")
    return (f"{metric.name}: the ranks of the job measured different values; {worst} of "
            f"{ranks} ranks")


def merge_metrics(per_rank: list[tuple[int, Metric]], ranks: int) -> Metric:
    """One metric from the same metric of several ranks (rank order)."""
    first = per_rank[0][1]
    if all(m.value == first.value and m.unit == first.unit for _, m in per_rank[1:]):
        return copy.deepcopy(first)
    _, chosen = _worst(per_rank)
    merged = copy.deepcopy(chosen)
    merged.note = _note(chosen, ranks)
    return merged


def merge_ranks(by_rank: Mapping[int, list[Record]]) -> list[Record]:
    """The job's records of one test: rows in rank 0's order (then rows only later ranks
    made), each metric merged across the ranks that recorded it."""
    ranks = sorted(by_rank)
    rows: dict[str, list[tuple[int, Record]]] = {}
    for rank in ranks:
        for record in by_rank[rank]:
            rows.setdefault(record.id, []).append((rank, record))
    merged = []
    for made in rows.values():
        row = copy.deepcopy(made[0][1])
        names: dict[str, list[tuple[int, Metric]]] = {}
        for rank, record in made:
            for metric in record.metrics:
                names.setdefault(metric.name, []).append((rank, metric))
        row.metrics = [merge_metrics(per_rank, len(ranks)) for per_rank in names.values()]
        for rank, record in made[1:]:
            row.warnings += [f"rank {rank}: {w}" for w in record.warnings
                             if w not in row.warnings]
        merged.append(row)
    return merged
