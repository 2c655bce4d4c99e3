"""The experiment tables as a reader reads them: one unit for the columns of one unit, a
spread only where one was measured, the settings a pivot leaves out said under it."""

from __future__ import annotations

from pytest_hpml.report.tables import build_tables, pivot_tables, wide_table
from pytest_hpml.results import Metric, Record


def _header(table, name: str) -> str:
    return next(h for h in table.headers if h.split(" [")[0].split(" ")[-1] == name)


def test_columns_of_one_unit_share_their_scale() -> None:
    # The MLP profile: all_reduce alone (751 MB/s either way with 2 ranks) beside the published
    # 6.1 GB/s algbw. Scaled column by column they read "GB/s" and "MB/s" for the same value.
    measured = Record("a", "E", {"phase": "all_reduce alone"},
                      [Metric("algbw", 7.512e8, "B/s", "higher"),
                       Metric("busbw", 7.512e8, "B/s", "higher")])
    published = Record("p", "E", {"phase": "published"},
                       [Metric("algbw", 6.1e9, "B/s", kind="reference", source="seed 000")])
    table = wide_table("E", [measured, published])
    assert _header(table, "algbw") == "algbw [GB/s]"
    assert _header(table, "busbw") == "busbw [GB/s]"
    assert [row[1:] for row in table.rows] == [["0.7512", "0.7512"], ["6.100", ""]]


def test_columns_of_one_unit_far_apart_keep_their_own_scale() -> None:
    # A kernel's microseconds beside a whole program's seconds: one unit would print 0.00005 s.
    row = Record("r", "E", {}, [Metric("kernel_time", 5e-5, "s", "lower"),
                                Metric("time", 5.0, "s", "lower")])
    table = wide_table("E", [row])
    assert table.headers == ["kernel_time [us]", "time [s]"]


def test_a_column_of_zeros_keeps_its_own_unit() -> None:
    # A kernel's resources: shared memory in kB, no spills. "spill_bytes [kB] 0" would print a
    # later 16 B spill as 0.016.
    row = Record("r", "E", {}, [Metric("spill_bytes", 0, "B", "lower"),
                                Metric("shared_memory", 65536, "B", "lower"),
                                Metric("stack_frame", 0, "B", "lower")])
    assert wide_table("E", [row]).headers == ["spill_bytes [B]", "shared_memory [kB]",
                                              "stack_frame [B]"]


def test_a_rate_of_things_per_second_takes_a_prefix() -> None:
    row = Record("r", "E", {}, [Metric("images_per_second", 10150.0, "1/s", "higher")])
    table = wide_table("E", [row])
    assert table.headers == ["images_per_second [k/s]"]
    assert table.rows == [["10.15"]]


def test_a_spread_is_shown_only_where_one_was_measured() -> None:
    one_epoch = Metric("time_per_epoch", 0.01496, "s", "lower", samples=[0.01496], iqr=0.0)
    none_reached = Metric("not_reached", 0.0, better="lower", samples=[0.0] * 5, iqr=0.0)
    four_epochs = Metric("time_per_epoch", 0.01486, "s", "lower",
                         samples=[0.0146, 0.0149, 0.0150, 0.0151], iqr=4.1e-4)
    table = wide_table("E", [Record("a", "E", {"epochs": 1}, [one_epoch, none_reached]),
                             Record("b", "E", {"epochs": 4}, [four_epochs])])
    assert table.rows == [[1, "14.96", "0"], [4, "14.86 ± 0.4100", ""]]


def test_a_pivot_says_the_settings_its_columns_leave_out() -> None:
    # The vector add's "% of copy bandwidth" divides by the copy ceiling, a setting of each
    # row that the pivot's metrics do not list: the table still says what it was.
    rows = []
    for config in ("C++ loop", "torch CPU"):
        row = Record(config, "E", {"k_million": 1, "config": config})
        row.add(Metric("bandwidth", 3.8e10, "B/s", "higher"))
        row.add(Metric("copy_bandwidth", 3.254e10, "B/s", kind="setting"))
        row.add(Metric("pct_copy_bandwidth", 116.8, "%", "higher"))
        rows.append(row)
    (table,) = pivot_tables("E", rows, {"index": ["k_million"], "columns": "config",
                                        "metrics": ["bandwidth", "pct_copy_bandwidth"]})
    assert "setting copy_bandwidth: 32.54 GB/s" in table.notes
    assert not [h for h in table.headers if " copy_bandwidth [" in h]
    # A wide table shows settings as columns already: no note repeats them.
    (wide,) = build_tables(rows[:1])
    assert not [n for n in wide.notes if n.startswith("setting ")]


def test_parameters_every_row_shares_are_said_once_in_the_title() -> None:
    rows = [Record(f"r{k}", "Q1 (cpu)", {"device": "cpu", "data": "synthetic", "k": k},
                   [Metric("time", k * 1e-3, "s", "lower")]) for k in (1, 2)]
    table = wide_table("Q1 (cpu)", rows)
    # device=cpu is in the title already; data is said once; k varies and stays a column.
    assert table.title == "Q1 (cpu) (data=synthetic)"
    assert table.headers == ["k", "time [ms]"]
    # One row keeps its columns: there is nothing to fold.
    assert wide_table("Q1", rows[:1]).headers == ["device", "data", "k", "time [ms]"]
