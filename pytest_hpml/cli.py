"""`python -m pytest_hpml`: the command line around saved runs. A tool, not part of a pytest
run: it uses the stage packages (compare, report, machine) and never a hook module.

    python -m pytest_hpml compare OLD NEW [--format terminal|markdown|csv]
        The comparison --hpml-compare makes, of two JSON reports or baseline files (or a
        pytest-benchmark run as OLD); exit status 1 when a metric regressed or went missing.
        A regression that the files cannot confirm (one process a side, nothing measured
        again) is "unconfirmed" and does not fail unless --fail-unconfirmed.
    python -m pytest_hpml show FILE
        What a baseline (or a report) holds: tests, metrics, runs kept, their spread, accepted
        levels, machine and versions.
    python -m pytest_hpml seed RUN [--baselines DIR] [--profile quick|full]
        Seed this machine's baseline from a pytest-benchmark run (compare/seed.py).
    python -m pytest_hpml dashboard BASELINES... [--report RUN.json]... -o SITE/
        A static site of every metric's history (report/dashboard/).
    python -m pytest_hpml merge SHARD_DIR... --baselines DIR [--report PATH]...
        A suite run as shards, brought together (compare/shards.py): the shards' saves into DIR,
        their rows into each report; exit status 1 when a merged verdict failed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from pytest_hpml.compare import baselines, engine, results_files, seed, shards, verdicts
from pytest_hpml.compare.noise import DEFAULT_DRIFT
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.machine.fingerprint import SOFTWARE_KEYS, machine_key
from pytest_hpml.report import files, tables
from pytest_hpml.report.dashboard import command as dashboard_command
from pytest_hpml.report.units import format_value
from pytest_hpml.results import Record

FORMATS = {"terminal": "simple", "markdown": "github"}


class CliError(Exception):
    """A file the command cannot use; the message names it and what to give instead."""


def _document(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from exc


def read_any(path: Path) -> tuple[list[Record], str]:
    """The records of a pytest-hpml report or baseline, or of a pytest-benchmark run (a file,
    or its storage folder), and what the file is, in words."""
    evidence = _evidence(path)
    return evidence.records, _what(evidence)


def _evidence(path: Path) -> results_files.Evidence:
    try:
        return results_files.read_evidence(path)
    except (ValueError, baselines.BaselineError, AttributeError) as exc:
        raise CliError(str(exc)) from exc


def _what(evidence: results_files.Evidence) -> str:
    if evidence.seeded_from:
        return evidence.seeded_from
    return (f"pytest-hpml {evidence.kind} ({evidence.machine or 'unknown machine'}, profile "
            f"{evidence.profile})")


# -- compare -------------------------------------------------------------------------------------

def compare(old: Path, new: Path, fmt: str, rules: Rules, out: TextIO, *,
            allow_missing: bool = False, allow_other_machine: bool = False) -> int:
    before, after = _evidence(old), _evidence(new)
    differ = [f"{what}: {a} in OLD, {b} in NEW" for what, a, b in (
        ("machine", before.machine, after.machine), ("profile", before.profile, after.profile))
        if a and b and a != b]
    if differ and not allow_other_machine:
        raise CliError("OLD and NEW were not measured alike (" + "; ".join(differ) + "): their "
                       "timings are not comparable. Compare runs of one machine and profile, "
                       "or give --allow-other-machine to compare them anyway")
    records = results_files.judge_all(before, after.records, rules)
    gone = [r for r in records if r.metrics == [] and r.verdicts and r.id not in
            {x.id for x in after.records}]
    if allow_missing:
        for row in gone:
            row.expected_missing = ["*"]
    failing = [line for r in records for line in engine.failures(r, rules)]
    if fmt == "csv":
        files.write_csv(out, records)
        return 1 if failing else 0
    bullet = "- " if fmt == "markdown" else ""
    out.write(f"{bullet}old: {old}: {_what(before)}\n{bullet}new: {new}: {_what(after)}\n")
    if differ:
        out.write(f"{bullet}compared anyway (--allow-other-machine): " + "; ".join(differ)
                  + "\n")
    out.write("\n")
    table = tables.comparison_table(records)
    if table is None:
        out.write("no measured metric to compare\n")
        return 0
    if before.seeded_from:
        table.notes.append(verdicts.seeded_basis(before.seeded_from))
    out.write(tables.render([table], FORMATS[fmt]))
    counts = Counter(v.outcome for r in records for v in r.verdicts.values())
    out.write("\n" + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
              + "\n")
    if gone:
        said = "said, not failed (--allow-missing)" if allow_missing else "they fail the " \
            "comparison; --allow-missing when NEW ran part of the suite"
        out.write(f"\n{len(gone)} row(s) of OLD that NEW does not have: {said}\n")
    if failing:
        heading = "## Failed the comparison" if fmt == "markdown" else "failed the comparison:"
        out.write(f"\n{heading}\n" + "".join(f"{bullet or '  '}{line}\n" for line in failing))
    return 1 if failing else 0


# -- show ----------------------------------------------------------------------------------------

def _spread(metric: dict[str, Any]) -> str:
    """The spread of the stored runs (stdev of their logs, as a relative change)."""
    if metric.get("seeded_from"):
        return "unknown (seeded)"
    runs = [v for v in metric.get("history") or [] if isinstance(v, (int, float)) and v > 0]
    if len(runs) < 2:
        return "unknown (1 run)"
    return f"±{math.expm1(statistics.stdev(math.log(v) for v in runs)):.1%}"


def _accepted(metric: dict[str, Any]) -> str:
    """The levels a save accepted (issue 20's "accepted" list, oldest first)."""
    unit = metric.get("unit", "")
    levels = []
    for level in metric.get("accepted") or []:
        when = str(level.get("on", "?"))[:16].replace("T", " ")
        levels.append(f"{when}: {format_value(level.get('before'), unit)} -> "
                      f"{format_value(level.get('after'), unit)}")
    return "; ".join(levels)


def _rows(raw: list[Any]) -> list[list[Any]]:
    rows = []
    for record in raw:
        for m in record.get("metrics", []):
            kind = m.get("kind", "measured")
            rows.append([record["id"], m["name"] if kind == "measured" else f"{m['name']} "
                         f"({kind})", format_value(m.get("value"), m.get("unit", ""), m.get("iqr")),
                         len(m.get("history") or [m.get("value")]) if kind == "measured" else "",
                         _spread(m) if kind == "measured" else "", _accepted(m)])
    return rows


def show(path: Path, out: TextIO) -> int:
    path = Path(path)
    document = _document(path) if path.is_file() else None
    if document is None or seed.is_pytest_benchmark(document):
        records, source = read_any(path)
        raw = [r.to_dict() for r in records]
        facts: dict[str, Any] = {}
        out.write(f"{path}: {source}\n")
    elif not isinstance(document, dict):
        raise CliError(f"{path} is neither a pytest-hpml report or baseline nor a "
                       f"pytest-benchmark run (it holds a JSON {type(document).__name__})")
    else:
        if str(document.get("schema", "")).startswith("pytest-hpml/baseline"):
            try:
                loaded = baselines.load(path)  # checked as a comparison would check it
            except baselines.BaselineError as exc:
                raise CliError(str(exc)) from exc
            raw, facts, kind = list(loaded.records.values()), loaded.fingerprint, "baseline"
        elif isinstance(document.get("records"), list):
            raw, facts, kind = document["records"], document.get("fingerprint") or {}, "report"
        else:
            raise CliError(f"{path} is neither a pytest-hpml report or baseline nor a "
                           "pytest-benchmark run")
        out.write(f"{path}: pytest-hpml {kind}, profile {document.get('profile')}\n")
    if facts:
        gpu = f"{facts['gpu']} x{facts.get('gpu_count') or 1}" if facts.get("gpu") else "no GPU"
        out.write(f"machine: {machine_key(facts)} ({facts.get('cpu')}, "
                  f"{facts.get('cpu_cores')} cores; {gpu})\n")
        out.write("versions: " + ", ".join(f"{k} {facts.get(k)}" for k in SOFTWARE_KEYS
                                           if facts.get(k)) + "\n")
    try:
        rows = _rows(raw)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # A report is not checked on reading as a baseline is: a hand-edited or cut one.
        what = f"lacks {exc}" if isinstance(exc, KeyError) else "is not an object"
        raise CliError(f"{path} is a damaged pytest-hpml report: a record or metric {what}; "
                       "write it again with --hpml-report") from None
    out.write(f"{len(raw)} test(s), {len(rows)} metric(s)\n\n")
    notes = sorted({verdicts.seeded_basis(m["seeded_from"]) for r in raw
                    for m in r.get("metrics", []) if m.get("seeded_from")})
    table = tables.Table("", ["test", "metric", "value", "runs kept", "between-run spread",
                              "accepted levels"], rows, notes)
    out.write(tables.render([table]).lstrip("\n"))
    return 0


# -- seed ----------------------------------------------------------------------------------------

def seed_baseline(run: Path, directory: Path, profile: str | None, out: TextIO) -> int:
    from pytest_hpml.machine.fingerprint import fingerprint
    from pytest_hpml.machine.gpus import visible_gpu_count

    # The profile a plain pytest run on this machine gets: full with a GPU, quick without.
    profile = profile or ("full" if visible_gpu_count() > 0 else "quick")
    try:
        done = seed.seed(run, directory, fingerprint(), profile)
    except (ValueError, baselines.BaselineError) as exc:
        raise CliError(str(exc)) from exc
    out.write(f"seeded {len(done.seeded)} test(s) into {done.path} from {done.source}\n")
    if done.kept:
        out.write(f"kept {len(done.kept)} test(s) the baseline already held (pytest-hpml's own "
                  "runs are never replaced by a seed)\n")
    for line in done.left_out:
        out.write(f"left out: {line}\n")
    if done.seeded:
        out.write("Their between-run spread is unknown until pytest-hpml has saved its own runs: "
                  "the next pytest --hpml-save-baseline replaces the seeded values.\n")
    return 0


# -- merge ---------------------------------------------------------------------------------------

def merge_shards(folders: list[Path], directory: Path, reports: list[Path],
                 allow_other_machine: bool, out: TextIO, err: TextIO) -> int:
    try:
        merged = shards.combine(folders, directory, reports, allow_other_machine)
    except (shards.ShardError, baselines.BaselineError) as exc:
        raise CliError(str(exc)) from exc
    out.write(f"merged {len(folders)} shard(s): {len(merged.records)} row(s)\n")
    for done in merged.baselines:
        rows = sum(len(r) for r in done.taken.values())
        out.write(f"{done.path}: {rows} row(s) saved by {len(done.taken)} shard(s)\n")
    for path in merged.written:
        out.write(f"wrote {path}\n")
    for problem in merged.problems:
        err.write(f"error: {problem}\n")
    failing = merged.failures
    if failing:
        out.write("failed the comparison:\n" + "".join(f"  {line}\n" for line in failing))
    return 1 if failing else 2 if merged.problems else 0


# -- the command line ----------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m pytest_hpml", description=(
        "pytest-hpml's command line around saved runs: compare two of them, show one, seed a "
        "baseline from pytest-benchmark"))
    commands = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmp = commands.add_parser("compare", help="compare NEW with OLD (reports, baselines, or a "
                              "pytest-benchmark run as OLD); exit status 1 on a regression")
    cmp.add_argument("old", type=Path, metavar="OLD")
    cmp.add_argument("new", type=Path, metavar="NEW")
    cmp.add_argument("--format", choices=("terminal", "markdown", "csv"), default="terminal")
    cmp.add_argument("--tolerance", type=float, default=verdicts.DEFAULT_TOLERANCE,
                     metavar="FRACTION", help="relative change still counted as unchanged "
                     f"({verdicts.DEFAULT_TOLERANCE})")
    cmp.add_argument("--alpha", type=float, default=verdicts.DEFAULT_ALPHA, metavar="P",
                     help=f"significance level of a verdict ({verdicts.DEFAULT_ALPHA})")
    cmp.add_argument("--drift", type=float, default=DEFAULT_DRIFT, metavar="FRACTION",
                     help="drift between occasions assumed until the history knows it, as "
                          f"--hpml-drift ({DEFAULT_DRIFT}; 0: none)")
    cmp.add_argument("--max-detectable", type=float,
                     default=verdicts.DEFAULT_MAX_DETECTABLE, metavar="FRACTION",
                     help="a detectable change beyond this is a blind spot, as "
                          f"--hpml-max-detectable ({verdicts.DEFAULT_MAX_DETECTABLE}; 0: never)")
    cmp.add_argument("--strict-blind-spots", action="store_true",
                     help="a blind spot fails, as --hpml-strict-blind-spots")
    cmp.add_argument("--fail-unconfirmed", action="store_true",
                     help="a regression the two files cannot confirm (one process a side, no "
                          "spread between processes known: 'unconfirmed') fails too")
    cmp.add_argument("--allow-missing", action="store_true",
                     help="rows of OLD that NEW lacks are said and do not fail (NEW ran part of "
                          "the suite)")
    cmp.add_argument("--allow-other-machine", action="store_true",
                     help="compare runs of different machines or size profiles (refused "
                          "otherwise: their timings are not comparable)")
    shw = commands.add_parser("show", help="what a baseline or report holds")
    shw.add_argument("file", type=Path, metavar="FILE")
    sd = commands.add_parser("seed", help="seed this machine's baseline from a pytest-benchmark "
                             "run (.benchmarks/<machine>/NNNN_*.json, --benchmark-json's file, "
                             "or the .benchmarks folder: its newest run)")
    sd.add_argument("run", type=Path, metavar="RUN")
    sd.add_argument("--baselines", type=Path, default=Path("baselines"), metavar="DIR",
                    help="the folder of baseline files (baselines, as pytest's default)")
    sd.add_argument("--profile", choices=("quick", "full"), default=None,
                    help="the size profile of the runs to compare with (default: full with a "
                         "GPU, quick without, as pytest's)")
    dsh = commands.add_parser("dashboard", help="a static site of every metric's history "
                              "(baseline files, and the latest runs' reports)")
    dashboard_command.add_arguments(dsh)
    mrg = commands.add_parser("merge", help="bring a suite's shards together: their saves into "
                              "--baselines, their rows into each --report; exit status 1 when "
                              "a merged verdict failed")
    mrg.add_argument("folders", type=Path, nargs="+", metavar="SHARD_DIR",
                     help=f"a shard's folder: its {shards.REPORT} (--hpml-report=SHARD_DIR/"
                          f"{shards.REPORT}) and, when it saved, its {shards.BASELINES}/ "
                          f"(--hpml-baselines=SHARD_DIR/{shards.BASELINES}, a copy of DIR)")
    mrg.add_argument("--baselines", type=Path, required=True, metavar="DIR",
                     help="the baselines folder the shards copied, into which their saves go")
    mrg.add_argument("--report", type=Path, action="append", default=[], metavar="PATH",
                     help="write the merged report here (.md, .json or .csv; repeatable)")
    mrg.add_argument("--allow-other-machine", action="store_true",
                     help="merge shards of different machines or size profiles (refused "
                          "otherwise: their timings are not comparable)")
    return main


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        if args.command == "compare":
            if not (0 <= args.tolerance < 10 and 0 < args.alpha < 1 and 0 <= args.drift < 10
                    and 0 <= args.max_detectable):
                raise CliError("--tolerance, --drift and --max-detectable take a fraction such "
                               "as 0.1, --alpha one in (0, 1)")
            return compare(args.old, args.new, args.format,
                           Rules(args.tolerance, args.alpha, args.drift,
                                 args.max_detectable or None, args.strict_blind_spots,
                                 unconfirmed_alone=True,
                                 fail_unconfirmed=args.fail_unconfirmed), out,
                           allow_missing=args.allow_missing,
                           allow_other_machine=args.allow_other_machine)
        if args.command == "show":
            return show(args.file, out)
        if args.command == "dashboard":
            return dashboard_command.run(args, out, sys.stderr)
        if args.command == "merge":
            return merge_shards(args.folders, args.baselines, args.report,
                                args.allow_other_machine, out, sys.stderr)
        return seed_baseline(args.run, args.baselines, args.profile, out)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
