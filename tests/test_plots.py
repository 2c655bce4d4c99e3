"""Charts: line charts and rooflines from hpml_plot markers, drawn by the controller."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpml_testing import FAST

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

EXPERIMENT = """
    import pytest

    @pytest.mark.hpml_plot("times.png", x="k", y="time", series="config", title="Sweep")
    @pytest.mark.hpml_plot("explicit.png", x="k", y="time", series="config",
                           where={"config": "explicit"}, logx=False, logy=False)
    @pytest.mark.hpml_plot("nothing.png", x="k", y="time", where={"config": "absent"})
    @pytest.mark.parametrize("config", ["explicit", "unified"])
    @pytest.mark.parametrize("k", [1, 10, 100])
    def test_sweep(hpml, k, config):
        hpml.record("time", k * (1e-3 if config == "explicit" else 2e-3), unit="s",
                    better="lower")
        path = hpml.plot_path("per-test.png")
        assert path is not None and path.parent.is_dir()

    @pytest.mark.hpml_plot("roofline.png", kind="roofline", x="intensity", y="achieved",
                           label="model", peak="peak", bandwidth="bw")
    @pytest.mark.parametrize("model", ["small", "large"])
    def test_roofline(hpml, model):
        hpml.record("intensity", 2.0 if model == "small" else 50.0, unit="FLOP/B",
                    better=None)
        hpml.record("achieved", 1e11 if model == "small" else 8e11, unit="FLOP/s")
        hpml.record("peak", 1e12, unit="FLOP/s")
        hpml.record("bw", 1e11, unit="B/s")

    @pytest.mark.hpml_plot("utilization.png", kind="timeseries", y=["gpu_util", "mem_util"],
                           series="run")
    @pytest.mark.parametrize("run", ["before", "after"])
    def test_series(hpml, run):
        hpml.setting("sample_interval", 0.5, unit="s")
        hpml.record("gpu_util", 60.0, unit="%", better=None, samples=[50.0, 60.0, 70.0])
        hpml.record("mem_util", 20.0, unit="%", better=None, samples=[10.0, 20.0, 30.0])
"""


def test_plots_are_written(pytester: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib")
    pytester.makepyfile(test_charts=EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-plots=charts")
    result.assert_outcomes(passed=10)
    charts = pytester.path / "charts"
    written = sorted(p.name for p in charts.iterdir())
    # No rows match the `where` of nothing.png, so it is not drawn; per-test.png is the tests'.
    assert written == ["explicit.png", "roofline.png", "times.png", "utilization.png"]
    for name in written:
        data = Path(charts, name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    result.stdout.fnmatch_lines(["hpml: wrote charts/times.png"])


def test_plot_path_is_none_without_plots_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_x(hpml):
            assert hpml.plot_path("x.png") is None
        """
    )
    pytester.runpytest(*FAST).assert_outcomes(passed=1)


def test_hpml_plot_needs_a_file_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.hpml_plot(x="k", y="time")
        def test_x(hpml):
            hpml.record("time", 1.0, unit="s")
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret != 0
    assert "hpml_plot needs a file name" in result.stdout.str()


def test_an_unknown_chart_kind_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.hpml_plot("x.png", kind="pie", x="k", y="time")
        def test_x(hpml):
            hpml.record("time", 1.0, unit="s")
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret != 0
    assert "kind is one of line, roofline, timeseries" in result.stdout.str()


def _tick_labels(axis) -> list[str]:
    axis.figure.canvas.draw()
    labels = axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
    return [t.get_text() for t in labels if t.get_text()]


def test_log_axes_within_a_decade_are_labelled_as_plain_numbers() -> None:
    pytest.importorskip("matplotlib")
    from pytest_hpml.report.plots import _plain_log_ticks, _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        # Speedup of 1, 2 and 4 workers: within one decade on both axes.
        ax.plot([1, 2, 4], [1.0, 1.31, 1.36])
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax.xaxis, [1, 2, 4], at_values=True)
        _plain_log_ticks(ax.yaxis, [1.0, 1.31, 1.36])
        xs, ys = _tick_labels(ax.xaxis), _tick_labels(ax.yaxis)
        assert xs == ["1", "2", "4"]
        assert ys and not [s for s in ys if "times" in s or "^" in s], ys
    finally:
        plt.close(fig)
