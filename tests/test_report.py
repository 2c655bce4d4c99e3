"""The report: a table per experiment, pivots, files by extension, and the same under xdist."""

from __future__ import annotations

import csv
import json

import pytest
from hpml_testing import FAST

from pytest_hpml.machine.fingerprint import fingerprint
from pytest_hpml.report.tables import Table, build_tables, render
from pytest_hpml.results import Metric, Record, Verdict

EXPERIMENTS = {
    "test_copy": """
        import pytest

        @pytest.mark.parametrize("dtype", ["fp32", "fp16"])
        @pytest.mark.parametrize("numel", [1000, 3000])
        def test_copy(hpml, numel, dtype):
            hpml.experiment = "Copy bandwidth"
            size = 4 if dtype == "fp32" else 2
            hpml.record("time", numel * 1.1e-9, unit="s", better="lower")
            hpml.record("bandwidth", numel * size * 2.2e9, unit="B/s", better="higher")

        def test_model(hpml):
            hpml.param(data="synthetic-MNIST")
            hpml.record("parameters", 101_770, better=None)
            hpml.record("flops", 2.5e9, unit="FLOP", better=None)
    """,
    "test_pivot": """
        import pytest

        @pytest.mark.hpml_pivot(index=["k"], columns="config", metrics=["time"], split="memory")
        @pytest.mark.parametrize("memory", ["explicit", "unified"])
        @pytest.mark.parametrize("config", ["one", "many"])
        @pytest.mark.parametrize("k", [1, 7])
        def test_vector_add(hpml, k, config, memory):
            factor = 2 if memory == "unified" else 1
            hpml.record("time", k * 1.3e-3 * factor * (1 if config == "one" else 0.25),
                        unit="s", better="lower")
            hpml.record("ignored_in_pivot", 1.0, better=None)
    """,
}


