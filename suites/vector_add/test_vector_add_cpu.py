"""Lab question 1: a C++ loop adds two arrays of K million floats; torch on the CPU beside it.

How close does each come to the CPU's measured copy bandwidth? The sum is checked bit for bit
between the two before either is timed.
"""

from __future__ import annotations

import pytest

from suites.vector_add.cpu_loop import malloc_arrays
from suites.vector_add.rows import fill_inputs, record_cpu_adds, require_cpp_loop
from suites.vector_add.sizes import elements

pytestmark = pytest.mark.vector_add


@pytest.mark.hpml_sweep("k_million", quick=[0.01, 0.1, 1, 10], full=[1, 5, 10, 50, 100])
@pytest.mark.hpml_pivot(index=["k_million"], columns="config",
                        metrics=["time", "bandwidth", "pct_copy_bandwidth", "speedup"])
@pytest.mark.hpml_plot("vector_add_cpu.png", x="k_million", y="time", series="config",
                       logx=True, logy=True, xlabel="K (million elements)",
                       ylabel="time of the add (CPU)",
                       title="vector add on the CPU: C++ loop and torch, log-log")
def test_cpu_vector_add(hpml, k_million):
    hpml.experiment = "vector add on the CPU: C++ loop vs torch"
    require_cpp_loop()
    n = elements(k_million)
    copy_bandwidth = hpml.ceilings.copy_bandwidth()  # before the arrays take memory
    with malloc_arrays(n, count=4) as (x, y, cpu_sum, torch_out):
        fill_inputs(x, y)
        record_cpu_adds(hpml, x, y, cpu_sum, torch_out, copy_bandwidth=copy_bandwidth)
