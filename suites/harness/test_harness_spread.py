"""The harness's own spread: a fixed CPU workload timed the way every lab is timed.

Rerunning this suite and comparing with --hpml-compare shows how often this machine's noise
alone would be flagged as a regression (tools/harness_spread.py does it many times).
"""

import pytest
import torch


@pytest.mark.hpml_sweep("numel", quick=[10_000_000], full=[10_000_000, 100_000_000])
def test_torch_add(hpml, numel: int) -> None:
    a = torch.rand(numel)
    b = torch.rand(numel)
    out = torch.empty(numel)
    timing = hpml.time(torch.add, a, b, out=out)
    hpml.record_bandwidth("bandwidth", 3 * 4 * numel, timing)
    hpml.check_close(out, a + b, rtol=0, atol=0)
