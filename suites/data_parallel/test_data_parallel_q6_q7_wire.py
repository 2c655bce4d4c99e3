"""Questions 6 and 7: are gradients the only messages between workers, and would it be enough to
communicate only gradients with the large batch on 4 workers?

Question 6 counts every collective's bytes by wrapping torch.distributed's functions (and the
gradient buckets from the comm hook): the parameters and buffers broadcast from rank 0 when DDP
is built, the gradients every step, and, with broadcast_buffers on (the default), the BatchNorm
buffers broadcast from rank 0 before every forward.

Question 7 turns the buffer broadcast off, so that only gradients travel: the parameters stay
identical (the gradients are), but each worker's BatchNorm running statistics follow its own
batches. How far apart they drift, and how far the workers' test accuracies, is measured; and
SyncBatchNorm, which computes the batch statistics over all workers, is timed (CUDA only).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from suites.data_parallel.figures import batchnorm_drift, gradient_bytes_per_step, training_time
from suites.data_parallel.lab import device_workers, large_batch_variants
from suites.data_parallel.ranks import buffers_synced_at_construction

pytestmark = pytest.mark.data_parallel

WORKERS = 4


def _large_batch_recipe(lab):
    """The large-batch run with linear scaling (question 4), which each worker evaluates."""
    return large_batch_variants(lab, WORKERS)["+ linear lr scaling"][1]


def _per_step(result, collective: str, epoch: int) -> float:
    return result.epoch(epoch).wire.get(collective, 0) / result.steps_per_epoch


@pytest.mark.parametrize("device, workers", device_workers((WORKERS,)))
@pytest.mark.parametrize("broadcast_buffers", [
    pytest.param("broadcast_buffers on", id="buffers_on"),
    pytest.param("broadcast_buffers off", id="buffers_off")])
@pytest.mark.hpml_pivot(index=["measured_on", "kind", "when"], columns="broadcast_buffers",
                        metrics=["bytes"], split="device")
def test_what_goes_over_the_wire(hpml, device, workers, broadcast_buffers, lab):
    hpml.experiment = "Q6: bytes on the wire by kind (per worker, large batch on 4 workers)"
    lab.skip_unless_in_profile()
    # One epoch is enough to count: every step sends the same.
    recipe = replace(_large_batch_recipe(lab), broadcast_buffers=broadcast_buffers.endswith("on"),
                     epochs=1)
    data = lab.large_batch_data()
    results = lab.train(workers, recipe, data=data)
    first = results[0]
    last = recipe.epochs
    kinds = {
        ("gradients: all_reduce (comm hook)", "per step"):
            gradient_bytes_per_step(results, last),
        ("gradients: all_reduce (wrapped)", "per step"): _per_step(first, "all_reduce", last),
        ("buffers: broadcast from rank 0", "per step"):
            _per_step(first, "_broadcast_coalesced", last),
        ("parameters + buffers: broadcast from rank 0", "at construction"):
            first.construction_bytes.get("_broadcast_coalesced", 0),
        ("buffers: broadcast from rank 0", "first evaluation forward"):
            first.evaluation_bytes.get("_broadcast_coalesced", 0),
    }
    sizes = {("model's parameters (fp32)", "size, for comparison"): first.parameter_bytes,
             ("model's buffers (BatchNorm statistics, counters)", "size, for comparison"):
             first.buffer_bytes}
    for (kind, when), nbytes in {**kinds, **sizes}.items():
        with hpml.row(kind=kind, when=when) as row:
            lab.describe(row, results, data, note=lab.scale.large_batch_note)
            if (kind, when) in sizes:
                row.setting("bytes", nbytes, unit="B")
            else:
                row.record("bytes", nbytes, unit="B", better=None, exact=True)

    # The two counts of the gradients agree, and they are the parameters, fp32, once per step.
    assert kinds[("gradients: all_reduce (wrapped)", "per step")] == first.parameter_bytes
    assert gradient_bytes_per_step(results, last) == first.parameter_bytes
    # At construction rank 0 sends its parameters (and its buffers, with this torch); then
    # only the buffers, before every forward, if asked.
    at_construction = first.parameter_bytes + (
        first.buffer_bytes if buffers_synced_at_construction(recipe.broadcast_buffers) else 0)
    assert first.construction_bytes["_broadcast_coalesced"] == at_construction
    expected_buffers = first.buffer_bytes if recipe.broadcast_buffers else 0
    assert kinds[("buffers: broadcast from rank 0", "per step")] == expected_buffers


def _variants(lab, device: str) -> dict[str, object]:
    on = _large_batch_recipe(lab)
    variants = {"gradients + buffers (broadcast_buffers on)": on,
                "gradients only (broadcast_buffers off)": replace(on, broadcast_buffers=False)}
    if device == "cuda":  # torch's SyncBatchNorm has CUDA kernels only
        variants["gradients only + SyncBatchNorm"] = replace(on, broadcast_buffers=False,
                                                             sync_batchnorm=True)
    return variants


@pytest.mark.parametrize("device, workers", device_workers((WORKERS,)))
def test_only_gradients_with_the_large_batch(hpml, device, workers, lab):
    hpml.experiment = ("Q7: only gradients on the wire? BatchNorm drift between workers "
                       "(large batch on 4 workers)")
    lab.skip_unless_in_profile()
    data = lab.large_batch_data()
    for name, recipe in _variants(lab, device).items():
        results = lab.train(workers, recipe, data=data)
        accuracies = [100 * r.eval_accuracy for r in results]
        with hpml.row(variant=name) as row:
            lab.describe(row, results, data, note=lab.scale.large_batch_note)
            row.record("batchnorm_drift", 100 * batchnorm_drift(results), unit="%",
                       note="batchnorm_drift: largest ||stats_rank - stats_rank0|| / "
                       "||stats_rank0|| of a BatchNorm layer's running mean and variance, "
                       "after training and the first evaluation forward", better="lower")
            row.param(scored_on=f"{data.eval_split} images")
            row.record("eval_accuracy_mean", sum(accuracies) / workers, unit="%",
                       better="higher", note="eval_accuracy: each worker's model in eval mode, "
                       "with its own BatchNorm running statistics")
            row.record("eval_accuracy_spread", max(accuracies) - min(accuracies), unit="%",
                       note="eval_accuracy_spread: best - worst worker", better="lower")
            row.record("training_time", training_time(results, recipe.epochs), unit="s",
                       better="lower", note="training_time: the last epoch's steps")
            lab.note_step_times(row, "training_time")
            wire = results[0].epoch(recipe.epochs).wire
            row.record("bytes_per_step", sum(wire.values()) / results[0].steps_per_epoch,
                       unit="B", better=None, exact=True)
        # Gradients alone keep the parameters identical on every worker in every variant.
        assert len({r.parameters_digest for r in results}) == 1
        identical_buffers = len({r.buffers_digest for r in results}) == 1
        if recipe.broadcast_buffers:  # the first evaluation forward sent rank 0's statistics
            assert identical_buffers
        elif recipe.sync_batchnorm:  # every worker normalized with the global batch's statistics
            assert batchnorm_drift(results) < 1e-5
        else:  # the premise of the question: left alone, the statistics part ways
            assert not identical_buffers
    if device == "cpu":
        row.annotate("bytes_per_step", "SyncBatchNorm is measured on GPUs only: torch's "
                     "SyncBatchNorm has no CPU kernels")
