"""The instruments checked on known answers: the clocks (the CUDA one on a fake GPU stream: its
busy-wait, and the all-reduce sweep timing the collectives rather than the host queueing them),
the union of bucket intervals, the timed comm hook against a plain all-reduce, the collective
counter, the ring model, the learning-rate schedule, the cross-rank figures, the loader, the
narrow ResNet-18 and the out-of-memory path of the launcher."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from pytest_hpml import Timing
from pytest_hpml.distributed import DistributedError
from suites.common.data import synthetic
from suites.common.models import RESNET18_CIFAR_PARAMETERS, resnet18_cifar
from suites.complexity.models import basic_block_resnet_parameters
from suites.data_parallel import ranks
from suites.data_parallel.config import Recipe, learning_rate
from suites.data_parallel.figures import (
    algbw,
    batchnorm_drift,
    bus_factor,
    busbw,
    communication_steps,
    compute_vs_communication,
    fit_ring_model,
    gap_closed,
    imbalance,
    ring_allreduce_time,
    slowest_steps,
    sweep_sizes,
)
from suites.data_parallel.instruments import (
    AllReduceTimer,
    CudaEventClock,
    HostClock,
    WireCounter,
    covered,
    time_back_to_back,
    timed_allreduce_hook,
)
from suites.data_parallel.lab import GPU_STEP_TIMES_NOTE, Lab, device_workers, launch
from suites.data_parallel.ranks import RankResult, is_out_of_memory
from suites.data_parallel.training import EpochRecord, make_loader

pytestmark = pytest.mark.data_parallel


# -- clocks ---------------------------------------------------------------------------------------

class FakeGpu:
    """One CUDA stream in miniature, with the host's clock beside it (both in ms): the host
    takes ``queue_ms`` to queue a kernel, the GPU runs kernels in order, and an event is stamped
    when the stream reaches it: at once on an idle GPU, else when the work ahead of it ends.
    Each test makes its own."""

    def __init__(self, queue_ms: float = 0.0) -> None:
        self.host_ms = 0.0  # where the host is
        self.done_ms = 0.0  # when the GPU will have finished what was queued
        self.queue_ms = queue_ms
        self.synchronized = 0

    def kernel(self, ms: float) -> None:
        self.host_ms += self.queue_ms
        self.done_ms = max(self.done_ms, self.host_ms) + ms

    def busy_wait(self, seconds: float) -> None:  # pytest_hpml.gpu_busy_wait's function
        self.kernel(seconds * 1e3)

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def synchronize(self) -> None:
        self.host_ms = max(self.host_ms, self.done_ms)
        self.synchronized += 1

    def now(self) -> float:  # the host's perf_counter, in seconds
        return self.host_ms / 1e3

    def clock(self) -> CudaEventClock:
        return CudaEventClock(event=self.event, synchronize=self.synchronize,
                              busy_wait=self.busy_wait)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self) -> None:
        self.at = max(self.gpu.host_ms, self.gpu.done_ms)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return end.at - self.at


def test_cuda_event_clock_turns_event_pairs_into_seconds_after_synchronizing():
    gpu = FakeGpu()
    clock = gpu.clock()
    gpu.host_ms = 10.0
    start = clock.mark()
    gpu.kernel(2.5)
    end = clock.mark()
    clock.synchronize()
    assert gpu.synchronized == 1
    assert clock.seconds(start, end) == pytest.approx(2.5e-3)


def test_host_clock_reads_the_time_between_two_marks_and_holds_nothing_back():
    readings = iter([10.0, 12.5])
    clock = HostClock(now=lambda: next(readings))
    start = clock.mark()
    clock.hold(1.0)  # nothing to queue on a host: the next mark is the next reading
    assert clock.seconds(start, clock.mark()) == 2.5


def test_cuda_clock_holds_the_gpu_as_long_as_asked():
    gpu = FakeGpu()
    clock = gpu.clock()
    clock.hold(0.0)  # nothing asked, nothing queued
    assert gpu.done_ms == 0.0
    clock.hold(3e-3)
    assert gpu.done_ms == pytest.approx(3.0)


def test_a_timed_loop_starts_behind_a_busy_wait_so_the_hosts_queueing_is_not_timed():
    # The host takes 0.05 ms to queue a call that the GPU runs in 0.02 ms: started on an idle
    # GPU, the loop would time the host (0.05 ms per call).
    gpu = FakeGpu(queue_ms=0.05)
    per_call, queueing = time_back_to_back(lambda: gpu.kernel(0.02), 10, gpu.clock(),
                                           queue_estimate=0.05e-3, now=gpu.now)
    assert per_call == pytest.approx(0.02e-3)
    assert queueing == pytest.approx(0.05e-3)


def test_the_allreduce_sweep_times_the_collectives_not_the_host(monkeypatch):
    gpu = FakeGpu(queue_ms=0.05)
    monkeypatch.setattr(ranks, "rank_device", lambda device: torch.device("cpu"))
    monkeypatch.setattr(ranks, "clock_for", lambda device: gpu.clock())
    monkeypatch.setattr(dist, "barrier", lambda group=None: None)
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, group=None: gpu.kernel(0.02))
    swept = ranks.allreduce_sweep_rank(0, 2, [4096, 8192], device="cuda")
    assert swept["seconds"] == [pytest.approx(0.02e-3)] * 2


def test_gpu_step_times_say_why_no_busy_wait_goes_ahead_of_a_step():
    class Row:  # the Recorder calls record_steps makes
        def __init__(self):
            self.notes = {}

        def record_timing(self, name, samples):
            return Timing(samples=samples)

        def record(self, name, value, **kwargs):
            self.notes[name] = kwargs.get("note")

        def annotate(self, name, note):
            self.notes[name] = note

    for device, note in (("cuda", GPU_STEP_TIMES_NOTE), ("cpu", None)):
        row = Row()
        steps = Lab("quick", device, None).record_steps(row, "training_time", [0.1, 0.3])
        assert steps.total == pytest.approx(0.4) and steps.timing.median == pytest.approx(0.2)
        assert row.notes["training_time"] == note


@pytest.mark.parametrize("intervals, expected", [
    ([], 0.0),
    ([(0.0, 1.0)], 1.0),
    ([(0.0, 1.0), (2.0, 3.0)], 2.0),  # disjoint: the sum
    ([(0.0, 2.0), (1.0, 3.0)], 3.0),  # a bucket queued behind another: counted once
    ([(0.0, 4.0), (1.0, 2.0)], 4.0),  # nested
    ([(2.0, 3.0), (0.0, 1.0), (0.5, 2.5)], 3.0),  # unsorted, chained
])
def test_covered_time_is_the_union_of_the_intervals(intervals, expected):
    assert covered(intervals) == pytest.approx(expected)


# -- the comm hook, on 2 gloo ranks ---------------------------------------------------------------

def hook_vs_plain_allreduce_rank(rank: int, world_size: int) -> dict:
    """DDP with the timed hook vs gradients all-reduced by hand, on rank-specific data."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    reference = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model)
    timer = AllReduceTimer(HostClock(), world_size)
    ddp.register_comm_hook(timer, timed_allreduce_hook)
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(rank))
    timer.begin_step()
    ddp(x).square().sum().backward()
    buckets = timer.end_step()
    reference(x).square().sum().backward()
    expected = []
    for p in reference.parameters():
        dist.all_reduce(p.grad)
        expected.append(p.grad / world_size)
    return {"grads": [p.grad for p in model.parameters()], "expected": expected,
            "bucket_bytes": sum(b.nbytes for b in buckets),
            "times": [b.end - b.start for b in buckets]}


