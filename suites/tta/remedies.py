"""The usual remedies for a device that waits on its input or its launches, one at a time from
a plain baseline, and which of them apply where.

    baseline                      batches made in the training process, pageable memory,
                                  NCHW, fp32, eager: the job as first written
    DataLoader workers            batches made (and augmented) in worker processes, in parallel
                                  with the training step
    pinned memory + non_blocking  host-to-device copies from page-locked memory, asynchronous
    larger batch                  more work per launch and per optimizer step
    channels_last                 NHWC activations (cuDNN's tensor-core convolutions use them)
    bf16 autocast                 bfloat16 matmuls and convolutions (tensor cores)
    torch.compile                 fused kernels (Inductor)
    CUDA graphs                   the step's kernels replayed from one graph launch
                                  (torch.compile mode="reduce-overhead")
    all of the above              every remedy that applies here, together

On a CPU, pinned memory, bf16 autocast and CUDA graphs are GPU remedies and are listed, not
run; torch.compile and CUDA graphs (captured through torch.compile) run in the full profile
only. The input pipeline is augmented for this experiment whatever the recipe says: making
augmented batches is the work DataLoader workers take off the training process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from .recipes import REMEDY_SETTINGS, Recipe

GPU_ONLY = "GPU only"
FULL_ONLY = "full profile only"

# Measured once on the 2-core development CPU: the quick CNN's first compiled training step.
COMPILE_IN_QUICK = ("torch.compile runs in the full profile only: compiling the quick CNN's "
                    "training step took ~40 s on a 2-core CPU (Inductor generates and builds "
                    "C++), longer than the whole quick experiment")

GRAPHS_IN_QUICK = ("CUDA graphs run in the full profile only: they are captured through "
                   "torch.compile(mode='reduce-overhead'), an Inductor compile that every quick "
                   "GPU run would pay, as for torch.compile")


@dataclass(frozen=True)
class Remedy:
    name: str
    change: Callable[[Recipe, dict], Recipe]  # (baseline recipe, profile settings) -> recipe
    devices: tuple[str, ...] = ("cpu", "cuda")
    quick: bool = True  # whether the quick profile runs it
    why_not_quick: str = ""


def baseline(recipe: Recipe) -> Recipe:
    """The recipe with every remedy off, and with its input pipeline augmented."""
    return replace(recipe, workers=0, pin_memory=False, channels_last=False, bf16=False,
                   compile="", augment=True)


REMEDIES = (
    Remedy("baseline", lambda r, s: r),
    Remedy("DataLoader workers",
           lambda r, s: replace(r, workers=min(s["workers"], os.cpu_count() or 1))),
    Remedy("pinned memory + non_blocking", lambda r, s: replace(r, pin_memory=True),
           devices=("cuda",)),
    Remedy("larger batch", lambda r, s: replace(r, batch_size=r.batch_size * s["batch_scale"])),
    Remedy("channels_last", lambda r, s: replace(r, channels_last=True)),
    Remedy("bf16 autocast", lambda r, s: replace(r, bf16=True), devices=("cuda",)),
    Remedy("torch.compile", lambda r, s: replace(r, compile="default"), quick=False,
           why_not_quick=COMPILE_IN_QUICK),
    Remedy("CUDA graphs", lambda r, s: replace(r, compile="reduce-overhead"),
           devices=("cuda",), quick=False, why_not_quick=GRAPHS_IN_QUICK),
)
ALL = "all of the above"


def why_not_run(remedy: Remedy, device_type: str, profile: str) -> str | None:
    """None when the remedy runs on this device in this profile, else why not: GPU_ONLY or
    FULL_ONLY (remedy.why_not_quick says more)."""
    if device_type not in remedy.devices:
        return GPU_ONLY
    if profile == "quick" and not remedy.quick:
        return FULL_ONLY
    return None


def applied(recipe: Recipe, name: str, device_type: str, profile: str) -> Recipe:
    """The baseline of `recipe` with the named remedy (or all that run here) applied."""
    settings = REMEDY_SETTINGS[profile]
    plain = baseline(recipe)
    if name == ALL:
        chosen = [r for r in REMEDIES if why_not_run(r, device_type, profile) is None]
        # CUDA graphs go through torch.compile too: of the two compile modes keep the graphs.
        if any(r.name == "CUDA graphs" for r in chosen):
            chosen = [r for r in chosen if r.name != "torch.compile"]
        for remedy in chosen:
            plain = remedy.change(plain, settings)
        return plain
    remedy = next((r for r in REMEDIES if r.name == name), None)
    if remedy is None:
        raise ValueError(f"unknown remedy {name!r}; choose from "
                         f"{', '.join(r.name for r in REMEDIES)} or {ALL!r}")
    return remedy.change(plain, settings)
