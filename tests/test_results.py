"""Metrics and records: plain data that survives JSON (xdist transport, baselines, reports)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from pytest_hpml.frozen import evolve
from pytest_hpml.plain_numbers import json_safe
from pytest_hpml.results import Accepted, Metric, Record, Replicates, Verdict


def test_metric_round_trip_drops_unset_fields() -> None:
    m = Metric("time", 1e-3, "s", "lower", samples=[1e-3, 2e-3], tolerance=0.2, iqr=1e-4)
    data = m.to_dict()
    assert data == {"name": "time", "value": 1e-3, "unit": "s", "better": "lower",
                    "samples": [1e-3, 2e-3], "tolerance": 0.2, "iqr": 1e-4}
    assert Metric.from_dict(json.loads(json.dumps(data))) == m


def test_record_round_trip_through_json() -> None:
    record = Record(
        id="t.py::test_x[fp16-1]", experiment="Copy",
        params={"dtype": torch.float16, "device": torch.device("cpu"), "k": np.int64(3),
                "ratio": 0.5, "inf": math.inf, "name": "x", "flag": True, "none": None},
        metrics=[Metric("time", 2e-3, "s", "lower")],
        order=["t.py", 3, 0, 1, 0], device="cpu", warnings=["time: noisy"],
        views={"pivot": {"index": ["k"], "columns": "dtype"}},
        replicates={"time": Replicates((2e-3, 2.1e-3, math.nan))},
        verdicts={"time": Verdict("regressed", unit="s", baseline=1e-3, current=2.05e-3,
                                  change=1.0, p_value=0.001, relative=True,
                                  accepted=Accepted("2026-11-24T10:00:00+00:00", 3e-3, 1e-3)),
                  "gone": Verdict("missing", unit="B/s", baseline=5e9)},
    )
    data = json.loads(json.dumps(record.to_dict()))
    assert data["params"] == {"dtype": "float16", "device": "cpu", "k": 3, "ratio": 0.5,
                              "inf": "inf", "name": "x", "flag": True, "none": None}
    back = Record.from_dict(data)
    assert back.to_dict() == data
    assert back.verdicts == record.verdicts  # beside the metrics, a missing one's too
    assert back.values_of("time").value == pytest.approx(2.05e-3)  # a NaN process left out
    assert back.metric("nope") is None and back.metric("gone") is None


def test_a_report_of_pytest_hpml_0_2_is_read_with_its_verdicts_beside_the_metrics() -> None:
    # 0.2 kept the verdict and the fresh processes' values inside each metric, and a missing
    # metric as a NaN placeholder.
    old = {"id": "r", "experiment": "e", "metrics": [
        {"name": "time", "value": 1e-3, "unit": "s", "better": "lower", "runs": [2e-3, 3e-3],
         "verdict": {"outcome": "regressed", "baseline": 5e-4, "change": 3.0}},
        {"name": "bw", "value": None, "unit": "B/s", "better": "higher",
         "verdict": {"outcome": "missing", "baseline": 1e9}}]}
    record = Record.from_dict(old)
    assert [m.name for m in record.metrics] == ["time"]
    assert record.values_of("time").values == (1e-3, 2e-3, 3e-3)
    assert record.verdict("time").outcome == "regressed" and record.verdict("time").unit == "s"
    assert record.verdict("bw").outcome == "missing" and record.verdict("bw").unit == "B/s"


@pytest.mark.parametrize("value", [np.float32(1.5), torch.tensor(1.5), 3, True])
def test_metric_values_become_python_floats(value) -> None:
    m = Metric("x", value)
    assert type(m.value) is float


def test_bad_metrics_are_refused_with_the_name() -> None:
    with pytest.raises(ValueError, match="'x': better must be"):
        Metric("x", 1.0, better="faster")
    with pytest.raises(ValueError, match="'x': tolerance must be >= 0"):
        Metric("x", 1.0, tolerance=-0.1)
    with pytest.raises(TypeError, match="must be a number, got str"):
        Metric("x", "1.0")


def test_re_recording_a_name_replaces_it() -> None:
    r = Record("t", "E")
    r.add(Metric("x", 1.0))
    r.add(Metric("y", 2.0))
    r.add(Metric("x", 3.0))
    assert [(m.name, m.value) for m in r.metrics] == [("y", 2.0), ("x", 3.0)]


def test_a_copy_with_fields_changed_is_checked_as_a_new_value_is() -> None:
    verdict = Verdict("unchanged", unit="s", baseline=1.0, current=1.0, change=0.0)
    copy = evolve(verdict, outcome="ambiguous", basis="said")
    assert copy == Verdict("ambiguous", unit="s", baseline=1.0, current=1.0, change=0.0,
                           basis="said")
    assert verdict.outcome == "unchanged"  # the original is left as it was
    with pytest.raises(ValueError, match="verdict must be one of"):
        evolve(verdict, outcome="worse")  # __post_init__ checks the copy
    with pytest.raises(TypeError, match="has no field colour"):
        evolve(verdict, colour="red")


def test_json_safe_writes_every_non_finite_number_as_null_in_lists_of_any_kind() -> None:
    nan, inf = float("nan"), float("inf")
    found = json_safe({"history": [1.0, 2.5], "samples": (1.0, nan), "nested": [[inf, 1.0]],
                       "mixed": ["x", 1.0, -inf], "flags": [True, 1], "huge": [1e308, 1e308],
                       "empty": []})
    assert found == {"history": [1.0, 2.5], "samples": [1.0, None], "nested": [[None, 1.0]],
                     "mixed": ["x", 1.0, None], "flags": [True, 1], "huge": [1e308, 1e308],
                     "empty": []}
    assert type(found["samples"]) is list  # a tuple is written as JSON's array


def test_a_worded_verdict_says_its_words_once_read_and_is_the_verdict_made_with_them() -> None:
    import pickle
    from dataclasses import replace

    from pytest_hpml.verdict import Worded

    asked: list[int] = []

    def words() -> tuple[str, str]:
        asked.append(1)
        return "within the 10.0 % tolerance; spread 3.0 %", "cannot detect a 1.50x slowdown"

    def worded() -> Worded:
        return Worded("unchanged", unit="s", baseline=1.0, current=1.02, change=0.02, mdc=0.5,
                      processes=1, words=words, blind_spot=True)

    plain = Verdict("unchanged", unit="s", baseline=1.0, current=1.02, change=0.02, mdc=0.5,
                    processes=1, basis="within the 10.0 % tolerance; spread 3.0 %",
                    blind="cannot detect a 1.50x slowdown")
    v = worded()
    assert v.has_blind_spot and v.outcome == "unchanged" and not asked
    assert v == plain and plain == v and hash(v) == hash(plain) and len(asked) == 1
    assert v.basis == plain.basis and v.blind == plain.blind and len(asked) == 1  # said once
    assert v.to_dict() == plain.to_dict() and repr(v).endswith(repr(plain)[len("Verdict"):])
    copied = pickle.loads(pickle.dumps(worded()))
    assert type(copied) is Verdict and copied == plain
    # A copy with its basis changed keeps that, and says its blind spot when read.
    changed = evolve(worded(), outcome="ambiguous", basis="held")
    assert (changed.outcome, changed.basis, changed.blind) == (
        "ambiguous", "held", plain.blind)
    assert replace(worded(), basis="noted").to_dict() == {**plain.to_dict(), "basis": "noted"}
    # Without a blind spot, none is said; a verdict made with words has them as given.
    clear = Worded("unchanged", words=lambda: ("fine", None))
    assert not clear.has_blind_spot and clear.blind is None and clear.basis == "fine"
    assert Worded("new", basis="first").basis == "first" and not Verdict("new").has_blind_spot
    # Made at once (said_later), it is the verdict __init__ makes, and refuses what it does.
    for quick in (Worded.said_later("unchanged", words, True, unit="s", baseline=1.0,
                                    current=1.02, change=0.02, mdc=0.5, processes=1),
                  Worded.said_later("ambiguous", lambda: ("held", None), False, change=0.3)):
        made = Worded(quick.outcome, unit=quick.unit, baseline=quick.baseline,
                      current=quick.current, change=quick.change, mdc=quick.mdc,
                      processes=quick.processes, words=quick.__dict__["_words"],
                      blind_spot=quick.has_blind_spot)
        assert made.__dict__ == quick.__dict__ and quick == made and hash(quick) == hash(made)
        assert quick.to_dict() == made.to_dict() and repr(quick) == repr(made)
    with pytest.raises(ValueError, match="verdict must be one of"):
        Worded.said_later("worse", words, False)
    with pytest.raises(TypeError, match="no field"):
        Worded.said_later("unchanged", words, False, basis="said now")
