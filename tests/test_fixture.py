"""The `hpml` fixture: timing through it, metrics with units and directions, rows, params."""

from __future__ import annotations

import numpy as np
import pytest
from hpml_testing import metrics_by_test, run_with_json

EXPERIMENT = """
    import numpy as np
    import pytest

    CALLS = []

    @pytest.mark.hpml(min_samples=12)
    def test_time(hpml):
        timing = hpml.time(lambda n: CALLS.append(n), 3, name="append")
        # One warm-up call that is no sample, then n samples of `inner` calls each.
        assert len(CALLS) == 1 + timing.n * timing.inner
        assert timing.n >= 12
        assert timing.median > 0 and timing.min <= timing.median
        assert len(timing.samples) == timing.n
        # The spread figures describe the samples handed back, not some other set.
        q25, q75 = np.percentile(timing.samples, [25, 75])
        assert timing.iqr == pytest.approx(q75 - q25)
        assert timing.cv == pytest.approx(np.std(timing.samples, ddof=1)
                                          / np.mean(timing.samples))

    def test_timing_measured_elsewhere(hpml):
        steps = [0.2, 0.1, 0.3]  # per-step times a distributed run sent back
        timing = hpml.record_timing("step_time", steps)
        assert timing.median == 0.2 and timing.recorded_as == "step_time"
        epoch = hpml.record("epoch_time", sum(steps), unit="s", better="lower", timing=timing)
        assert epoch.derived_from == "step_time"
        assert epoch.samples == pytest.approx([0.6, 0.3, 0.9])  # scaled with each step
        with pytest.raises(ValueError, match="at least one sample"):
            hpml.record_timing("empty", [])

    def test_rates(hpml):
        from pytest_hpml.measure.timing import Timing

        timing = Timing(samples=[1e-3, 2e-3, 4e-3])  # median 2 ms
        bw = hpml.record_bandwidth("bandwidth", 4e9, timing)
        fl = hpml.record_flops("throughput", 6e9, timing)
        assert (bw.value, bw.unit, bw.better) == (2e12, "B/s", "higher")
        assert (fl.value, fl.unit, fl.better) == (3e12, "FLOP/s", "higher")
        assert bw.samples == [4e12, 2e12, 1e12]

    def test_record(hpml):
        m = hpml.record("peak_memory", 3 * 2**20, unit="B", better="lower", tolerance=0.5,
                        note="allocator")
        assert m.tolerance == 0.5
        hpml.record("accuracy", 0.9, unit="%", better="higher")
        hpml.record("parameters", 1234, better=None)  # informational: no direction
        hpml.record("accuracy", 0.95, unit="%", better="higher")  # the last one wins
        with pytest.raises(ValueError, match="better must be"):
            hpml.record("x", 1.0, better="up")
        with pytest.raises(TypeError, match="must be a number"):
            hpml.record("x", "fast", better="lower")

    @pytest.mark.hpml(tolerance=0.3)
    def test_marker_tolerance(hpml):
        assert hpml.record("t", 1.0, unit="s", better="lower").tolerance == 0.3
        assert hpml.record("u", 1.0, better="lower", tolerance=0.05).tolerance == 0.05

    def test_rows_and_params(hpml):
        hpml.experiment = "Layers"
        hpml.param(data="synthetic-MNIST")
        for layer, size in [("conv1", 10), ("fc", 20)]:
            with hpml.row(layer=layer) as r:
                r.record("weights", size, unit="B", better=None)
        assert hpml.plot_path("x.png") is None  # no --hpml-plots
        assert hpml.profile in ("quick", "full")
        assert hpml.device.type == "cpu"

    def test_records_nothing(hpml):
        pass
"""


def test_fixture_end_to_end(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    result, document = run_with_json(pytester)
    result.assert_outcomes(passed=7)
    metrics = metrics_by_test(document)
    name = "test_fixture_end_to_end.py::"

    append = metrics[name + "test_time"]["append"]
    assert (append["unit"], append["better"]) == ("s", "lower")
    assert len(append["samples"]) >= 12
    q25, q75 = np.percentile(append["samples"], [25, 75])
    assert append["iqr"] == pytest.approx(q75 - q25)  # the report's IQR is its samples'

    rates = metrics[name + "test_rates"]
    assert rates["bandwidth"]["value"] == 2e12 and rates["throughput"]["unit"] == "FLOP/s"

    rec = metrics[name + "test_record"]
    assert list(rec) == ["peak_memory", "parameters", "accuracy"]
    assert rec["accuracy"]["value"] == 0.95
    assert "better" not in rec["parameters"]  # None: informational
    assert rec["peak_memory"]["note"] == "allocator"

    tol = metrics[name + "test_marker_tolerance"]
    assert tol["t"]["tolerance"] == 0.3 and tol["u"]["tolerance"] == 0.05

    rows = {r["id"]: r for r in document["records"] if r["experiment"] == "Layers"}
    assert set(rows) == {name + "test_rows_and_params[layer=conv1]",
                         name + "test_rows_and_params[layer=fc]"}
    for r in rows.values():
        assert r["params"]["data"] == "synthetic-MNIST"
    # The test's own row recorded nothing, so it is not a row of the report.
    assert name + "test_rows_and_params" not in metrics
    assert name + "test_records_nothing" not in metrics


def test_rows_of_a_parametrized_test_keep_their_params(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("batch", [8, 16])
        def test_steps(hpml, batch):
            for step in range(2):
                with hpml.row(step=step) as r:
                    r.record("loss", batch + step, better="lower")
        """
    )
    _, document = run_with_json(pytester)
    ids = [r["id"] for r in document["records"]]
    assert ids == [f"test_rows_of_a_parametrized_test_keep_their_params.py::test_steps"
                   f"[{b}-step={s}]" for b in (8, 16) for s in (0, 1)]
    assert [(r["params"]["batch"], r["params"]["step"]) for r in document["records"]] == [
        (8, 0), (8, 1), (16, 0), (16, 1)]


def test_noisy_timing_warning_reaches_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import itertools
        import time

        durations = itertools.cycle([0.0005, 0.0005, 0.002])

        def test_noisy(hpml):
            hpml.time(lambda: time.sleep(next(durations)))
        """
    )
    result, document = run_with_json(pytester)
    assert any("noisy timing" in w for w in document["records"][0]["warnings"])
    result.stdout.fnmatch_lines(["*test_noisy: time: noisy timing: IQR is *% of the median*"])
