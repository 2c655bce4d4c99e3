"""The baseline store's scratch files beside the baselines: the lock a save holds for its
whole merge (so two jobs saving into one folder serialize), the temporaries a killed save left,
and the .gitignore that keeps both out of a team's commits."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX file locks; elsewhere saves are atomic but not serialized
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the baseline file's lock file, held for the whole merge."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    lock = path.with_name(f".{path.name}.lock")
    ignore_scratch(path.parent)
    with open(lock, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


#: What the store leaves beside the baseline files and a team never commits (the folder is
#: often a git branch that a CI job adds with `git add -A`).
SCRATCH_IGNORE = ("# pytest-hpml's lock and temporary files, never committed\n"
                  ".*.json.lock\n.*.json.*.tmp\n")


def ignore_scratch(folder: Path) -> None:
    """A .gitignore for the store's own scratch files, where the folder has none (one the team
    wrote is theirs and left as it is)."""
    ignore = folder / ".gitignore"
    if not ignore.exists():
        with contextlib.suppress(OSError):  # a read-only .gitignore place costs only this
            ignore.write_text(SCRATCH_IGNORE, encoding="utf-8")


def clean_stale_temporaries(path: Path) -> list[Path]:
    """Temporaries of this file left by a killed save. Only a save holding the lock writes
    one, and it holds the lock now, so every one found is an orphan."""
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed
