"""The Triton kernel in the lab's three launch configurations, bit for bit against the CPU sum.

Without a GPU this runs in Triton's interpreter on CPU tensors at tiny K: a correctness check
only, nothing here is timed. On a GPU machine the GPU experiments check every configuration at
full size, so this test steps aside.
"""

from __future__ import annotations

import pytest
import torch

from suites.vector_add.kernel import CONFIGS, config, vector_add
from suites.vector_add.rows import NAN, SEED
from suites.vector_add.sizes import elements

pytestmark = pytest.mark.vector_add


# The interpreter runs configuration (a) at about a millisecond per element: K stays tiny.
# 0.0003 million = 300 elements, not a multiple of 256: the masked tail is exercised.
@pytest.mark.hpml_sweep("k_million", quick=[0.0003, 0.001], full=[0.0003, 0.001])
@pytest.mark.parametrize("launch", sorted(CONFIGS))  # every configuration the GPU runs
def test_triton_kernel_is_bit_exact_in_every_configuration(hpml, launch, k_million):
    if not hpml.interpreted:
        pytest.skip("Triton runs natively here: test_vector_add_gpu checks every configuration "
                    "bit for bit (run pytest -m 'gpu and vector_add')")
    hpml.experiment = "vector add: Triton kernel under the interpreter (correctness only)"
    n = elements(k_million)
    g = torch.Generator().manual_seed(SEED)
    x, y = torch.rand(n, generator=g), torch.rand(n, generator=g)
    out = torch.full((n,), NAN)  # an element the kernel never wrote stays NaN and fails
    vector_add(x, y, out, config(launch))
    hpml.check_close(out, x + y, rtol=0, atol=0)
