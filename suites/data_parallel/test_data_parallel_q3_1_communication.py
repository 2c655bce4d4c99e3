"""Question 3.1: how much of an epoch on 2 and 4 workers is computation and how much is
communication?

Measured, not inferred: the comm hook times every gradient bucket's all-reduce (the time some
all-reduce is in flight is the communication), the same steps run again under DDP's no_sync
give the computation alone (copy, forward, backward, update), and their difference is the
communication the workers actually waited for (exposed); the rest was overlapped with backward.
"""

from __future__ import annotations

import pytest

from suites.data_parallel.figures import (
    PUBLISHED_COMMUNICATION_NOTE,
    PUBLISHED_COMPUTE_COMMUNICATION,
    PUBLISHED_SOURCE,
    compute_vs_communication,
    gradient_bytes_per_step,
)
from suites.data_parallel.lab import MULTI_WORKERS, batch_per_worker_sweep, device_workers

pytestmark = pytest.mark.data_parallel


@pytest.mark.parametrize("device, workers", device_workers(MULTI_WORKERS))
@batch_per_worker_sweep
@pytest.mark.hpml_pivot(index=["measured_on", "workers"], columns="batch",
                        metrics=["compute", "communication", "exposed", "overlapped_share"],
                        split="device")
def test_compute_vs_communication(hpml, device, workers, batch, lab):
    hpml.experiment = "Q3.1: compute vs communication per epoch (batch per worker)"
    lab.skip_unless_in_profile(workers)
    results = lab.train(workers, lab.recipe(batch_per_worker=batch, compute_only_epoch=True))
    lab.describe(hpml, results)
    split = compute_vs_communication(results, epoch=2)
    hpml.record("compute", split.compute, unit="s", better="lower",
                note="compute: the epoch's steps under no_sync (no gradient all-reduce)")
    hpml.record("communication", split.communication, unit="s", better="lower",
                note="communication: time a gradient all-reduce was in flight (comm hook), on "
                "the worker that waited least for its peers")
    hpml.record("exposed", split.exposed, unit="s", better="lower",
                note="exposed: what the all-reduce added to the steps (synchronized - no_sync); "
                "it can exceed communication, since a synchronized step also waits for the "
                "slowest worker, and two epochs on shared cores differ by their noise")
    hpml.record("overlapped_share", 100 * split.overlapped_share, unit="%", better="higher",
                note="overlapped_share: communication hidden behind backward")
    hpml.record("synchronized", split.synchronized, unit="s", better="lower")
    lab.note_step_times(hpml, "compute")
    hpml.setting("steps", split.steps)
    if batch in PUBLISHED_COMPUTE_COMMUNICATION:
        compute, loader = PUBLISHED_COMPUTE_COMMUNICATION[batch][workers]
        with hpml.row(measured_on="published: seed report 001 (GPUs)") as ref:
            ref.reference("compute", compute, unit="s", source=PUBLISHED_SOURCE)
            ref.reference("communication", loader, unit="s", source=PUBLISHED_SOURCE,
                          note=PUBLISHED_COMMUNICATION_NOTE)

    # What the hook timed is the gradients: every parameter's, once per step, on every rank.
    assert gradient_bytes_per_step(results, 2) == results[0].parameter_bytes
    # Under no_sync nothing was all-reduced (neither the hook nor the wrapped collectives saw
    # any): the compute-only epoch really had no gradient communication.
    for r in results:
        compute_only = r.epoch(2, synchronized=False)
        assert not any(compute_only.bucket_bytes) and not compute_only.wire.get("all_reduce")
    assert split.communication > 0
