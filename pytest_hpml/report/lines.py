"""Lists of lines for a summary, at most a few of each kind: a sweep of 10 000 rows printed
10 000 blind spots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Lines a summary gives one test's metric of one kind (a verdict, a blind spot) before it
#: counts the rest.
LINES_PER_METRIC = 5


def capped(lines: list[tuple[tuple[str, ...], Any]], what: str,
           where: str = "the report lists each", say: Callable[[Any], str] = str
           ) -> list[str]:
    """The lines, each with its (kind, test, metric) key, at most LINES_PER_METRIC of a key:
    the first ones, then one line that counts the others (`what` they are, `where` each is).
    Each line is what `say` puts in words: only those shown are (a sweep's thousands of rows
    of one kind)."""
    count: dict[tuple[str, ...], int] = {}
    for key, _ in lines:
        count[key] = count.get(key, 0) + 1
    shown: dict[tuple[str, ...], int] = {}
    out = []
    for key, line in lines:
        shown[key] = shown.get(key, 0) + 1
        if count[key] <= LINES_PER_METRIC or shown[key] < LINES_PER_METRIC:
            out.append(say(line))
        elif shown[key] == LINES_PER_METRIC:
            kind, test, metric = key
            out.append(f"{kind}: {test} {metric}: {count[key] - LINES_PER_METRIC + 1} more rows "
                       f"{what} ({where})")
    return out
