"""How CUDA computes fp32 matmuls and convolutions (TF32 tensor cores or full IEEE fp32), set
for a block and restored after it.

torch 2.9+ has the fp32_precision switches ("tf32" / "ieee") and deprecates the legacy
allow_tf32 flags, raising when the two are mixed; older torch has only the legacy flags. This
uses whichever the installed torch has, so a lab says what arithmetic it wants, not how.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

PRECISIONS = ("tf32", "ieee")


def _switches(backends: Any) -> dict[str, tuple[Any, str, bool]]:
    """name -> (object, attribute, legacy) for the matmul and convolution switches."""
    matmul, conv = backends.cuda.matmul, backends.cudnn
    if hasattr(matmul, "fp32_precision") and hasattr(getattr(conv, "conv", None),
                                                     "fp32_precision"):
        return {"matmul": (matmul, "fp32_precision", False),
                "conv": (conv.conv, "fp32_precision", False)}
    return {"matmul": (matmul, "allow_tf32", True), "conv": (conv, "allow_tf32", True)}


def matmul_precision(backends: Any = torch.backends) -> str:
    """How fp32 matmuls run now on CUDA, "tf32" or "ieee", as torch.matmul reads the switch
    (kernels of a lab's own, such as a Triton tl.dot, follow it with this)."""
    owner, attribute, legacy = _switches(backends)["matmul"]
    value = getattr(owner, attribute)
    if legacy:
        return "tf32" if value else "ieee"
    if value == "none":  # the new API's "inherit": the global switch, itself "none" by default
        value = getattr(backends, "fp32_precision", "none")
    return "tf32" if value == "tf32" else "ieee"


@contextlib.contextmanager
def fp32_math(matmul: str | None = None, conv: str | None = None,
              backends: Any = torch.backends) -> Iterator[None]:
    """Inside the block, fp32 matmuls (and cuDNN convolutions) run in `matmul` (`conv`)
    precision, "tf32" or "ieee"; None leaves that switch as it is. Nothing changes on a CPU,
    where the switches are ignored."""
    wanted = {"matmul": matmul, "conv": conv}
    for name, value in wanted.items():
        if value is not None and value not in PRECISIONS:
            raise ValueError(f"{name} precision must be one of {PRECISIONS}, got {value!r}")
    saved = []
    try:
        for name, (owner, attribute, legacy) in _switches(backends).items():
            if wanted[name] is None:
                continue
            saved.append((owner, attribute, getattr(owner, attribute)))
            setattr(owner, attribute, wanted[name] == "tf32" if legacy else wanted[name])
        yield
    finally:
        for owner, attribute, value in reversed(saved):
            setattr(owner, attribute, value)
