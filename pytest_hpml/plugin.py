"""pytest hooks: options, markers, collection, record transport and the end-of-session report."""

from __future__ import annotations

import argparse
import os
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_hpml import devices, selection
from pytest_hpml.baselines import BaselineError
from pytest_hpml.results import Record
from pytest_hpml.session import HpmlSession, is_controller

SESSION_KEY = pytest.StashKey[HpmlSession]()
FIXTURE_KEY = pytest.StashKey["object"]()

MARKERS = {
    "gpu": "needs a CUDA GPU; skipped with a reason when there is none",
    "multi_gpu(n)": "needs at least n CUDA GPUs visible to this process",
    "fp64": "runs in float64",
    "fp32": "runs in float32",
    "fp16": "runs in float16",
    "bf16": "runs in bfloat16",
    "int8": "runs in int8",
    "vector_add": "lab: vector add on CPU and GPU, explicit vs unified memory",
    "mlp": "lab: 2-layer MLP, sequential vs data-parallel",
    "data_parallel": "lab: data-parallel training and collectives",
    "complexity": "lab: parameters, memory, FLOPs and roofline of CNNs",
    "tta": "lab: time to accuracy and its stability",
    "quantization": "lab: post-training int8 quantization",
    "slow": "takes minutes even in the quick profile",
    "hpml(**options)": "timing and comparison options for this test: min_samples, max_time, "
                       "target_rse, warmup, cold_l2, tolerance",
    "hpml_sweep(argname, quick, full)": "parametrize argname by the size profile",
    "hpml_devices(*names)": "the devices of the `device` parameter: 'cpu' and/or 'cuda'",
    "hpml_pivot(index, columns, metrics, split)": "show this experiment as pivot tables",
    "hpml_plot(filename, x, y, series, where, kind)": "draw a chart of this experiment",
}


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give a fraction such as 0.1 for 10 %") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; give a fraction such as 0.1")
    return value


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    return parse


def _report_path(text: str) -> str:
    from pytest_hpml.report.files import REPORT_SUFFIXES

    if text and not text.lower().endswith(REPORT_SUFFIXES):
        # Also catches `--hpml-report tests/`, where argparse took a path to run as the value.
        raise argparse.ArgumentTypeError(
            f"{text!r}: the report file must end in .md, .json or .csv "
            "(write --hpml-report=PATH, or put --hpml-report after the paths to run)")
    return text


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpml", "pytest-hpml: timing, baselines and reports")
    group.addoption("--hpml-profile", choices=selection.PROFILES, default=None,
                    help="size profile: quick (small sizes, minutes on a CPU) or full (the "
                         "experiments as published). Default: full with a GPU, else quick.")
    group.addoption("--hpml-report", nargs="?", const="", default=None, type=_report_path,
                    metavar="PATH", help="print one table per experiment at the end; with "
                    "=PATH also write it as Markdown, JSON or CSV (by extension)")
    group.addoption("--hpml-compare", action="store_true",
                    help="compare with this machine's baseline; fail tests whose metrics regressed")
    group.addoption("--hpml-save-baseline", action="store_true",
                    help="merge this run's results into this machine's baseline file")
    group.addoption("--hpml-baselines", metavar="DIR", default=None,
                    help="folder of baseline files (default: <rootdir>/baselines)")
    group.addoption("--hpml-tolerance", type=_fraction, default=0.10, metavar="FRACTION",
                    help="default relative change before a metric counts as changed (0.10)")
    group.addoption("--hpml-alpha", type=_fraction, default=0.01, metavar="P",
                    help="significance level of the Mann-Whitney U test (0.01)")
    group.addoption("--hpml-max-time", type=_positive(float), default=None, metavar="SECONDS",
                    help="cap on the sampling time of one timing (default 3 s full, 0.5 s quick)")
    group.addoption("--hpml-min-samples", type=_positive(int), default=10, metavar="N",
                    help="minimum samples per timing (10)")
    group.addoption("--hpml-target-rse", type=_positive(float), default=0.005, metavar="FRACTION",
                    help="stop sampling at this relative standard error of the mean (0.005)")
    group.addoption("--hpml-export-benchmark-action", metavar="PATH", default=None,
                    help="write github-action-benchmark custom JSON (PATH: smaller is better; "
                         "PATH-bigger.json: bigger is better)")
    group.addoption("--hpml-export-bencher", metavar="PATH", default=None,
                    help="write Bencher Metric Format JSON")
    group.addoption("--hpml-plots", metavar="DIR", default=None,
                    help="write PNG charts to DIR (needs matplotlib)")


def pytest_configure(config: pytest.Config) -> None:
    for marker, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {help_text}")
    worker = getattr(config, "workerinput", {}).get("workerid")
    # Both must happen before CUDA or Triton kernels are touched by test modules.
    devices.pin_worker_to_gpu(worker)
    devices.enable_triton_interpreter_without_gpu()
    profile = config.option.hpml_profile or (
        "full" if devices.physical_gpu_count() > 0 else "quick")
    hs = config.stash[SESSION_KEY] = HpmlSession(config, profile)
    config.pluginmanager.register(RecordCollector(hs), f"hpml-records-{id(config)}")
    if hs.compare and is_controller(config):
        try:
            hs.baseline()  # a corrupt baseline stops the run before any test, naming the file
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = config.stash[SESSION_KEY]
    lines = [f"hpml: profile {s.profile}, GPUs visible: {devices.visible_gpu_count()}"]
    workers = _xdist_workers(config)
    gpus = devices.physical_gpu_count()
    if gpus and workers > gpus:
        lines.append(f"hpml: {workers} xdist workers share {gpus} GPU(s): GPU timings of "
                     f"concurrent tests disturb each other; use -n {gpus} for figures")
    if devices.triton_interpreted():
        lines.append("hpml: Triton runs in its interpreter (TRITON_INTERPRET=1): kernel "
                     "timings are correctness runs, not performance figures")
    return lines


