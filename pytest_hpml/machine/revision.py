"""The commit a run measured: what a baseline save records beside its date, so that a point of a
metric's history (and a level a save accepted) says which code it came from.

A CI job names its commit in the environment (its checkout may be shallow, detached, or not a
git repository at all, such as a downloaded artifact); elsewhere the run's root directory is
asked with `git rev-parse HEAD`. Nothing found is None: the save is kept all the same, its
commit unknown.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

#: Variables CI services set to the commit under test, the most common first.
CI_COMMIT_VARIABLES = (
    "GITHUB_SHA",  # GitHub Actions
    "CI_COMMIT_SHA",  # GitLab CI
    "BUILDKITE_COMMIT",  # Buildkite
    "CIRCLE_SHA1",  # CircleCI
    "BUILD_SOURCEVERSION",  # Azure Pipelines
    "BITBUCKET_COMMIT",  # Bitbucket Pipelines
    "DRONE_COMMIT_SHA",  # Drone, Woodpecker
    "TRAVIS_COMMIT",  # Travis CI
    "GIT_COMMIT",  # Jenkins' git plugin
)
#: A full object name: SHA-1 (40 hex digits) or, in a SHA-256 repository, 64.
FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

Run = Callable[..., subprocess.CompletedProcess]


def full_sha(text: str | None) -> str | None:
    """`text` as a full commit name (lower case), None when it is not one (a branch name, an
    abbreviated hash, an empty variable)."""
    if not text:
        return None
    text = text.strip().lower()
    return text if FULL_SHA.fullmatch(text) else None


def from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if environ is None else environ
    for name in CI_COMMIT_VARIABLES:
        found = full_sha(environ.get(name))
        if found:
            return found
    return None


def from_git(rootdir: Path, run: Run = subprocess.run) -> str | None:
    """HEAD of the git repository holding `rootdir`; None outside one, or without git."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        out = run([git, "-C", str(rootdir), "rev-parse", "--verify", "-q", "HEAD"],
                  capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return full_sha(out.stdout) if out.returncode == 0 else None


def tree_is_clean(rootdir: Path, leave_out: Path | None = None,
                  run: Run = subprocess.run) -> bool:
    """Whether the tracked files of the git repository holding `rootdir` are as HEAD has them
    (untracked files, and `leave_out`, the baselines folder a save writes, aside): only then
    does HEAD name the code a run measured. False outside a repository or without git."""
    git = shutil.which("git")
    if git is None:
        return False
    pathspec = ["--", "."]
    left_out = Path(leave_out).resolve() if leave_out is not None else None
    if left_out is not None and left_out.is_relative_to(Path(rootdir).resolve()):
        # Only a folder under rootdir can be left out: git refuses a pathspec outside the
        # repository (status 128), and a baselines folder elsewhere (another checkout, the
        # baseline branch's) made every tree read as dirty. One outside "." is left out already.
        pathspec.append(f":(exclude){left_out}")
    try:
        out = run([git, "-C", str(rootdir), "status", "--porcelain", "--untracked-files=no",
                   *pathspec], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and not out.stdout.strip()


def current_commit(rootdir: Path, environ: Mapping[str, str] | None = None,
                   run: Run = subprocess.run) -> str | None:
    """The commit this run measured: the CI's variable, else git's HEAD at `rootdir`, else
    None."""
    return from_environment(environ) or from_git(Path(rootdir), run)