def _report_section(text: str) -> str:
    """The lines from the report banner to the end of its tables."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "hpml report (profile" in line)
    end = next(i for i in range(start + 1, len(lines))
               if lines[i].startswith(("hpml: wrote", "=", "hpml: ")))
    return "\n".join(lines[start:end])


def test_terminal_report_has_a_table_per_experiment(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**EXPERIMENTS)
    result = pytester.runpytest(*FAST, "--hpml-report")
    result.assert_outcomes(passed=13)
    section = _report_section(result.stdout.str())
    copy = section[section.index("Copy bandwidth"):section.index("test_copy.py::test_model")]
    # Parameters are columns, metrics carry their (scaled) unit in the header.
    assert copy.splitlines()[2].split() == ["numel", "dtype", "time", "[us]", "bandwidth",
                                            "[TB/s]"]
    assert [line.split() for line in copy.splitlines()[4:8]] == [
        ["1000", "fp32", "1.100", "8.800"], ["1000", "fp16", "1.100", "4.400"],
        ["3000", "fp32", "3.300", "26.40"], ["3000", "fp16", "3.300", "13.20"]]
    model = section[section.index("test_copy.py::test_model"):]
    assert model.splitlines()[2].split() == ["data", "parameters", "flops", "[GFLOP]"]
    assert model.splitlines()[4].split() == ["synthetic-MNIST", "101,770", "2.500"]


def test_pivot_layout(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pivot=EXPERIMENTS["test_pivot"])
    result = pytester.runpytest(*FAST, "--hpml-report")
    result.stdout.fnmatch_lines([
        "test_pivot.py::test_vector_add (memory=explicit)",
        "",
        "k    one time [ms]    many time [ms]",
        "---*",
        "1    1.300            0.3250",
        "7    9.100            2.275",
        "",
        "test_pivot.py::test_vector_add (memory=unified)",
        "",
        "k    one time [ms]    many time [ms]",
        "---*",
        "1    2.600            0.6500",
        "7    18.20            4.550",
    ])
    assert "ignored_in_pivot" not in result.stdout.str()


def test_report_files_by_extension(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_copy=EXPERIMENTS["test_copy"])
    for suffix in ("md", "json", "csv"):
        result = pytester.runpytest(*FAST, f"--hpml-report=out/report.{suffix}")
        result.assert_outcomes(passed=5)
        result.stdout.fnmatch_lines([f"hpml: wrote out/report.{suffix}"])
    out = pytester.path / "out"

    md = (out / "report.md").read_text()
    assert md.startswith("# pytest-hpml report\n\nProfile: quick. Machine: ")
    assert "## Copy bandwidth" in md
    assert "| numel | dtype | time [us] | bandwidth [TB/s] |" in md.replace("  ", " ").replace(
        "  ", " ").replace("  ", " ")

    document = json.loads((out / "report.json").read_text())
    assert document["fingerprint"] == json.loads(json.dumps(fingerprint()))
    assert document["profile"] == "quick"
    assert len(document["records"]) == 5
    first = document["records"][0]
    assert first["params"] == {"numel": 1000, "dtype": "fp32"}
    assert first["metrics"][0] == {"name": "time", "value": pytest.approx(1.1e-6), "unit": "s",
                                   "better": "lower"}

    with (out / "report.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 2 + 2
    assert rows[0]["experiment"] == "Copy bandwidth" and rows[0]["metric"] == "time"
    assert rows[0]["params"] == "numel=1000;dtype=fp32"
    assert float(rows[1]["value"]) == pytest.approx(8.8e12) and rows[1]["unit"] == "B/s"


def test_json_report_keeps_samples(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_t(hpml):\n    hpml.time(sum, range(100))\n")
    pytester.runpytest(*FAST, "--hpml-report=r.json").assert_outcomes(passed=1)
    metric = json.loads((pytester.path / "r.json").read_text())["records"][0]["metrics"][0]
    assert metric["name"] == "time" and len(metric["samples"]) >= 10
    assert min(metric["samples"]) <= metric["value"] <= max(metric["samples"])


def test_report_under_xdist_matches_the_serial_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**EXPERIMENTS)
    serial = pytester.runpytest(*FAST, "--hpml-report=serial.json")
    serial.assert_outcomes(passed=13)
    parallel = pytester.runpytest_subprocess(*FAST, "-n", "2", "--hpml-report=parallel.json")
    parallel.assert_outcomes(passed=13)
    assert "2 workers" in parallel.stdout.str()
    assert _report_section(parallel.stdout.str()) == _report_section(serial.stdout.str())
    records = [json.loads((pytester.path / f"{name}.json").read_text())["records"]
               for name in ("serial", "parallel")]
    assert records[0] == records[1]


# -- tables from records (no pytest run) --------------------------------------------------------


def test_tables_group_rows_by_experiment_in_order() -> None:
    records = [
        Record("b", "Second", {"n": 2}, [Metric("x", 1.5)], order=["f.py", 20, 0]),
        Record("a2", "First", {"n": 2}, [Metric("x", 2.5)], order=["f.py", 10, 1]),
        Record("a1", "First", {"n": 1}, [Metric("x", 1.5)], order=["f.py", 10, 0]),
    ]
    tables = build_tables(records)
    assert [t.title for t in tables] == ["First", "Second"]
    assert tables[0].rows == [[1, "1.500"], [2, "2.500"]]


def test_warnings_and_notes_are_shown_under_the_table() -> None:
    record = Record("t", "E", {}, [Metric("x", 1.0, note="interpreted Triton")],
                    warnings=["time: noisy timing"])
    text = render(build_tables([record]))
    assert "  t: time: noisy timing" in text and "  note: interpreted Triton" in text


def test_comparison_table_only_when_comparing() -> None:
    metric = Metric("time", 3e-3, "s", "lower")
    record = Record("t", "E", {"k": 1}, [metric], verdicts={"time": Verdict(
        "regressed", unit="s", baseline=1.5e-3, current=3e-3, change=1.0)})
    assert [t.title for t in build_tables([record])] == ["E"]
    table = build_tables([record], "Comparison with baseline")[-1]
    assert table.title == "Comparison with baseline"
    assert table.rows == [["E", "k=1", "time", "1.500 ms", "3.000 ms", "+100.0%", "regressed",
                           ""]]


def test_a_change_relative_to_the_yardstick_is_marked_and_explained() -> None:
    # 7.2 -> 5.1 ms as measured, +7.6 % relative to the yardstick: the cell must not read as a
    # contradiction of the two columns beside it.
    relative = Verdict("unchanged", unit="s", baseline=7.2e-3, current=5.1e-3, change=0.076,
                       relative=True)
    measured = Verdict("regressed", unit="s", baseline=1e-3, current=2e-3, change=1.0)
    metrics = [Metric("time", 5.1e-3, "s", "lower"), Metric("other", 2e-3, "s", "lower")]
    table = build_tables([Record("t", "E", {}, metrics, verdicts={
        "time": relative, "other": measured})], "Comparison with baseline")[-1]
    assert [row[5] for row in table.rows] == ["+7.6%†", "+100.0%"]
    assert any(n.startswith("†: the change relative to the machine's yardstick")
               for n in table.notes)
    plain = build_tables([Record("t", "E", {}, metrics[1:], verdicts={"other": measured})],
                         "Comparison with baseline")[-1]
    assert not any("yardstick" in n for n in plain.notes)


def test_markdown_rendering() -> None:
    text = render([Table("T", ["a", "b [ms]"], [["1", "2.000"]])], "github")
    assert text.startswith("## T\n\n| a ")


def test_a_sweeps_verdict_lines_put_in_words_only_the_rows_they_show(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml.report import verdict_lines

    records = []
    for i in range(200):
        record = Record(f"t.py::t[size={i}]", "t.py::t", params={"size": i},
                        order=["t.py", 0, 0, i], metrics=[Metric("time", 2.0, "s", "lower")])
        record.verdicts = {"time": Verdict("ambiguous", "s", 1.0, 2.0, 1.0)}
        records.append(record)
    records[150].verdicts = {"time": Verdict("regressed", "s", 1.0, 3.0, 2.0)}
    said = []
    real = verdict_lines.comparison_row
    monkeypatch.setattr(verdict_lines, "comparison_row", lambda *a: said.append(a) or real(*a))
    lines = verdict_lines.verdict_lines(records)
    assert lines == [
        "regressed: t[size=150] time: 1.000 s -> 3.000 s (+200.0%)",
        *(f"ambiguous: t[size={i}] time: 1.000 s -> 2.000 s (+100.0%)" for i in range(4)),
        "ambiguous: t time: 195 more rows of the test too (the report lists each)"]
    assert len(said) == 5  # the lines shown, not the 200 rows
