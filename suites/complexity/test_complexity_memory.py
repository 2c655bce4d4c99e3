"""Q2: actual memory of one training step (SGD with momentum) against the theoretical parameter
memory, and what the rest is: gradients, optimizer state, activations. The CUDA peak reader is
checked on any machine against fake torch.cuda counters."""

import pytest
import torch

from suites.complexity import memory
from suites.complexity.memory import measure_step_memory
from suites.complexity.models import build_model, image_size, num_classes, parameter_bytes
from suites.complexity.sizes import MEMORY_BATCHES, MEMORY_MODELS

pytestmark = pytest.mark.complexity


@pytest.mark.hpml_sweep("model", **MEMORY_MODELS)
@pytest.mark.hpml_sweep("batch", **MEMORY_BATCHES)
def test_training_step_memory(hpml, device: str, model: str, batch: int) -> None:
    hpml.experiment = "Training-step memory: actual vs theoretical (SGD, momentum 0.9)"
    size = image_size(model)
    hpml.param(image=size)
    # Out of memory at this batch size is a finding (recorded, and a later run that no longer
    # fits regresses from it), not a crash.
    with hpml.catch_out_of_memory() as oom:
        net = build_model(model, hpml.device)
        images = torch.randn(batch, 3, size, size, device=hpml.device)
        labels = torch.randint(0, num_classes(model), (batch,), device=hpml.device)
        step = measure_step_memory(net, images, labels)
    if oom.happened:
        return
    theoretical = parameter_bytes(net)
    hpml.param(method=step.method)
    hpml.record("theoretical", theoretical, unit="B", note="theoretical: parameters x 4 B",
                better=None, exact=True)
    hpml.record("actual_peak", step.peak, unit="B", better="lower")
    hpml.record("actual_over_theoretical", step.peak / theoretical, better="lower")
    hpml.record("parameters", step.parameters, unit="B", better=None, exact=True)
    hpml.record("gradients", step.gradients, unit="B", better=None, exact=True)
    hpml.record("optimizer_state", step.optimizer_state, unit="B", better=None, exact=True)
    hpml.record("activations", step.activations, unit="B", better="lower")
    hpml.record("batch_data", step.batch, unit="B", better=None, exact=True)
    hpml.record("unattributed", step.unattributed, unit="B",
                note="peak - parts: < 0 when gradients and activations are not all live at once",
                better=None)

    assert step.parameters == theoretical
    assert step.gradients == step.parameters  # one gradient per parameter after backward
    assert step.optimizer_state == step.parameters  # one momentum buffer per parameter
    # At the end of the forward pass every activation is live beside the weights and the
    # momentum buffers; at the end of backward, every gradient is. The peak covers both moments.
    resident = step.parameters + step.optimizer_state + step.batch
    assert step.peak >= resident + step.activations
    assert step.peak >= resident + step.gradients


class FakeCudaCounters:
    """torch.cuda's allocator counters for one device: current and peak bytes, a log of calls."""

    def __init__(self, allocated: int, stale_peak: int):
        self.allocated, self.peak = allocated, stale_peak
        self.log: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("synchronize", "reset_peak_memory_stats", "memory_allocated",
                     "max_memory_allocated"):
            monkeypatch.setattr(memory.torch.cuda, name, getattr(self, name))

    def synchronize(self, device=None) -> None:
        self.log.append(f"synchronize {device}")

    def reset_peak_memory_stats(self, device=None) -> None:
        self.log.append(f"reset {device}")
        self.peak = self.allocated

    def memory_allocated(self, device=None) -> int:
        self.log.append(f"allocated {device}")
        return self.allocated

    def max_memory_allocated(self, device=None) -> int:
        self.log.append(f"peak {device}")
        return self.peak

    def step(self, *sizes: int) -> None:
        """Allocate (> 0) and free (< 0) in order, as a training step does."""
        self.log.append("step")
        for size in sizes:
            self.allocated += size
            self.peak = max(self.peak, self.allocated)


def test_cuda_peak_is_the_step_high_water_mark_above_its_start(monkeypatch):
    # 3 GB left alive by earlier tests, and a 9 GB peak from one of them that must not count.
    counters = FakeCudaCounters(allocated=3_000, stale_peak=9_000)
    counters.install(monkeypatch)
    device = torch.device("cuda", 1)
    peak = memory._cuda_peak_allocated(lambda: counters.step(+500, +700, -400, +100), device)
    assert peak == 1_200  # 3_000 + 500 + 700 is the high-water mark, 1_200 above the start
    assert counters.log == [f"synchronize {device}", f"reset {device}", f"allocated {device}",
                            "step", f"synchronize {device}", f"peak {device}"]
