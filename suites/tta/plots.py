"""The accuracy-curve chart (only with --hpml-plots and matplotlib installed): validation
accuracy against training time for every run, the target, and where each run reached it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .training import Run


def accuracy_curves(path: Path | None, runs: Mapping[str, Sequence[Run]], target: float,
                    title: str) -> None:
    """One line per run, one colour per seeding; a dot where the run reached the target."""
    if path is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for color, (seeding, group) in zip(("tab:blue", "tab:orange", "tab:green"), runs.items(),
                                       strict=False):
        for i, run in enumerate(group):
            ax.plot([e.train_seconds for e in run.curve], [e.accuracy for e in run.curve],
                    color=color, alpha=0.7, linewidth=1,
                    label=f"{seeding} ({len(group)} runs)" if i == 0 else None)
            if run.at_target is not None:
                ax.plot([run.at_target.train_seconds], [run.at_target.accuracy], "o",
                        color=color, markersize=4)
    ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g} %")
    ax.set_xlabel("training time [s] (evaluations excluded)")
    ax.set_ylabel("validation accuracy [%]")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
