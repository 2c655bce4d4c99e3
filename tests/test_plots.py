"""Charts: line charts and rooflines from hpml_plot markers, drawn by the controller."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpml_testing import FAST

from pytest_hpml.results import Metric, Record

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
    from pytest_hpml.report.axes import plain_ticks
    from pytest_hpml.report.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        # Speedup of 1, 2 and 4 workers: within one decade on both axes.
        ax.plot([1, 2, 4], [1.0, 1.31, 1.36])
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_ticks(ax.xaxis, [1, 2, 4], log=True, at_values=True)
        plain_ticks(ax.yaxis, [1.0, 1.31, 1.36], log=True)
        xs, ys = _tick_labels(ax.xaxis), _tick_labels(ax.yaxis)
        assert xs == ["1", "2", "4"]
        assert ys and not [s for s in ys if "times" in s or "^" in s], ys
    finally:
        plt.close(fig)


# -- what a reader sees: axis titles with units, named legends, scales -------------------------

def _row(params: dict, **metrics: tuple) -> Record:
    """A record with metrics given as name=(value, unit) or name=(value, unit, samples)."""
    record = Record(id=repr(params), experiment="e", params=params)
    for name, (value, unit, *samples) in metrics.items():
        record.add(Metric(name, value, unit, better=None, samples=samples[0] if samples else None))
    return record


@pytest.fixture
def figures():
    """Closes every figure a test draws."""
    pytest.importorskip("matplotlib")
    from pytest_hpml.report.plots import _pyplot

    drawn: list = []
    yield drawn
    for fig in drawn:
        _pyplot().close(fig)


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_line_chart_names_its_units_and_its_series(figures) -> None:
    from pytest_hpml.report.plots import line_figure

    # The all_reduce sweep: bytes against bus bandwidth, one line per world size.
    rows = [_row({"workers": 2, "size": size}, busbw=(bw, "B/s"))
            for size, bw in ((8192, 7.4e6), (1 << 20, 1.05e9), (1 << 24, 9.7e8))]
    fig = line_figure(rows, {"x": "size", "y": "busbw", "series": "workers", "logx": True,
                             "logy": True, "xlabel": "message size [B]"})
    figures.append(fig)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "busbw [MB/s]"  # the unit the median value reads best in
    assert ax.get_xlabel() == "message size [B]"
    assert _legend(ax) == ["workers=2"]  # not "2"
    ticks = _tick_labels(ax.xaxis) + _tick_labels(ax.yaxis)
    assert ticks and not [t for t in ticks if "e+" in t or "^" in t], ticks
    # The values are drawn in the unit of the title: 1.05e9 B/s is 1050 MB/s.
    assert max(ax.lines[0].get_ydata()) == pytest.approx(1050)


def test_log_scales_are_opt_in_and_a_linear_axis_starts_at_zero(figures) -> None:
    from pytest_hpml.report.plots import line_figure

    rows = [_row({"workers": w, "curve": "strong"}, speedup=(s, ""))
            for w, s in ((1, 1.0), (2, 0.7), (4, 0.75))]
    fig = line_figure(rows, {"x": "workers", "y": "speedup", "series": "curve"})
    figures.append(fig)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
    assert ax.get_ylim()[0] == 0  # a speedup of 0.7 drawn from 0.7 would look like nothing
    assert _tick_labels(ax.xaxis) == ["1", "2", "4"]
    assert _legend(ax) == ["strong"]
    fig = line_figure(rows, {"x": "workers", "y": "speedup", "logx": True, "logy": True})
    figures.append(fig)
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == ("log", "log")


def test_a_title_that_names_its_unit_is_kept_with_the_values_unscaled(figures) -> None:
    from pytest_hpml.report.plots import line_figure

    rows = [_row({"k": k}, time=(t, "s")) for k, t in ((1, 2e-3), (10, 2e-2))]
    fig = line_figure(rows, {"x": "k", "y": "time", "ylabel": "program time [s]"})
    figures.append(fig)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "program time [s]"
    assert list(ax.lines[0].get_ydata()) == [2e-3, 2e-2]
    fig = line_figure(rows, {"x": "k", "y": "time", "ylabel": "program time"})
    figures.append(fig)
    assert fig.axes[0].get_ylabel() == "program time [ms]"
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx([2, 20])


def test_a_utilization_chart_runs_from_0_to_100_with_named_lines(figures) -> None:
    from pytest_hpml.report.plots import timeseries_figure

    rows = [_row({"recipe": "small-cnn"}, cpu_util=(49.9, "%", [50.9, 47.9, 51.8, 49.9]),
                 sample_interval=(0.25, "s"))]
    fig = timeseries_figure(rows, {"y": ["cpu_util"], "series": "recipe"})
    figures.append(fig)
    ax = fig.axes[0]
    assert ax.get_ylim() == (0, 100)
    assert ax.get_ylabel() == "cpu_util [%]"
    assert _legend(ax) == ["small-cnn"]
    # Memory in bytes: from 0, in the unit that fits.
    rows = [_row({"recipe": "r"}, gpu_memory_used=(3e9, "B", [2.9e9, 3.1e9]))]
    fig = timeseries_figure(rows, {"y": ["gpu_memory_used"], "series": "recipe",
                                   "ylabel": "GPU memory used"})
    figures.append(fig)
    assert fig.axes[0].get_ylabel() == "GPU memory used [GB]"
    assert fig.axes[0].get_ylim()[0] == 0


def test_roofline_labels_do_not_overlap_and_the_roof_is_in_a_fitting_unit(figures) -> None:
    from pytest_hpml.report.axes import text_box
    from pytest_hpml.report.plots import roofline_figure

    # The CPU's forward passes: five points within a factor 2 of one another.
    points = {"resnet18": (23.3, 6.79e10), "resnet50": (16.1, 6.57e10),
              "vgg16": (23.5, 6.93e10), "vgg19": (28.3, 7.06e10),
              "resnet18_cifar": (27.9, 8.22e10)}
    rows = [_row({"model": m}, ai=(x, "FLOP/B"), achieved=(y, "FLOP/s"), peak=(1.012e11, "FLOP/s"),
                 bw=(3.254e10, "B/s")) for m, (x, y) in points.items()]
    fig = roofline_figure(rows, {"x": "ai", "y": "achieved", "label": "model", "peak": "peak",
                                 "bandwidth": "bw"})
    figures.append(fig)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "achieved [GFLOP/s]"
    (roof,) = _legend(ax)
    assert "101.2 GFLOP/s" in roof and "32.54 GB/s" in roof and "TFLOP" not in roof
    renderer = fig.canvas.get_renderer()
    boxes = {a.get_text(): text_box(a, renderer) for a in ax.texts}
    assert sorted(boxes) == sorted(points)
    overlapping = [(a, b) for a in boxes for b in boxes if a < b and boxes[a].overlaps(boxes[b])]
    assert not overlapping
    ticks = _tick_labels(ax.yaxis)
    assert ticks and not [t for t in ticks if "e+" in t or "times" in t], ticks