def test_timed_hook_averages_exactly_as_an_all_reduce_and_times_every_bucket():
    results = launch(hook_vs_plain_allreduce_rank, 2)
    for r in results:
        for got, want in zip(r["grads"], r["expected"], strict=True):
            torch.testing.assert_close(got, want)
        assert r["bucket_bytes"] == 4 * (6 * 5 + 5 + 5 * 3 + 3)
        assert r["times"] and all(t >= 0 for t in r["times"])


# -- the collective counter -----------------------------------------------------------------------

def test_wire_counter_counts_each_collectives_payload_by_phase(monkeypatch):
    for name in ("all_reduce", "all_gather", "_broadcast_coalesced"):
        monkeypatch.setattr(dist, name, lambda *a, **k: None)
    counter = WireCounter()
    with counter.installed():
        counter.phase = "construction"
        dist._broadcast_coalesced(None, [torch.zeros(10), torch.zeros(3, dtype=torch.int64)],
                                  1024, 0)
        counter.phase = "epoch 1"
        dist.all_reduce(torch.zeros(7))
        dist.all_reduce(tensor=torch.zeros(1, dtype=torch.float16))
        dist.all_gather([torch.zeros(4), torch.zeros(4)], torch.zeros(4))
    assert counter.phase_bytes("construction") == {"_broadcast_coalesced": 40 + 24}
    assert counter.phase_bytes("epoch 1") == {"all_reduce": 28 + 2, "all_gather": 32}
    assert counter.calls[("epoch 1", "all_reduce")] == 2
    dist.all_reduce(torch.zeros(100))  # uninstalled: no longer counted
    assert counter.phase_bytes("epoch 1")["all_reduce"] == 30


