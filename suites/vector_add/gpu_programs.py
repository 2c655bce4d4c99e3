"""The lab's GPU programs, whole: allocate, move the data, add, bring the sum back, free.

Each runs synchronously from the host's point of view (the last copy or read waits for the
kernel), so a wall clock around one call is the time to execute the program, as the lab asks.
`poison` fills the output with NaN before the kernel, so that an element the kernel never wrote
cannot pass the bit-exact check (a fresh allocation may well hold the previous run's sum).
"""

from __future__ import annotations

import torch

from suites.vector_add.cuda_memory import cuda_floats
from suites.vector_add.kernel import LaunchConfig, vector_add


def explicit_memory_program(x_host: torch.Tensor, y_host: torch.Tensor, out_host: torch.Tensor,
                            cfg: LaunchConfig, poison: bool = False) -> None:
    """cudaMalloc x3, copy x and y in, add on the GPU, copy the sum out, cudaFree x3."""
    with cuda_floats(x_host.numel(), count=3, managed=False) as (dx, dy, dout):
        x, y, out = dx.device, dy.device, dout.device
        x.copy_(x_host)
        y.copy_(y_host)
        if poison:
            out.fill_(float("nan"))
        vector_add(x, y, out, cfg)
        out_host.copy_(out)  # device-to-host into pageable memory: returns once it is done


def unified_memory_program(x_host: torch.Tensor, y_host: torch.Tensor, out_host: torch.Tensor,
                           cfg: LaunchConfig, poison: bool = False) -> None:
    """cudaMallocManaged x3, CPU writes x and y, add on the GPU, CPU reads the sum, cudaFree x3.

    No copies are written: the driver migrates pages on demand, to the GPU when the kernel
    touches them and back to the host when the CPU reads the sum; that traffic is what this
    program's time shows beside the explicit one.
    """
    with cuda_floats(x_host.numel(), count=3, managed=True) as (mx, my, mout):
        mx.host.copy_(x_host)
        my.host.copy_(y_host)
        if poison:
            mout.host.fill_(float("nan"))
        vector_add(mx.device, my.device, mout.device, cfg)
        torch.cuda.synchronize()  # the CPU may read managed memory only after the kernel ends
        out_host.copy_(mout.host)


PROGRAMS = {"explicit": explicit_memory_program, "unified": unified_memory_program}
