"""Rows a baseline holds that this run did not make: nothing that was measured before may
disappear from a comparison without a word.

Each stored row knows the node id of the test that made it. Against what a run collected and
ran, a stored row is
- vanished: its test ran and did not make it (an early return, a branch, a row no longer
  recorded): missing, and the test fails the comparison;
- dropped by a sweep: its test function is still collected but not with these parameters (a
  value left the sweep list): missing, and the run fails the comparison;
- not in this suite: its test function (or its whole file) is gone: said once; a save drops
  it only with --hpml-prune-baseline;
- out of scope: its file was not selected (paths given on the command line): not judged.
A run narrowed to part of a file's tests (node ids, -k, -m, --deselect, --lf, a shard) judges
only the rows of the tests it ran; a save prunes only on a run of the whole suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def function_of(nodeid: str) -> str:
    """'tests/test_a.py::test_f' of 'tests/test_a.py::test_f[3-cpu]'."""
    return nodeid.split("[", 1)[0]


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@dataclass
class Gone:
    """The stored rows this run did not make, by what became of their tests."""

    vanished: list[str] = field(default_factory=list)
    dropped_by_sweep: list[str] = field(default_factory=list)
    not_in_suite: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """Rows that fail a comparison: their test, or its function, still runs."""
        return self.vanished + self.dropped_by_sweep

    @property
    def all(self) -> list[str]:
        return self.vanished + self.dropped_by_sweep + self.not_in_suite


def rows_by_test(stored: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """The ids of the stored rows by the node id of the test that made them (read once per
    run, so each test's check is a lookup)."""
    found: dict[str, list[str]] = {}
    for rid, data in sorted(stored.items()):
        if data.get("test"):
            found.setdefault(data["test"], []).append(rid)
    return found


def gone_rows(stored: dict[str, dict[str, Any]], collected: Iterable[str], ran: Iterable[str],
              produced: Iterable[str], file_exists: Callable[[str], bool],
              complete: bool) -> Gone:
    """Classify the stored rows (id -> stored record) this run did not make. `collected` and
    `ran` are node ids, `produced` row ids; `complete` is False for a run narrowed by -k, -m,
    --deselect or --lf, where only the tests that ran are judged."""
    collected, ran, produced = set(collected), set(ran), set(produced)
    functions = {function_of(n) for n in collected}
    files = {file_of(n) for n in collected}
    gone = Gone()
    for rid, data in sorted(stored.items()):
        test = data.get("test")
        if not test or rid in produced:
            continue  # rows of old baselines (no test recorded), and rows this run made
        if test in ran:
            gone.vanished.append(rid)
        elif not complete or test in collected:
            continue  # deselected, or collected and not run (skipped, stopped by -x)
        elif function_of(test) in functions:
            gone.dropped_by_sweep.append(rid)
        elif file_of(test) in files or not file_exists(file_of(test)):
            gone.not_in_suite.append(rid)
    return gone


def narrowing(option: Any, args: Iterable[str], deselected: int) -> list[str]:
    """How the run selected part of the tests of the paths it collected, in words (empty when
    it ran them all): node ids on the command line, -k, -m, --deselect, --lf, --hpml-shard, or
    tests another plugin deselected. Such a run judges only the rows of the tests it ran."""
    reasons = []
    ids = [a for a in args if "::" in a]
    if ids:
        reasons.append(f"node id {ids[0]}" + (f" and {len(ids) - 1} more" if len(ids) > 1
                                              else ""))
    for flag, value in (("-k", getattr(option, "keyword", "")),
                        ("-m", getattr(option, "markexpr", ""))):
        if value:
            reasons.append(f"{flag} {value!r}")
    if getattr(option, "deselect", None):
        reasons.append("--deselect")
    if getattr(option, "lf", False):
        reasons.append("--lf")
    shard = getattr(option, "hpml_shard", None)
    if shard:
        reasons.append(f"--hpml-shard={shard[0]}/{shard[1]}")
    if deselected and not reasons:
        reasons.append(f"{deselected} test(s) deselected")
    return reasons


def path_narrowing(args: Iterable[str], whole: Iterable[Path], cwd: Path) -> list[str]:
    """The paths given on the command line that leave out part of the suite (`whole`: the
    folders a run without paths collects, testpaths or the invocation folder): such a run
    judges the files it collected, and never prunes the rest."""
    given = [Path(cwd, a.split("::", 1)[0]).resolve() for a in args]
    roots = [Path(w).resolve() for w in whole]
    if not given or all(any(r == g or g in r.parents for g in given) for r in roots):
        return []
    return ["paths " + " ".join(a.split("::", 1)[0] for a in args)]
