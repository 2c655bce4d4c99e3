import pytest
import torch


# Objects as parameters (functions): pytest's ids are op0, op1.
@pytest.mark.benchmark(group="elementwise")
@pytest.mark.parametrize("op", [torch.add, torch.mul])
def test_elementwise(benchmark, device, op):
    assert device.type == "cpu"  # the project's own fixture, not a plugin's
    x = torch.rand(200_000, device=device)
    out = benchmark(op, x, x)
    assert out.shape == x.shape


@pytest.mark.benchmark(group="reduce")
def test_sum(benchmark, device):
    x = torch.rand(1_000_000, device=device)
    assert benchmark(torch.sum, x) > 0
