"""The rows the lab's tables share: the inputs, the CPU rows (C++ loop, torch), % of the copy
ceiling.

The C++ loop is measured inside every experiment that needs it (for speedups) instead of being
cached per session: under xdist the tests of one K may run in different processes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from pytest_hpml import Hpml, Recorder, Timing
from suites.vector_add.cpu_loop import CompilerNotFound, cpu_vector_add, library
from suites.vector_add.sizes import stream_bytes

NAN = float("nan")
SEED = 9143


def torch_cpu_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    torch.add(x, y, out=out)


#: The CPU columns of the lab's tables, in order.
CPU_ADDS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]] = {
    "C++ loop": cpu_vector_add,
    "torch CPU": torch_cpu_add,
}


def require_cpp_loop() -> None:
    """Skip the calling test, with the reason, when the C++ baseline cannot be built."""
    try:
        library()
    except CompilerNotFound as exc:
        pytest.skip(str(exc))


def fill_inputs(x: torch.Tensor, y: torch.Tensor, seed: int = SEED) -> None:
    """The same uniform [0, 1) inputs for a given length in every test and process."""
    g = torch.Generator().manual_seed(seed)
    torch.rand(x.numel(), generator=g, out=x)
    torch.rand(y.numel(), generator=g, out=y)


def record_pct_copy_bandwidth(row: Recorder, bandwidth: float, copy_bandwidth: float,
                              timing: Timing) -> None:
    """Achieved bandwidth as a % of the device's measured copy ceiling, and the ceiling itself
    (a setting of the row), so that the % can be traced to the figure it divides by. Judged as
    the add's `timing` is: the ceiling is measured once per run and drifts on its own."""
    row.setting("copy_bandwidth", copy_bandwidth, unit="B/s",
                note="copy_bandwidth: the plugin's measured copy ceiling (read + write)")
    pct = 100 * bandwidth / copy_bandwidth
    # Above 100 % is no error: short vectors stay in the caches between calls, while the
    # ceiling is a copy far larger than any cache, from and to memory.
    row.record("pct_copy_bandwidth", pct, unit="%", better="higher", timing=timing,
               note="pct_copy_bandwidth above 100 %: the vectors fit in the caches; the "
                    "ceiling is a copy from and to memory" if pct > 100 else None)


def record_cpu_adds(hpml: Hpml, x: torch.Tensor, y: torch.Tensor, cpu_sum: torch.Tensor,
                    scratch: torch.Tensor, copy_bandwidth: float | None = None) -> Timing:
    """Rows "C++ loop" and "torch CPU": bit-exact checks, time, STREAM bandwidth.

    cpu_sum receives the C++ loop's sum (the reference of every other check); scratch is
    torch's output. Returns the C++ loop's timing, the baseline of the GPU speedups.
    """
    n = x.numel()
    timings: dict[str, Timing] = {}
    for label, add in CPU_ADDS.items():
        out = cpu_sum if label == "C++ loop" else scratch
        with hpml.row(config=label) as row:
            out.fill_(NAN)  # an element the add never wrote stays NaN and fails the check
            add(x, y, out)
            # The C++ loop is checked against torch's own sum, torch against the C++ loop.
            row.check_close(out, x + y if label == "C++ loop" else cpu_sum, rtol=0, atol=0)
            # Host work, timed on the host's clock even in a GPU test.
            timing = timings[label] = row.time(add, x, y, out, clock="host")
            # The timed calls wrote `out` last: an add right once and wrong when repeated
            # (state carried from call to call) fails here.
            row.check_close(out, x + y if label == "C++ loop" else cpu_sum, rtol=0, atol=0,
                            name="max_rel_error_timed")
            bandwidth = row.record_bandwidth("bandwidth", stream_bytes(n), timing).value
            if copy_bandwidth:
                record_pct_copy_bandwidth(row, bandwidth, copy_bandwidth, timing)
            if label != "C++ loop":
                # Judged as this add's time is: the C++ loop's own drift is its own verdict.
                row.record("speedup", timings["C++ loop"].median / timing.median,
                           better="higher", timing=timing,
                           note="speedup: C++ loop time / this time")
    return timings["C++ loop"]
