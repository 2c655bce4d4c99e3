"""The measuring instruments checked on cases with a known answer, before any model uses them."""

import pytest
import torch

from suites.complexity.bytes_moved import BytesMovedMode, count_forward_bytes, tensor_bytes
from suites.complexity.flops import count_training_flops
from suites.complexity.layerwise import layer_clocks, median_by_layer_type, time_layerwise
from suites.complexity.memory import cpu_peak_allocated
from suites.complexity.models import (
    CIFAR_RESNET18,
    basic_block_resnet_parameters,
    build_model,
)
from suites.complexity.paleo import (
    attainable_flops,
    paleo_time,
    platform_percent_of_peak,
    ridge_point,
)
from suites.complexity.reference import TORCHVISION_PUBLISHED

pytestmark = pytest.mark.complexity

MiB = 2**20


def test_closed_form_resnet_count_reproduces_published_resnet18() -> None:
    # The formula that checks the CIFAR ResNet-18 must first reproduce a published figure.
    assert basic_block_resnet_parameters(7, 1000) == TORCHVISION_PUBLISHED["resnet18"].parameters


def test_bytes_of_one_add_are_two_reads_and_one_write() -> None:
    n = 1000
    a, b = torch.randn(n), torch.randn(n)
    with BytesMovedMode() as mode:
        torch.add(a, b)
    assert mode.total == 3 * n * 4
    assert dict(mode.by_op) == {"aten.add": 3 * n * 4}


def test_bytes_of_a_matmul_are_both_operands_and_the_result() -> None:
    m, k, n = 8, 16, 4
    with BytesMovedMode() as mode:
        torch.randn(m, k, device="meta") @ torch.randn(k, n, device="meta")
    matmul = sum(v for op, v in mode.by_op.items() if op != "aten.randn")
    assert matmul == 4 * (m * k + k * n + m * n)


def test_views_move_no_bytes_and_broadcasts_count_once() -> None:
    x, bias = torch.randn(10, 100), torch.randn(100)
    with BytesMovedMode() as views:
        x.view(100, 10).t().detach()
    assert views.total == 0
    assert tensor_bytes(bias.expand(10, 100)) == 100 * 4
    with BytesMovedMode() as broadcast:
        x + bias  # reads x and bias once, writes the 10 x 100 result
    assert broadcast.total == (1000 + 100 + 1000) * 4


def test_bytes_counted_on_meta_match_a_real_cpu_forward() -> None:
    images = torch.randn(1, 3, 32, 32)
    on_cpu = count_forward_bytes(build_model(CIFAR_RESNET18), images).total
    on_meta = count_forward_bytes(build_model(CIFAR_RESNET18, "meta"), images.to("meta")).total
    # Meta's eval-mode batch norm returns (C,) save_mean/save_invstd where CPU returns empty
    # tensors: 2 x 4,800 channels x 4 B = 38,400 B on this model, nothing else differs.
    assert abs(on_meta - on_cpu) / on_cpu < 1e-3


def test_cpu_peak_of_one_allocation_of_known_size() -> None:
    kept: list[torch.Tensor] = []
    assert cpu_peak_allocated(lambda: kept.append(torch.empty(MiB // 4))) == MiB
    assert cpu_peak_allocated(lambda: None) == 0


def test_cpu_peak_is_the_high_water_mark_not_the_sum() -> None:
    def two_temporaries_one_at_a_time() -> None:
        for _ in range(2):
            t = torch.empty(4 * MiB // 4)
            del t

    assert cpu_peak_allocated(two_temporaries_one_at_a_time) == 4 * MiB

    def both_alive() -> None:
        a = torch.empty(MiB // 4)
        b = torch.empty(2 * MiB // 4)
        del a, b

    assert cpu_peak_allocated(both_alive) == 3 * MiB


def test_cpu_peak_ignores_frees_of_blocks_allocated_before() -> None:
    old = [torch.empty(8 * MiB // 4)]

    def free_old_then_allocate() -> None:
        old.clear()
        torch.empty(MiB // 4)

    assert cpu_peak_allocated(free_old_then_allocate) == MiB


def test_per_layer_training_flops_add_up_to_the_whole_graph() -> None:
    images = torch.empty(1, 3, 32, 32, device="meta")
    counted = count_training_flops(build_model(CIFAR_RESNET18, "meta"), images)
    assert sum(counted.by_layer.values()) == counted.total
    assert counted.by_layer["conv1"] > 0 and counted.by_layer["bn1"] == 0


def test_paleo_and_roofline_formulas() -> None:
    assert paleo_time(2e12, 1e12) == pytest.approx(2.0)
    assert paleo_time(2e12, 1e12, ppp=0.5) == pytest.approx(4.0)
    assert platform_percent_of_peak(2e12, 1e12, measured_time=4.0) == pytest.approx(0.5)
    assert ridge_point(10e12, 1e12) == pytest.approx(10.0)
    assert attainable_flops(2.0, 10e12, 1e12) == pytest.approx(2e12)  # memory-bound side
    assert attainable_flops(50.0, 10e12, 1e12) == pytest.approx(10e12)  # compute-bound side
    with pytest.raises(ValueError, match="ppp"):
        paleo_time(1.0, 1e12, ppp=0)


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(ValueError, match="resnet18, resnet50.*googlenet"):
        build_model("lenet")


def test_layer_clocks_time_every_leaf_call_and_come_off_after():
    # A clock that moves 1 s per reading, and a synchronize that is counted: each leaf call
    # reads 1 s (its two stamps), a module called twice is timed twice, every stamp
    # synchronizes first (as on a GPU), and no hook is left behind.
    relu = torch.nn.ReLU()
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), relu, torch.nn.Linear(4, 4), relu)
    ticks, syncs, calls = iter(range(100)), [], []
    with layer_clocks(net, calls, synchronize=lambda: syncs.append(1),
                      now=lambda: float(next(ticks))):
        net(torch.ones(1, 4))
    assert [(name, kind) for name, kind, _ in calls] == [
        ("0", "Linear"), ("1", "ReLU"), ("2", "Linear"), ("1", "ReLU")]
    assert [s for *_, s in calls] == [1.0] * 4 and len(syncs) == 8
    net(torch.ones(1, 4))
    assert len(calls) == 4  # the hooks came off with the block
    passes = time_layerwise(net, torch.ones(1, 4), passes=3)
    assert len(passes) == 3 and all(len(p.calls) == 4 for p in passes)
    assert all(p.layer_sum <= p.with_clocks for p in passes)
    by_type = median_by_layer_type(passes)
    assert set(by_type) == {"Linear", "ReLU"} and all(v >= 0 for v in by_type.values())
