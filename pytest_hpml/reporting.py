"""The end of a run: tables in the terminal, report files, dashboard exports and charts (a
pytest plugin module). Only the controller writes.

Every output is written on its own: one that fails (a read-only folder, a path that is a
folder, a damaged baseline) is one line, "hpml: cannot write PATH: reason", and the others
are still written. When tests passed but an output failed, the exit status is OUTPUTS_FAILED.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_hpml.machine.fingerprint import fingerprint
from pytest_hpml.policy import path_option
from pytest_hpml.report import (
    comparison_summary,
    exports,
    files,
    plots,
    summary,
    tables,
    verdict_lines,
)
from pytest_hpml.report.files import REPORT_SUFFIXES, Output, writable_problem
from pytest_hpml.selection import profile_of
from pytest_hpml.session import add_option, run_of, writes_outputs

#: Exit status of a run whose tests passed but whose outputs could not all be written.
OUTPUTS_FAILED = 6


def report_path(text: str) -> str:
    if not text:
        return text  # bare --hpml-report: the tables in the terminal only
    name = Path(text).name.lower()
    if name in REPORT_SUFFIXES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is an extension without a file name; write e.g. --hpml-report=report"
            f"{name}")
    if Path(text).suffix.lower() not in REPORT_SUFFIXES:
        # Also catches `--hpml-report tests/`, where argparse took a path to run as the value.
        raise argparse.ArgumentTypeError(
            f"{text!r}: the report file must end in .md, .json or .csv "
            "(write --hpml-report=PATH, or put --hpml-report after the paths to run)")
    return text


def summary_path(text: str) -> str:
    if Path(text).suffix.lower() != ".md":
        raise argparse.ArgumentTypeError(f"{text!r}: the summary is Markdown; name a .md file "
                                         "(e.g. --hpml-summary=hpml-summary.md)")
    return text


def _same_file_problem(files: list[tuple[str, Path]]) -> str | None:
    """Two outputs named to the same file: the one written last would silently replace the
    other."""
    seen: dict[str, str] = {}
    for option, path in files:
        key = os.path.realpath(path)
        if key in seen:
            return (f"{seen[key]} and {option} name the same file ({path}); give each output "
                    "its own path")
        seen[key] = option
    return None


def report_files(opt: argparse.Namespace) -> list[str]:
    """The files --hpml-report names (it may be given once per format); none for a bare
    --hpml-report, which prints the tables only."""
    return [path for path in (opt.hpml_report or []) if path]


def comparison_title(opt: argparse.Namespace) -> str | None:
    """The title of the run's comparison table: with the stored baseline (--hpml-compare) or
    with a git ref measured now (--hpml-compare-ref); None for a run that compared nothing."""
    ref = getattr(opt, "hpml_compare_ref", None)
    if ref:
        return f"Comparison with {ref}, measured now"
    return "Comparison with baseline" if opt.hpml_compare else None


def pytest_hpml_outputs(config: pytest.Config) -> list[Output]:
    """The report, the dashboard exports and the charts this run asked for."""
    opt = config.option
    run = run_of(config)
    profile = profile_of(config)
    outputs = []
    # The writers are looked up when called (not bound now): each output is its own function.
    for name in report_files(opt):
        def write(report: Path = Path(name)) -> list[Path]:
            return [files.write_report(report, run.records, fingerprint(), profile,
                                       comparison_title(opt))]

        outputs.append(Output("report", Path(name), write))
    if opt.hpml_summary:
        summary_path = Path(opt.hpml_summary)
        outputs.append(Output("summary", summary_path, lambda: [comparison_summary.write_summary(
            summary_path, run.records, comparison_title(opt), run.new_levels)]))
    if opt.hpml_export_benchmark_action:
        action = Path(opt.hpml_export_benchmark_action)
        outputs.append(Output("github-action-benchmark", action, lambda: (
            exports.write_benchmark_action(action, run.records, run.say_once))))
    if opt.hpml_export_bencher:
        bencher = Path(opt.hpml_export_bencher)
        outputs.append(Output("bencher", bencher, lambda: [
            exports.write_bencher(bencher, run.records, run.say_once)]))
    if opt.hpml_plots:
        charts = Path(opt.hpml_plots)

        def draw() -> list[Path]:
            if not run.records:
                return []
            if not plots.matplotlib_available():
                run.say_once(plots.NO_MATPLOTLIB)
                return []
            return plots.draw_all(charts, run.records, run.say_once)

        outputs.append(Output("plots", charts, draw))
    return outputs


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    # Outputs are the outer run's (rerun=False): a confirmation rerun writes only its own JSON
    # report.
    add_option(parser, "--hpml-report", nargs="?", const="", default=None, type=report_path,
               action="append", rerun=False, metavar="PATH",
               help="print one table per experiment at the end; with =PATH also write it as "
                    "Markdown, JSON or CSV (by extension); repeat it for several formats")
    add_option(parser, "--hpml-summary", metavar="PATH", default=None, type=summary_path,
               rerun=False, help="write a short Markdown of the comparison for a pull-request "
               "comment or a CI job summary: the verdict lines, blind spots and new levels")
    add_option(parser, "--hpml-no-timings-table", action="store_true", pin=True, rerun=False,
               help="print no table of the run's timings at the end (-q: one line)")
    add_option(parser, "--hpml-export-benchmark-action", metavar="PATH", default=None,
               type=path_option, rerun=False,
               help="write github-action-benchmark custom JSON (PATH: smaller is better; "
                    "PATH-bigger.json: bigger is better)")
    add_option(parser, "--hpml-export-bencher", metavar="PATH", default=None, type=path_option,
               rerun=False, help="write Bencher Metric Format JSON")
    add_option(parser, "--hpml-plots", metavar="DIR", default=None, type=path_option,
               rerun=False, help="write PNG charts to DIR (needs matplotlib)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hpml_pivot(index, columns, metrics, split): show this "
                            "experiment as pivot tables")
    config.addinivalue_line("markers", "hpml_plot(filename, x, y, series, where, kind): draw a "
                            "chart of this experiment")
    if not writes_outputs(config):
        return
    opt = config.option
    # Paths that cannot be written are said before the tests run, not after them.
    for option, value, folder in (*(("--hpml-report", name, False)
                                    for name in report_files(opt)),
                                  ("--hpml-summary", opt.hpml_summary, False),
                                  ("--hpml-export-benchmark-action",
                                   opt.hpml_export_benchmark_action, False),
                                  ("--hpml-export-bencher", opt.hpml_export_bencher, False),
                                  ("--hpml-plots", opt.hpml_plots, True)):
        if value:
            problem = writable_problem(Path(value), folder=folder)
            if problem:
                raise pytest.UsageError(f"{option}={value}: cannot write there: {problem}")
    named = [(f"--{dest.replace('_', '-')}={value}", Path(value)) for dest, value in (
        *(("hpml_report", name) for name in report_files(opt)),
        ("hpml_summary", opt.hpml_summary), ("hpml_export_bencher", opt.hpml_export_bencher),
        ("hpml_export_benchmark_action", opt.hpml_export_benchmark_action)) if value]
    if opt.hpml_export_benchmark_action:
        second = exports.bigger_path(Path(opt.hpml_export_benchmark_action))
        named.append((f"--hpml-export-benchmark-action={opt.hpml_export_benchmark_action} "
                      f"(its {second})", second))
    problem = _same_file_problem(named)
    if problem:
        raise pytest.UsageError(problem)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not writes_outputs(config):
        return
    run = run_of(config)
    config.hook.pytest_hpml_finish(session=session)
    # Files list rows as the tables do, not in the order xdist workers happened to finish.
    run.records = tables.in_report_order(run.records)
    failed = False
    outputs = [o for found in config.hook.pytest_hpml_outputs(config=config) for o in found]
    if outputs and not run.ran:
        # --co, a collection error, -k matching nothing: empty files would replace good ones.
        run.say_once("no test ran, so nothing was written ("
                     + ", ".join(o.label for o in outputs) + "); the previous files are as "
                     "they were")
        return
    for output in outputs:
        try:
            run.written += [_written(p) for p in output.write()]
        except KeyboardInterrupt as exc:
            cause = getattr(exc, "signal_name", "Ctrl-C")
            run.say_once(f"cannot write {output.path}: interrupted ({cause}); the "
                         f"{output.label} was not written and any previous file is intact")
            failed = True
        except Exception as exc:  # noqa: BLE001 - every output is independent of the others
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            where = getattr(exc, "filename", None) or output.path
            run.say_once(f"cannot write {where}: {reason}")
            failed = True
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = OUTPUTS_FAILED


def _summary(tr: pytest.TerminalReporter, config: pytest.Config, records: list) -> None:
    """The short table of every run that timed something (pytest-benchmark prints one by
    default); -q shortens it to one line, --hpml-no-timings-table (or --benchmark-disable, which
    times nothing) leaves it out."""
    if config.option.hpml_no_timings_table or not records:
        return
    if config.get_verbosity() < 0:
        line = summary.summary_line(records)
        if line:
            tr.write_line(f"hpml: {line}")
        return
    sort = getattr(config.option, "benchmark_sort", None)  # pytest-benchmark's, read here too
    for table in summary.summary_tables(records, sort if sort in summary.SORT_KEYS else None):
        tr.write_sep("-", table.title)
        tr.write(tables.render([replace(table, title="")]).lstrip("\n"))


def _written(path: Path) -> str:
    """"PATH", or "PATH -> TARGET" where PATH is a symlink whose target was written."""
    if Path(path).is_symlink():
        return f"{path} -> {os.path.realpath(path)}"
    return str(path)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not writes_outputs(config):
        return
    run = run_of(config)
    tr = terminalreporter
    if config.option.hpml_report is not None and run.records:
        tr.write_sep("=", f"hpml report (profile {profile_of(config)})")
        tr.write(tables.render(tables.build_tables(run.records,
                                                   comparison_title(config.option))))
    else:
        _summary(tr, config, run.records)
    if config.option.hpml_report is None and comparison_title(config.option):
        # No table printed: the verdicts a reader must see, and the blind spots, one line each.
        for line in (verdict_lines.verdict_lines(run.records)
                     + verdict_lines.blind_spot_lines(run.records)):
            tr.write_line(f"hpml: {line}")
    for message in run.messages:
        tr.write_line(f"hpml: {message}")
    for path in run.written:
        tr.write_line(f"hpml: wrote {path}")