# -- bandwidth ------------------------------------------------------------------------------------

def test_bus_bandwidth_is_algbw_times_the_ring_factor():
    assert bus_factor(1) == 0 and bus_factor(2) == 1 and bus_factor(4) == 1.5
    assert algbw(1e9, 0.5) == 2e9
    assert busbw(1e9, 0.5, 4) == 3e9
    with pytest.raises(ValueError, match="positive time"):
        algbw(1, 0)


def test_ring_model_and_its_fit_recover_bandwidth_and_latency():
    world, bandwidth, latency = 4, 10e9, 5e-6
    sizes = sweep_sizes(8 * 2**10, 256 * 2**20)
    assert sizes[0] == 8192 and sizes[-1] == 256 * 2**20 and len(sizes) == 16
    times = [ring_allreduce_time(s, world, bandwidth, latency) for s in sizes]
    assert times[0] == pytest.approx(1.5 * 8192 / 10e9 + 6 * 5e-6)
    fitted_bandwidth, fitted_latency = fit_ring_model(sizes, times, world)
    assert fitted_bandwidth == pytest.approx(bandwidth, rel=1e-6)
    assert fitted_latency == pytest.approx(latency, rel=1e-6)


# -- recipe ---------------------------------------------------------------------------------------

def test_learning_rate_follows_goyal_linear_scaling_and_warmup():
    plain = Recipe(batch_per_worker=128, lr=0.1)
    assert learning_rate(plain, 4, 0, 10) == 0.1  # no remedy: lab 2's rate whatever the batch
    scaled = Recipe(batch_per_worker=128, lr=0.1, linear_scaling=True)
    assert scaled.peak_lr(4) == pytest.approx(0.4)  # k = 512 / 128
    warm = Recipe(batch_per_worker=128, lr=0.1, linear_scaling=True, warmup_epochs=2)
    steps_per_epoch = 10
    rates = [learning_rate(warm, 4, s, steps_per_epoch) for s in range(25)]
    assert rates[0] == pytest.approx(0.1)  # starts at the small-batch rate
    assert rates[10] == pytest.approx(0.25)  # halfway through the warm-up
    assert rates[20:] == [pytest.approx(0.4)] * 5  # then the scaled rate
    assert all(b - a == pytest.approx(0.015) for a, b in zip(rates[:19], rates[1:20], strict=True))


# -- figures across ranks -------------------------------------------------------------------------

def _epoch(steps, comm, synchronized=True):
    return EpochRecord(epoch=2, synchronized=synchronized, wall=sum(steps) + 0.1,
                       loader_wait=0.1, step_times=steps, comm_times=comm)


def _rank(*epochs, stats=None):
    return RankResult(rank=0, world_size=2, device="cpu", backend="gloo", data="synthetic",
                      parameters=0, parameter_bytes=0, buffer_bytes=0, steps_per_epoch=2,
                      epochs=list(epochs), batchnorm_statistics=stats or {})


def test_a_step_takes_its_slowest_rank_and_communication_the_least_waiting_rank():
    ranks = [_rank(_epoch([1.0, 3.0], [0.5, 0.2])), _rank(_epoch([2.0, 1.0], [0.1, 0.4]))]
    assert slowest_steps(ranks, 2) == [2.0, 3.0]
    assert communication_steps(ranks, 2) == [0.1, 0.2]
    assert imbalance([2.0, 1.5]) == pytest.approx(0.25)


