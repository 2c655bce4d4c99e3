"""Comparison with a base git ref measured now (--hpml-compare-ref=REF): the test runs at REF
and at the working tree in fresh processes, interleaved, on the same machine, and gets the
verdicts of a stored-baseline comparison with no stored baseline involved: the drift between a
save and the check is gone (both sides are measured on one occasion), and a pull request
cannot tamper with a stored number.

REF is checked out with `git worktree add --detach` into a temporary folder, removed at the end
of the run (a run killed outright leaves it to the next run, which removes the hpml worktrees
whose run is gone: `git worktree prune` keeps one whose folder exists). A process
at REF is the same pytest command as any fresh process of the run (pytest_hpml.rerun), forked
from the same forkserver, with everything that names the repository moved into the worktree:

- its folder, --rootdir, the configuration file (-c) and the node id's file: the worktree's;
- the import path: the worktree's rootdir and its src/ first (src layouts, and packages at the
  root), then this run's path with every entry inside the repository moved into the worktree.
  An editable install of the project points into the checkout, by a path entry (a .pth file)
  or by a finder placed after the path; either way the worktree's copy, earlier on the path,
  is the one imported. PYTHONPATH is moved the same way, for processes the test starts;
- a path inside the repository that the worktree lacks (untracked: data, build outputs,
  compiled extensions) is left as it is, shared by both sides.

The harness is this run's on both sides: the plugin, pytest and torch are imported by the
forkserver before either side forks, so a repository that holds its own pytest plugin measures
its code at REF with this run's plugin. Submodules are not checked out at REF.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_hpml.results import Record


class RefError(Exception):
    """A ref that cannot be measured; the message says what to give instead."""


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=600)
    except FileNotFoundError:
        raise RefError("git is not installed (or not on PATH): --hpml-compare-ref needs it") \
            from None
    if done.returncode != 0:
        raise RefError((done.stderr or done.stdout).strip().splitlines()[-1:][0]
                       if (done.stderr or done.stdout).strip() else f"git {args[0]} failed")
    return done.stdout.strip()


@dataclass(frozen=True)
class Ref:
    """REF as given, the commit it names and the repository it is in."""

    name: str
    commit: str
    top: Path  # the repository's top folder (the checkout this run measures)

    @property
    def short(self) -> str:
        return self.commit[:10]


def resolve(name: str, start: Path) -> Ref:
    """The commit `name` names in the repository holding `start`; RefError where there is
    none."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], Path(start))).resolve()
    except RefError as exc:
        raise RefError(f"--hpml-compare-ref={name}: {start} is not inside a git repository "
                       f"({exc}); run from the repository whose base you compare with") from None
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], top)
    except RefError:
        raise RefError(f"--hpml-compare-ref={name}: no commit of that name in {top}; give a "
                       "branch, a tag or a commit (git log --oneline shows them; a remote "
                       "branch may need git fetch first)") from None
    return Ref(name, commit, top)


#: The file beside a worktree that names the process of the run that made it.
OWNER = "hpml-owner.pid"


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (ProcessLookupError, ValueError, FileNotFoundError):
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def remove_stale_worktrees(top: Path) -> None:
    """The worktrees a killed run left (its folder still there, so `git worktree prune` keeps
    them): each hpml-ref-* worktree whose owning process is gone is removed; a concurrent
    run's is kept."""
    with contextlib.suppress(RefError):
        listing = _git(["worktree", "list", "--porcelain"], top)
        for line in listing.splitlines():
            path = Path(line.removeprefix("worktree ")) if line.startswith("worktree ") else None
            if path is None or not path.parent.name.startswith("hpml-ref-"):
                continue
            if (path.parent / OWNER).exists() and _alive(path.parent / OWNER):
                continue
            with contextlib.suppress(RefError):
                _git(["worktree", "remove", "--force", str(path)], top)
            shutil.rmtree(path.parent, ignore_errors=True)
        _git(["worktree", "prune"], top)


class Worktree:
    """REF checked out in a temporary folder, until `remove()`."""

    def __init__(self, ref: Ref) -> None:
        self.ref = ref
        remove_stale_worktrees(ref.top)
        self.folder = Path(tempfile.mkdtemp(prefix="hpml-ref-"))
        (self.folder / OWNER).write_text(str(os.getpid()))
        self.path = self.folder / ref.top.name
        try:
            _git(["worktree", "add", "--detach", "--quiet", str(self.path), ref.commit],
                 ref.top)
        except RefError as exc:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise RefError(f"--hpml-compare-ref={ref.name}: cannot check out {ref.short} "
                           f"into {self.path}: {exc}") from None

    def remove(self) -> None:
        with contextlib.suppress(RefError):
            _git(["worktree", "remove", "--force", str(self.path)], self.ref.top)
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(RefError):
            _git(["worktree", "prune"], self.ref.top)


@dataclass(frozen=True)
class Mapping:
    """Paths of the checkout and their places in the worktree."""

    top: Path  # the checkout's top folder
    tree: Path  # the worktree's

    def moved(self, path: str | Path) -> str:
        """`path` in the worktree where it is inside the checkout and the worktree has it;
        otherwise as it was (outside the repository, or untracked)."""
        text = str(path)
        if not os.path.isabs(text):
            return text
        try:
            inside = Path(text).resolve().relative_to(self.top)
        except ValueError:
            return text
        there = self.tree / inside
        return str(there) if there.exists() else text

    def argument(self, arg: str) -> str:
        """A pytest argument with the path it holds moved: a path, a path with a node id
        (file.py::test), or an option's value after '='."""
        flag, eq, value = arg.partition("=")
        if eq and flag.startswith("-"):
            return f"{flag}={self.argument(value)}"
        path, sep, node = arg.partition("::")
        return self.moved(path) + sep + node

    def import_path(self, entries: list[str], rootdir: Path) -> list[str]:
        """The import path of a process at REF: the worktree's rootdir and src/ first, then
        `entries` moved."""
        root = Path(self.moved(rootdir))
        first = [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
        out: list[str] = []
        for entry in [*first, *(self.moved(e) if e else e for e in entries)]:
            if entry not in out:
                out.append(entry)
        return out


def ref_environment(environ: dict[str, str], mapping: Mapping, rootdir: Path
                    ) -> dict[str, str]:
    """The environment of a process at REF: PYTHONPATH moved (for what the test starts)."""
    given = [e for e in environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    return {**environ, "PYTHONPATH": os.pathsep.join(mapping.import_path(given, rootdir))}


def rows_only_at_ref(processes: list[list[Record]], made: set[str]) -> list[Record]:
    """Rows the processes at REF made and the working tree did not, without their metrics."""
    out: dict[str, Record] = {}
    for records in processes:
        for record in records:
            if record.id not in made and record.id not in out:
                out[record.id] = Record(record.id, record.experiment, dict(record.params),
                                        order=list(record.order), test=record.test)
    return list(out.values())
