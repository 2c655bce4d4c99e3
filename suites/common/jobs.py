"""The labs under torchrun or srun: every rank runs the whole session, and a distributed run is
the job's own (pytest_hpml.distributed.run_distributed joins the job's ranks). A test that needs
a run of another number of ranks skips, on every rank alike, saying why."""

from __future__ import annotations

import pytest

from pytest_hpml.distributed import current_job


def job_world_size() -> int | None:
    """The ranks of the torchrun or srun job this process is a rank of (None: no such job)."""
    job = current_job()
    return job.world_size if job is not None and job.world_size > 1 else None


def skip_unless_the_job_has(world_size: int) -> None:
    ranks = job_world_size()
    if ranks is not None and world_size != ranks:
        pytest.skip(f"needs a run of {world_size} rank(s); this job has {ranks}, each running "
                    "the whole session: run it without torchrun or srun, or in a job of "
                    f"{world_size}")
