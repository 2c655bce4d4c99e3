"""Histograms for steps a and c (only with --hpml-plots and matplotlib installed)."""
from __future__ import annotations

from pathlib import Path

import torch

from suites.quantization.calibration import RangeStats


def histogram(path: Path | None, values: torch.Tensor, stats: RangeStats, title: str,
              extra_lines: dict[str, float] | None = None, xlabel: str = "value") -> None:
    """Histogram (log counts) with the 3-sigma range and any clipping bounds marked, each line
    named in the legend."""
    if path is None:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(values.flatten().numpy(), bins=100, log=True, color="tab:blue")
    for i, x in enumerate(stats.three_sigma):
        ax.axvline(x, color="tab:orange", linestyle="--", linewidth=1,
                   label="mean ± 3 std" if i == 0 else None)
    for label, x in (extra_lines or {}).items():
        ax.axvline(x, color="tab:red", linewidth=1, label=label)
    ax.set_title(f"{title}\nmin {stats.min:.3g} max {stats.max:.3g} mean {stats.mean:.3g} "
                 f"std {stats.std:.3g}", fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count (log scale)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
