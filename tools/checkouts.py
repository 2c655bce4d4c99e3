"""The plugin as it was at a git revision, beside the one in this checkout: a worktree the
tools put first on PYTHONPATH to measure both in the same trials."""

from __future__ import annotations

import atexit
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(out: Path, rev: str) -> Path:
    """A git worktree of this repository at `rev` under `out`: the plugin as it was then,
    removed (and unregistered) when the tool exits, so that `git worktree list` shows none of
    the tools' checkouts left behind."""
    tree = out / f"pytest-hpml-{rev}"
    if not tree.exists():
        out.mkdir(parents=True, exist_ok=True)
        # A worktree of an earlier run whose folder was removed is still registered.
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                       check=True, capture_output=True)
    atexit.register(subprocess.run, ["git", "worktree", "remove", "--force", str(tree)],
                    cwd=ROOT, capture_output=True)
    return tree
