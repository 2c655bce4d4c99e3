"""Values a metric cannot take are refused naming the metric (issue 31 item 15); each case
raised a bare error from numpy, torch, statistics or a comparison before. A numpy longdouble,
a numpy scalar as documented, is accepted."""

from __future__ import annotations

import pytest
from hpml_testing import FAST

CASES = {
    "a 2-element tensor": (
        'hpml.record("rate", torch.tensor([1.0, 2.0]), unit="1/s")',
        "metric 'rate': a metric value is one number, got a Tensor of 2 elements; record each "
        "as its own metric, or one figure of them (.mean().item(), .max().item())"),
    "a 2-element array": (
        'hpml.record("rate", np.array([1.0, 2.0]), unit="1/s")',
        "metric 'rate': a metric value is one number, got a ndarray of 2 elements*"),
    "samples near 1.5e308": (
        'hpml.record("lat", 1.5e308, unit="s", samples=[1.5e308, 1.6e308, 1.7e308])',
        "metric 'lat': samples near 1.7e+308 overflow a float64 sum; record them in a larger "
        "unit"),
    "a NaN in record_timing": (
        'hpml.record_timing("step", [1e-3, float("nan")])',
        "metric 'step': sample 1 is nan; samples must be finite numbers"),
    "a zero timing under record_bandwidth": (
        'hpml.record_bandwidth("bw", 1e6, timing=hpml.record_timing("step", [0.0]))',
        "metric 'bw': the timing 'step' has a median of 0.0 s; a rate needs a time above 0 "
        "(time more work per sample)"),
    "a tolerance given as text": (
        'hpml.record("rate", 1.0, unit="1/s", tolerance="0.1")',
        "metric 'rate': tolerance is a number such as 0.1 (10 %), got '0.1' (str)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_value_a_metric_cannot_take_is_refused_naming_the_metric(
        pytester: pytest.Pytester, case: str) -> None:
    call, said = CASES[case]
    pytester.makepyfile(f"""
    import numpy as np
    import pytest
    import torch

    def test_t(hpml):
        with pytest.raises((TypeError, ValueError)) as refused:
            {call}
        print("REFUSED:", refused.value)
    """)
    result = pytester.runpytest(*FAST, "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*REFUSED: {said}"])


def test_a_numpy_longdouble_is_a_number(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
    import numpy as np

    def test_t(hpml):
        assert hpml.record("rate", np.longdouble(2.5), unit="1/s").value == 2.5
    """)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)