def _xdist_workers(config: pytest.Config) -> int:
    """The number of xdist workers this run starts (0 without -n)."""
    value = getattr(config.option, "numprocesses", None)
    if value in (None, 0):
        return 0
    if isinstance(value, int):
        return value
    return os.cpu_count() or 1  # "auto" and "logical": xdist picks about one per core


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    session = metafunc.config.stash[SESSION_KEY]
    for argname, values in selection.sweep_values(metafunc, session.profile):
        metafunc.parametrize(argname, values)
    if "device" in metafunc.fixturenames and not _already_parametrized(metafunc, "device"):
        metafunc.parametrize("device", selection.device_params(metafunc))


def _already_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test parametrizes `name` itself ("a,b", ["a", "b"] or argnames=...)."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        if name in (str(a).strip() for a in argnames):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [i for i in items if i.get_closest_marker("gpu") or
                 i.get_closest_marker("multi_gpu")]
    if not gpu_items:
        return
    have = devices.visible_gpu_count() if devices.physical_gpu_count() else 0
    cuda_ok = have > 0 and devices.cuda_usable()
    for item in gpu_items:
        need = item.get_closest_marker("multi_gpu")
        n = int(need.args[0]) if need and need.args else 1
        if not cuda_ok:
            item.add_marker(pytest.mark.skip(reason=devices.NO_CUDA_REASON))
        elif have < n:
            pinned = " (xdist pins each worker to one GPU: run without -n)" if hasattr(
                config, "workerinput") else ""
            item.add_marker(pytest.mark.skip(
                reason=f"needs {n} GPUs, {have} visible{pinned}"))


@pytest.fixture
def hpml(request: pytest.FixtureRequest):
    """Time, record and check one experiment (see docs/API.md)."""
    import torch

    from pytest_hpml.fixture import Hpml

    session = request.config.stash[SESSION_KEY]
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("device") if callspec else None
    device = torch.device("cuda" if name == "cuda" else "cpu")
    fixture = Hpml(session, request.node, device)
    request.node.stash[FIXTURE_KEY] = fixture
    return fixture


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    report = yield
    if call.when != "call":
        return report
    fixture = item.stash.get(FIXTURE_KEY, None)
    if fixture is None:
        return report
    session = item.config.stash[SESSION_KEY]
    records = fixture.records()
    if session.compare and records:
        try:
            regressions = session.compare_records(records)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        if regressions and report.passed:
            report.outcome = "failed"
            report.longrepr = "hpml: regressed against the baseline:\n  " + "\n  ".join(
                regressions)
    # Plain data on the report: xdist serializes it to the controller with the report.
    report.hpml_records = [r.to_dict() for r in records]
    return report


class RecordCollector:
    """Gathers records from call reports: local ones, or the workers' ones under xdist."""

    def __init__(self, session: HpmlSession) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "hpml_records", None)
        if data and report.when == "call":
            records = [Record.from_dict(d) for d in data]
            self.session.records.extend(records)
            if report.failed:
                # A wrong result or a regression must not become the next run's baseline.
                self.session.failed_ids.update(r.id for r in records)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not is_controller(config):
        return
    hs = config.stash[SESSION_KEY]
    from pytest_hpml.fingerprint import fingerprint
    from pytest_hpml.report.tables import in_report_order

    # Files list rows as the tables do, not in the order xdist workers happened to finish.
    records = hs.records = in_report_order(hs.records)

    written: list[Path] = []
    try:
        passed = [r for r in records if r.id not in hs.failed_ids]
        if hs.save and len(passed) < len(records):
            hs.say_once(f"--hpml-save-baseline: {len(records) - len(passed)} row(s) of failed "
                        "tests not saved; their previous baseline entries are kept.")
        if hs.save and passed:
            from pytest_hpml import baselines

            written.append(baselines.save(hs.baseline_path, fingerprint(), hs.profile, passed))
        if hs.report:
            from pytest_hpml.report.files import write_report

            written.append(write_report(Path(hs.report), records, fingerprint(), hs.profile,
                                        hs.compare))
        if config.option.hpml_export_benchmark_action:
            from pytest_hpml.report.exports import write_benchmark_action

            written += write_benchmark_action(Path(config.option.hpml_export_benchmark_action),
                                              records)
        if config.option.hpml_export_bencher:
            from pytest_hpml.report.exports import write_bencher

            written.append(write_bencher(Path(config.option.hpml_export_bencher), records))
        if hs.plots_dir is not None and records:
            from pytest_hpml.report.plots import draw_all, matplotlib_available

            if matplotlib_available():
                written += draw_all(hs.plots_dir, records)
            else:
                hs.say_no_matplotlib()
    except BaselineError as exc:
        hs.say_once(f"baseline not saved: {exc}")
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    hs.written = written


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not is_controller(config):
        return
    hs = config.stash[SESSION_KEY]
    tr = terminalreporter
    if hs.report is not None and hs.records:
        from pytest_hpml.report.tables import build_tables, render

        tr.write_sep("=", f"hpml report (profile {hs.profile})")
        tr.write(render(build_tables(hs.records, hs.compare)))
    for message in hs.messages:
        tr.write_line(f"hpml: {message}")
    for path in getattr(hs, "written", []):
        tr.write_line(f"hpml: wrote {path}")
