"""Per-process state of a pytest-hpml run: options, collected records, ceilings, baseline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml import baselines
from pytest_hpml.fingerprint import fingerprint, machine_key, software_changes
from pytest_hpml.results import Record

if TYPE_CHECKING:  # torch is imported only by tests that use it: plain tests stay fast
    import torch

    from pytest_hpml.ceilings import Ceilings
    from pytest_hpml.timing import Clock


class HpmlSession:
    def __init__(self, config: pytest.Config, profile: str) -> None:
        self.config = config
        self.profile = profile
        opt = config.option
        self.compare: bool = opt.hpml_compare
        self.save: bool = opt.hpml_save_baseline
        self.tolerance: float = opt.hpml_tolerance
        self.alpha: float = opt.hpml_alpha
        self.report: str | None = opt.hpml_report
        self.plots_dir: Path | None = Path(opt.hpml_plots) if opt.hpml_plots else None
        self.baselines_dir = Path(opt.hpml_baselines or Path(config.rootpath, "baselines"))
        self.timing_defaults: dict[str, Any] = {
            # Quick runs are smoke runs of the labs on a small CPU: a shorter cap keeps them quick.
            "max_time": opt.hpml_max_time or (3.0 if profile == "full" else 0.5),
            "min_samples": opt.hpml_min_samples,
            "target_rse": opt.hpml_target_rse,
        }
        self.records: list[Record] = []
        self.failed_ids: set[str] = set()  # rows of failed tests: reported, never saved
        self.messages: list[str] = []  # said once in the terminal summary
        self._ceilings: dict[str, Ceilings] = {}
        self._baseline: baselines.Baseline | None = None
        self._baseline_loaded = False
        self._said_no_matplotlib = False

    # -- shared with the fixture ----------------------------------------------------------------
    def ceilings_for(self, device: torch.device, clock_for: Callable[[], Clock]) -> Ceilings:
        from pytest_hpml.ceilings import Ceilings

        key = str(device)
        if key not in self._ceilings:
            self._ceilings[key] = Ceilings(device, self.profile, clock_for)
        return self._ceilings[key]

    def plot_path(self, filename: str) -> Path | None:
        if self.plots_dir is None:
            return None
        from pytest_hpml.report.plots import matplotlib_available

        if not matplotlib_available():
            self.say_no_matplotlib()
            return None
        self.plots_dir.mkdir(parents=True, exist_ok=True)
        return self.plots_dir / filename

    def say_no_matplotlib(self) -> None:
        self.say_once("--hpml-plots: matplotlib is not installed, so no charts are drawn "
                      "(pip install 'pytest-hpml[plots]').")

    def say_once(self, message: str) -> None:
        if message not in self.messages:
            self.messages.append(message)

    # -- baselines ------------------------------------------------------------------------------
    @property
    def machine(self) -> str:
        return machine_key(fingerprint())

    @property
    def baseline_path(self) -> Path:
        return baselines.baseline_path(self.baselines_dir, self.machine, self.profile)

    def baseline(self) -> baselines.Baseline | None:
        """Loaded on first use; a corrupt file raises BaselineError (the caller reports it)."""
        if not self._baseline_loaded:
            self._baseline_loaded = True
            found = baselines.load(self.baseline_path)
            if found is None:
                self.say_once(f"--hpml-compare: no baseline for this machine ({self.machine}) "
                              f"and profile {self.profile!r} at {self.baseline_path}; every "
                              "metric is 'new'. Record one with --hpml-save-baseline.")
            elif machine_key(found.fingerprint) != self.machine:
                self.say_once(f"--hpml-compare: {found.path} was recorded on "
                              f"{machine_key(found.fingerprint)!r}, not on this machine "
                              f"({self.machine!r}): not compared.")
                found = None
            else:
                changes = software_changes(found.fingerprint, fingerprint())
                if changes:
                    self.say_once("--hpml-compare: software changed since the baseline: "
                                  + "; ".join(changes))
            self._baseline = found
        return self._baseline

    def compare_records(self, records: list[Record]) -> list[str]:
        """Fill verdicts in place; returns one line per regressed metric."""
        base = self.baseline()
        lines = []
        for record in records:
            if base is None:
                for m in record.metrics:
                    baselines.compare_metric(m, None)
                continue
            record.metrics.extend(baselines.compare_record(record, base, self.tolerance,
                                                           self.alpha))
            for m in record.metrics:
                if m.verdict == "regressed":
                    p = f", Mann-Whitney p={m.p_value:.2g}" if m.p_value is not None else ""
                    tol = m.tolerance if m.tolerance is not None else self.tolerance
                    lines.append(f"{record.id} {m.name}: {m.baseline:.6g} -> {m.value:.6g} "
                                 f"{m.unit} ({m.change:+.1%}, tolerance {tol:.0%}{p})")
        return lines


def is_controller(config: pytest.Config) -> bool:
    """True unless this is an xdist worker: only the controller writes files."""
    return not hasattr(config, "workerinput")
