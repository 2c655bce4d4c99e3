"""`python -m pytest_hpml dashboard BASELINES... [--report RUN.json]... -o SITE/`: its
arguments and what it prints (pytest_hpml.cli wires it in)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from pytest_hpml.report.dashboard import judging, site


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baselines", type=Path, nargs="+", metavar="BASELINES",
                        help="baseline files, or folders of them (their *.json files)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="SITE",
                        help="the folder the site is written to (replaced whole; a new or "
                             "empty folder, or one an earlier build wrote)")
    parser.add_argument("--report", type=Path, action="append", default=[], metavar="RUN",
                        help="a JSON report of the latest run (--hpml-report=run.json with "
                             "--hpml-compare): its verdicts and their reasons are shown; "
                             "repeatable, one per machine")
    defaults = judging.Rules()
    parser.add_argument("--tolerance", type=float, default=defaults.tolerance,
                        metavar="FRACTION", help="as --hpml-tolerance "
                        f"({defaults.tolerance})")
    parser.add_argument("--alpha", type=float, default=defaults.alpha, metavar="P",
                        help=f"as --hpml-alpha ({defaults.alpha})")
    parser.add_argument("--drift", type=float, default=defaults.drift, metavar="FRACTION",
                        help=f"as --hpml-drift ({defaults.drift})")
    parser.add_argument("--max-detectable", type=float, default=defaults.max_detectable,
                        metavar="FRACTION", help="as --hpml-max-detectable "
                        f"({defaults.max_detectable})")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Build the site; one line per file left out (on `err`); exit status 1 when no baseline
    could be read, 2 when the site cannot be built, else 0."""
    if not (0 <= args.tolerance < 10 and 0 < args.alpha < 1 and 0 <= args.drift < 1
            and args.max_detectable > 0):
        print("error: --tolerance and --drift take fractions such as 0.1, --alpha one in "
              "(0, 1), --max-detectable one above 0", file=err)
        return 2
    rules = judging.Rules(args.tolerance, args.alpha, args.drift, args.max_detectable)
    try:
        built = site.build(args.baselines, args.output, args.report, rules)
    except site.DashboardError as exc:
        print(f"error: {exc}", file=err)
        return 2
    for line in built.problems:
        print(f"dashboard: left out {line}", file=err)
    out.write(f"dashboard: {built.metrics} metric(s) of {built.tests} test(s) on "
              f"{len(built.machines)} machine(s), {built.pages} metric page(s): "
              f"{built.site / 'index.html'}\n")
    return 0 if built.metrics or not built.problems else 1
