"""The fixed-point multiplier: M0 * 2^-(31 + shift) represents M, and the integer rescale of an
int32 accumulator rounds to nearest, checked against exact Python-integer arithmetic."""
from __future__ import annotations

import math

import pytest
import torch

from suites.quantization.fixed_point import (
    FixedPointMultiplier,
    quantize_multiplier,
    requantize,
)

pytestmark = [pytest.mark.quantization, pytest.mark.int8]


@pytest.mark.parametrize("real", [2.0 ** -31, 1e-7, 3.3e-4, 0.0123, 0.5, 0.999999999, 1.0, 7.25,
                                  2.0 ** 29])
def test_multiplier_is_a_31_bit_mantissa_and_a_shift(real):
    m0, shift = quantize_multiplier(real)
    assert 2 ** 30 <= m0 < 2 ** 31
    represented = m0 * 2.0 ** -(31 + shift)
    assert abs(represented - real) <= real * 2.0 ** -30


@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf, 2.0 ** -40, 2.0 ** 31])
def test_multiplier_rejects_what_no_int32_rescale_can_represent(bad):
    with pytest.raises(ValueError, match="rescale factor"):
        quantize_multiplier(bad)


def _exact_requantize(acc: int, m0: int, shift: int, zp: int, qmin: int, qmax: int) -> int:
    """Python big integers: floor((acc * M0 + 2^(s-1)) / 2^s), s = 31 + shift."""
    s = 31 + shift
    return max(qmin, min(qmax, (acc * m0 + (1 << (s - 1))) // (1 << s) + zp))


def test_requantize_matches_exact_integer_arithmetic_and_rounds_to_nearest(hpml):
    g = torch.Generator().manual_seed(1)
    acc = torch.randint(-2 ** 31, 2 ** 31 - 1, (64, 7), generator=g, dtype=torch.int64)
    acc[:, 0] = torch.randint(-3000, 3000, (64,), generator=g)  # the usual, small, range
    acc = acc.to(torch.int32)
    real = torch.tensor([3e-3, 1e-4, 0.25, 1e-9, 0.7, 2.0 ** -20, 1.5])
    fpm = FixedPointMultiplier.from_real(real)
    out = requantize(acc, fpm, zero_point=3, qmin=-128, qmax=127)
    expected = torch.tensor([[_exact_requantize(int(a), int(m), int(s), 3, -128, 127)
                              for a, m, s in zip(row, fpm.m0, fpm.shift, strict=True)]
                             for row in acc.tolist()], dtype=torch.int8)
    hpml.check_close(out, expected, rtol=0, atol=0, name="max_rel_error_vs_python_ints")
    # Unclamped entries are round-to-nearest of acc * M (within half a step, plus M0's error).
    ideal = acc.double() * fpm.real() + 3
    inside = (ideal > -128) & (ideal < 127)
    assert inside.sum() > 50
    assert ((out.double() - ideal).abs()[inside] <= 0.5 + 1e-6).all()


def test_relu_is_the_clamp_at_zero_point():
    acc = torch.tensor([[-1000, -1, 0, 1, 1000, 10 ** 6]], dtype=torch.int32)
    fpm = FixedPointMultiplier.from_real(0.01, channels=6)
    out = requantize(acc, fpm, zero_point=0, qmin=0, qmax=127)
    assert out.tolist() == [[0, 0, 0, 0, 10, 127]]


def test_requantize_needs_an_int32_accumulator():
    with pytest.raises(TypeError, match="int32"):
        requantize(torch.zeros(2, 2), FixedPointMultiplier.from_real(0.5, channels=2))
