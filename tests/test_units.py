"""SI base units inside, readable units when printing."""

from __future__ import annotations

import math

import pytest

from pytest_hpml.report.units import format_scaled, format_value, scale_for


@pytest.mark.parametrize("value, unit, text", [
    (1.5e-3, "s", "1.500 ms"),
    (2.5e-6, "s", "2.500 us"),
    (7e-9, "s", "7.000 ns"),
    (3.5, "s", "3.500 s"),
    (120.5, "s", "120.5 s"),
    (1e-11, "s", "0.01000 ns"),
    (1e-13, "s", "1.000e-04 ns"),
    (900.5e9, "B/s", "900.5 GB/s"),
    (1.2e12, "B/s", "1.200 TB/s"),
    (3.35e15, "FLOP/s", "3.350 PFLOP/s"),
    (2.5e9, "FLOP", "2.500 GFLOP"),
    (4096.0, "B", "4.096 kB"),
    (12.5, "B", "12.50 B"),
    (0.93, "%", "0.9300 %"),
    (101770.5, "", "1.018e+05"),
    # Whole numbers after scaling are printed exactly: counts of parameters, bytes, elements.
    (101770.0, "", "101,770"),
    (12.0, "B", "12 B"),
    (8e12, "B/s", "8 TB/s"),
    (0.0, "s", "0 s"),
    # A rate of things per second (images, steps) takes the prefix too.
    (5.927e6, "1/s", "5.927 M/s"),
    (10150.0, "1/s", "10.15 k/s"),
    (42.5, "1/s", "42.50 1/s"),
])
def test_format_value(value: float, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_spread_in_the_same_unit() -> None:
    assert format_value(2.5e-3, "s", spread=5e-5) == "2.500 ± 0.05000 ms"
    # A spread below 0.001 of the unit takes the value's decimals, not 8.910e-04.
    assert format_scaled(5.553e-6, "s", 1e-3, spread=8.91e-7) == "0.005553 ± 0.000891"
    assert format_scaled(12.5, "s", 1.0, spread=4e-4) == "12.50 ± 4.000e-04"


def test_non_finite_values_are_printed_as_such() -> None:
    assert format_value(math.inf, "s") == "inf s"
    assert format_value(math.nan, "B/s") == "nan B/s"
    assert scale_for("s", math.inf) == (1.0, "s")


def test_negative_values_scale_by_magnitude() -> None:
    assert format_value(-2.5e9, "FLOP/s") == "-2.500 GFLOP/s"


def test_a_detectable_change_of_millions_of_percent_reads_as_over_ten_times() -> None:
    """Three processes 40 % apart give a t quantile of one degree of freedom, exponentiated:
    `detectable ±1387921753.9%` said nothing `blind` does not; it reads as over 1000 %."""
    from pytest_hpml.compare.noise import Noise, blind_spot
    from pytest_hpml.report.units import format_detectable

    assert format_detectable(0.603) == "±60.3%"
    assert format_detectable(13879217.5) == "over ±1000%"
    noise = Noise(between=0.46, dof=1, within=0.0, runs_now=1, runs_before=2)
    said = blind_spot(noise, 13879217.5, 0.5, 0.001)
    assert said.startswith("cannot detect even a slowdown of 11x here (detectable over ±1000%, "
                           "the limit is ±50.0 %): 3 processes, spread 46.0 %"), said
    assert blind_spot(noise, 0.603, 0.5, 0.001).startswith(
        "cannot detect a 1.60x slowdown here (detectable ±60.3 %")