def test_compute_vs_communication_from_a_synchronized_and_a_no_sync_epoch():
    both = _rank(_epoch([1.0, 1.0], [0.5, 0.5]),
                 _epoch([0.8, 0.8], [0.0, 0.0], synchronized=False))
    split = compute_vs_communication([both], 2)
    assert split.compute == pytest.approx(1.6)
    assert split.communication == pytest.approx(1.0)
    assert split.exposed == pytest.approx(0.4)
    assert split.overlapped == pytest.approx(0.6) and split.overlapped_share == pytest.approx(0.6)


def test_gap_closed_and_batchnorm_drift():
    assert gap_closed(0.8, 0.6, 0.7) == pytest.approx(0.5)
    assert gap_closed(0.8, 0.6, 0.9) == pytest.approx(1.5)
    same = {"bn1": torch.tensor([1.0, 2.0])}
    apart = {"bn1": torch.tensor([1.0, 2.2])}
    ranks = [_rank(stats=s) for s in (same, same, apart)]
    assert batchnorm_drift(ranks[:2]) == 0
    assert batchnorm_drift(ranks) == pytest.approx(0.2 / 5**0.5)


# -- loader, model, launch ------------------------------------------------------------------------

def test_loader_serves_augmented_batches_with_their_indices_and_shards_disjointly():
    data = synthetic("CIFAR-10", "train", 40)
    recipe = Recipe(batch_per_worker=8, loader_workers=0)
    seen = []
    for rank in range(2):
        loader, sampler = make_loader(data, recipe, world_size=2, rank=rank)
        sampler.set_epoch(1)
        for images, labels, index in loader:
            assert images.shape[1:] == (3, 32, 32) and torch.equal(labels, data.labels[index])
            seen.extend(index.tolist())
    assert sorted(seen) == list(range(40))


def test_narrow_resnet18_is_the_resnet18_architecture_with_fewer_channels():
    assert sum(p.numel() for p in resnet18_cifar(device="meta").parameters()) == \
        RESNET18_CIFAR_PARAMETERS
    for width in (4, 8):
        model = resnet18_cifar(width, device="meta")
        expected = basic_block_resnet_parameters(
            stem_kernel=3, classes=10, widths=(width, 2 * width, 4 * width, 8 * width))
        assert sum(p.numel() for p in model.parameters()) == expected
    out = resnet18_cifar(4)(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    with pytest.raises(ValueError, match="positive int"):
        resnet18_cifar(0)


def test_out_of_memory_in_a_rank_comes_back_as_memory_error(monkeypatch):
    def fails(*args, **kwargs):
        raise DistributedError("rank 1 raised MemoryError: rank 1 ran out of memory at batch "
                               "512 per worker: CUDA out of memory\n\n--- traceback ---", rank=1,
                               exception_type="MemoryError")

    monkeypatch.setattr("suites.data_parallel.lab.run_distributed", fails)
    with pytest.raises(MemoryError, match="rank 1 ran out of memory at batch 512"):
        launch(lambda: None, 2)

    def other(*args, **kwargs):
        raise DistributedError("rank 0 raised ValueError: nope", rank=0,
                               exception_type="ValueError")

    monkeypatch.setattr("suites.data_parallel.lab.run_distributed", other)
    with pytest.raises(DistributedError, match="nope"):
        launch(lambda: None, 2)


@pytest.mark.parametrize("text, budget, expected", [
    ("DefaultCPUAllocator: can't allocate memory: you tried", False, True),
    ("CUDA out of memory. Tried to allocate", False, True),
    ("could not create a primitive", True, True),  # oneDNN, under a budget
    ("could not create a primitive", False, False),  # ... but not otherwise
    ("shape mismatch", True, False),
])
def test_what_counts_as_out_of_memory(text, budget, expected):
    assert is_out_of_memory(RuntimeError(text), under_budget=budget) is expected


def test_gpu_cases_need_as_many_gpus_as_workers():
    cases = {p.id: p for p in device_workers((1, 2, 4))}
    assert set(cases) == {"cpu-1w", "cpu-2w", "cpu-4w", "cuda-1w", "cuda-2w", "cuda-4w"}
    assert not cases["cpu-4w"].marks
    needs = {m.args[0] for m in cases["cuda-4w"].marks if m.name == "multi_gpu"}
    assert needs == {4} and any(m.name == "gpu" for m in cases["cuda-1w"].marks)
