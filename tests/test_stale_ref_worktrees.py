"""A run killed during --hpml-compare-ref (SIGKILL) left its worktree registered, and `git
worktree prune` keeps it while its folder exists (issue 31 item 9): the next run removes the
hpml worktrees whose run is gone, and keeps a concurrent run's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hpml_testing import git

from pytest_hpml.compare import reference


def _left_by(repo: Path, pid: int | None) -> Path:
    """A worktree as a run leaves it when killed: registered, its folder there."""
    folder = Path(tempfile.mkdtemp(prefix="hpml-ref-"))
    if pid is not None:
        (folder / "hpml-owner.pid").write_text(str(pid))  # reference.OWNER
    git(repo, "worktree", "add", "--detach", "--quiet", str(folder / repo.name), "HEAD")
    return folder


def test_the_worktrees_of_killed_runs_are_removed_at_start(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "a.txt").write_text("a")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed, older, running = (_left_by(repo, dead.pid), _left_by(repo, None),
                              _left_by(repo, os.getpid()))
    try:
        worktree = reference.Worktree(reference.resolve("HEAD", repo))
        worktree.remove()
        listed = git(repo, "worktree", "list", "--porcelain")
        assert str(killed) not in listed and not killed.exists()
        assert str(older) not in listed and not older.exists()
        assert str(running / repo.name) in listed and running.exists()  # a concurrent run's
    finally:
        git(repo, "worktree", "remove", "--force", str(running / repo.name))
        shutil.rmtree(running, ignore_errors=True)
