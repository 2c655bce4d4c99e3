"""Files a run writes: the report (Markdown, JSON with every record and its samples, or CSV, by
extension), and the one way every output is written (write_atomic): the report, the dashboard
exports, the charts and the baseline file."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from pytest_hpml.plain_numbers import json_safe
from pytest_hpml.report.tables import build_tables, render
from pytest_hpml.results import Record

REPORT_SUFFIXES = (".md", ".json", ".csv")


@dataclass
class Output:
    """A file (or a folder of charts) written at the end of a run: `write` writes it and
    returns the paths it wrote; `label` names it when it cannot be written."""

    label: str
    path: Path
    write: Callable[[], list[Path]]


def write_target(path: Path) -> Path:
    """The file a write to `path` replaces: `path` itself, or the file a symlink points to
    (a link to a shared file stays a link, and the shared file is updated)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def file_mode(path: Path) -> int:
    """The mode a rewritten file keeps: its own, or the umask's for a new file."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, write: Callable[[IO[Any]], None], binary: bool = False) -> Path:
    """Write a file that no reader, crash or full disk ever sees half written: `write` fills a
    temporary file in the target's own folder (a rename never crosses file systems), which is
    flushed to disk and renamed over the target. Until the rename the previous file is intact;
    a failure removes the temporary and raises. A symlink is written through (write_target).
    The file keeps its mode. Returns the file written (a link's target where `path` is one).

    Temporaries are named .NAME.*.tmp, so the baseline store can find a killed save's orphan."""
    target = write_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = file_mode(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else
              os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)  # atomic on POSIX and Windows
    except BaseException as exc:
        # KeyboardInterrupt and SIGTERM included: drop the partial file, the old one stays.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename == tmp:
            exc.filename = str(path)  # the user named the output, not its temporary
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a power cut
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return target


def _special(path: Path) -> bool:
    """Whether `path` is, or links to, something other than a regular file or a folder."""
    if str(path).startswith(("/dev/", "/proc/")):
        return True  # /dev/stdout redirected to a file still is the run's own output
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # not there yet: a new file
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def writable_problem(path: Path, folder: bool = False) -> str | None:
    """Why `path` (a file, or a folder with folder=True) cannot be written, or None."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        if folder:
            return f"it is a symlink to {os.readlink(path)}, which does not exist"
        path = write_target(path)  # a dangling link to a file: the file is created
    if folder:
        if path.exists() and not path.is_dir():
            return "it is a file, and the option takes a folder"
        existing = path
    else:
        if path.is_dir():
            return "it is a folder, and the option takes a file name"
        if _special(path):
            # An atomic write replaces the file: pytest's own output behind /dev/stdout would
            # be lost, and a FIFO's reader would wait forever.
            return ("it is not a regular file (a terminal, a pipe, a FIFO or a device); give a "
                    "file name and read the file afterwards")
        if path.exists() and not os.access(path, os.W_OK):
            return "Permission denied"
        existing = path.parent
    while not existing.exists() and not existing.is_symlink():
        existing = existing.parent
    if existing.is_symlink() and not existing.exists():
        return f"{existing} is a symlink to {os.readlink(existing)}, which does not exist"
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"Permission denied ({existing})"
    return None
CSV_COLUMNS = ["experiment", "id", "params", "metric", "kind", "value", "unit", "better", "iqr",
               "n_samples", "processes", "baseline", "change", "verdict", "detectable", "basis",
               "source", "note", "blind_spot"]


def _csv_number(value: float | None) -> str:
    """Every digit (repr), so a CSV reader gets the value itself, not a rounded one."""
    return "" if value is None else repr(value)


def write_csv(stream: TextIO, records: list[Record]) -> None:
    """Every metric of `records`, one row each, with its verdict where it has one; `value` is
    the value the verdict rests on (the median of the processes that measured it), in the unit
    of the verdict where the baseline's was converted to it; a metric of the evidence that the
    row lacks (missing) has a row with no value."""
    writer = csv.writer(stream)
    writer.writerow(CSV_COLUMNS)
    for r in records:
        params = ";".join(f"{k}={v}" for k, v in r.params.items())
        names = [m.name for m in r.metrics] + [n for n in r.verdicts if r.metric(n) is None]
        for name in names:
            m, v = r.metric(name), r.verdicts.get(name)
            values = r.values_of(name)
            writer.writerow([r.experiment, r.id, params, name, m.kind if m else "measured",
                             repr(values.value) if m else "", m.unit if m else v.unit,
                             (m.better or "") if m else "", _csv_number(m and m.iqr),
                             len(m.samples) if m and m.samples else "",
                             len(values.values) if m and m.compared else "",
                             _csv_number(v and v.baseline), _csv_number(v and v.change),
                             v.outcome if v else "", _csv_number(v and v.mdc),
                             (v and v.basis) or "", (m and m.source) or "",
                             (m and m.note) or "", (v and v.blind) or ""])


def write_report(path: Path, records: list[Record], fingerprint: dict[str, Any], profile: str,
                 comparison: str | None = None) -> Path:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise ValueError(f"report file {path} must end in one of {REPORT_SUFFIXES}")
    if suffix == ".md":
        header = (f"# pytest-hpml report\n\nProfile: {profile}. Machine: "
                  + ", ".join(f"{k}={v}" for k, v in fingerprint.items() if v is not None)
                  + "\n\n")
        text = header + render(build_tables(records, comparison), "github")
        write_atomic(path, lambda f: f.write(text))
    elif suffix == ".json":
        document = {"fingerprint": fingerprint, "profile": profile,
                    "records": [r.to_dict() for r in records]}
        text = json.dumps(json_safe(document), indent=1, allow_nan=False)
        write_atomic(path, lambda f: f.write(text))
    else:
        write_atomic(path, lambda f: write_csv(f, records))
    return path

