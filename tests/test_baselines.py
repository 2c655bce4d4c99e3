"""The baseline store: file names, merging, atomic writes, and files it must never overwrite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hpml_testing import FAST, only_baseline_file

from pytest_hpml import baselines, verdicts
from pytest_hpml.baselines import BaselineError, load, save
from pytest_hpml.fingerprint import fingerprint, machine_key
from pytest_hpml.results import Metric, Record

HERE = {"gpu": None, "gpu_count": 0, "cpu": "Test CPU 9000", "cpu_cores": 4, "torch": "2.9.0"}
ELSEWHERE = {**HERE, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}


def _files(folder: Path) -> list[str]:
    """The folder's files, less the lock file saves hold (kept on purpose: deleting a lock
    file another process waits on would let two saves in at once)."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(".lock"))


def _record(rid: str, value: float, samples: list[float] | None = None) -> Record:
    return Record(id=rid, experiment="exp", params={"k": 1},
                  metrics=[Metric("time", value, "s", "lower", samples=samples)])


def test_save_then_load(tmp_path: Path) -> None:
    path = baselines.baseline_path(tmp_path, machine_key(HERE), "quick")
    assert path.name == "test-9000-x4cores-quick.json"
    save(path, HERE, "quick", [_record("a", 1.0, [1.0, 1.1])])
    base = load(path)
    assert base is not None and base.profile == "quick" and base.fingerprint == HERE
    assert base.metrics_for("a")["time"].samples == [1.0, 1.1]
    assert base.metrics_for("nope") == {}
    assert json.loads(path.read_text())["schema"] == baselines.SCHEMA


def test_load_of_no_file_is_none(tmp_path: Path) -> None:
    assert load(tmp_path / "none.json") is None


def test_save_merges_with_the_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, HERE, "quick", [_record("a", 1.0), _record("b", 2.0)])
    save(path, HERE, "quick", [_record("b", 3.0), _record("c", 4.0)])
    base = load(path)
    assert {k: base.metrics_for(k)["time"].value for k in base.records} == {
        "a": 1.0, "b": 3.0, "c": 4.0}


def test_save_drops_comparison_fields(tmp_path: Path) -> None:
    record = _record("a", 1.0)
    verdicts.compare_metric(record.metrics[0], Metric("time", 0.5, "s", "lower"))
    assert record.metrics[0].verdict == "regressed"
    save(tmp_path / "b.json", HERE, "quick", [record])
    stored = load(tmp_path / "b.json").records["a"]["metrics"][0]
    assert not {"baseline", "change", "verdict", "p_value"} & set(stored)


CORRUPT = b'{"schema": "pytest-hpml/baseline/1", "records": [\n'
FOREIGN = b'{"benchmarks": [{"name": "x", "value": 1}]}\n'
DAMAGED = b'{"schema": "pytest-hpml/baseline/1", "fingerprint": {}, "profile": "quick"}'


@pytest.mark.parametrize("content, message", [
    (CORRUPT, "is not valid JSON"),
    (FOREIGN, "is not a pytest-hpml baseline"),
    (DAMAGED, "is damaged"),
])
def test_an_unusable_file_is_an_error_and_left_untouched(tmp_path: Path, content: bytes,
                                                         message: str) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)
    with pytest.raises(BaselineError, match=message):
        save(path, HERE, "quick", [_record("a", 1.0)])
    assert path.read_bytes() == content
    assert _files(tmp_path) == ["b.json"]


def test_save_refuses_another_machines_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, ELSEWHERE, "quick", [_record("a", 1.0)])
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="belongs to machine 'nvidia-h100-80gb-hbm3-x8'"):
        save(path, HERE, "quick", [_record("a", 2.0)])
    assert path.read_bytes() == before


@pytest.mark.parametrize("target", ["json.dump", "os.replace"])
def test_an_interrupted_save_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 target: str) -> None:
    path = tmp_path / "b.json"
    save(path, HERE, "quick", [_record("a", 1.0)])
    before = path.read_bytes()

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    module, name = target.split(".")
    monkeypatch.setattr(getattr(baselines, module), name, interrupt)
    with pytest.raises(KeyboardInterrupt):
        save(path, HERE, "quick", [_record("a", 2.0), _record("b", 3.0)])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["b.json"]  # no temporary file left behind


# -- verdicts -----------------------------------------------------------------------------------


def _m(value: float, better: str | None = "lower", samples: list[float] | None = None,
       tolerance: float | None = None) -> Metric:
    return Metric("time", value, "s", better, samples=samples, tolerance=tolerance)


@pytest.mark.parametrize("better, old, new, verdict", [
    ("lower", 1.0, 1.05, "unchanged"),
    ("lower", 1.0, 1.2, "regressed"),
    ("lower", 1.0, 0.8, "improved"),
    ("higher", 1.0, 0.8, "regressed"),
    ("higher", 1.0, 1.2, "improved"),
    (None, 1.0, 2.0, "ambiguous"),  # no good direction: shown, never a regression
    ("lower", 0.0, 0.0, "unchanged"),
    ("lower", 0.0, 1.0, "regressed"),
])
def test_verdict_without_samples(better, old, new, verdict) -> None:
    m = verdicts.compare_metric(_m(new, better), _m(old, better))
    assert m.verdict == verdict
    assert m.baseline == old and m.p_value is None
    if old:
        assert m.change == pytest.approx((new - old) / old)


def test_new_metric() -> None:
    assert verdicts.compare_metric(_m(1.0), None).verdict == "new"


def test_tolerance_default_option_and_per_metric() -> None:
    assert verdicts.compare_metric(_m(1.15), _m(1.0), tolerance=0.2).verdict == "unchanged"
    assert verdicts.compare_metric(_m(1.15), _m(1.0), tolerance=0.1).verdict == "regressed"
    # A metric's own tolerance (record(tolerance=...) or the hpml marker) wins over the option.
    m = verdicts.compare_metric(_m(1.15, tolerance=0.5), _m(1.0), tolerance=0.1)
    assert m.verdict == "unchanged"


def test_a_significant_slowdown_is_a_regression() -> None:
    old = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.01]
    new = [v * 1.3 for v in old]
    m = verdicts.compare_metric(_m(1.3, samples=new), _m(1.0, samples=old))
    assert m.verdict == "regressed" and m.p_value < 0.01


def test_a_change_within_the_noise_is_ambiguous_not_a_regression() -> None:
    # Medians 30 % apart, but the samples overlap so much that the test cannot tell.
    old = [0.5, 1.5, 0.7, 1.3, 0.9, 1.1, 1.0, 0.6, 1.4, 1.0]
    new = [0.6, 1.9, 0.8, 1.6, 1.3, 1.4, 1.3, 0.7, 1.8, 1.2]
    m = verdicts.compare_metric(_m(1.3, samples=new), _m(1.0, samples=old))
    assert m.verdict == "ambiguous"
    assert m.p_value >= 0.01 and m.change == pytest.approx(0.3)


def test_a_disturbed_run_is_ambiguous_even_when_the_shift_is_significant() -> None:
    # A noisy neighbour shifts a whole run: the rank test calls it significant, but the
    # run's own spread (IQR 30 % of its median) is too wide to carry a verdict.
    old = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.01]
    new = [1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.2, 1.3, 1.5, 1.6, 1.4]
    m = verdicts.compare_metric(_m(1.4, samples=new), _m(1.0, samples=old))
    assert m.p_value < 0.01 and m.verdict == "ambiguous"
    # The same shift measured cleanly on both sides is a regression.
    steady = [1.40, 1.41, 1.39, 1.42, 1.38, 1.40, 1.41, 1.39, 1.40, 1.42, 1.38, 1.41]
    assert verdicts.compare_metric(_m(1.4, samples=steady), _m(1.0, samples=old)).verdict \
        == "regressed"
    # A noisy baseline cannot carry one either.
    assert verdicts.compare_metric(_m(1.0, samples=old), _m(1.4, samples=new)).verdict \
        == "ambiguous"


def test_too_few_samples_fall_back_to_the_tolerance() -> None:
    few = [1.0, 1.1, 0.9]
    m = verdicts.compare_metric(_m(1.3, samples=[1.3, 1.2, 1.4]), _m(1.0, samples=few))
    assert m.verdict == "regressed" and m.p_value is None


def test_compare_record_reports_missing_metrics(tmp_path: Path) -> None:
    old = Record("r", "exp", metrics=[Metric("time", 1.0, "s", "lower"),
                                      Metric("bandwidth", 5e9, "B/s", "higher")])
    save(tmp_path / "b.json", HERE, "quick", [old])
    base = load(tmp_path / "b.json")
    current = Record("r", "exp", metrics=[Metric("time", 1.0, "s", "lower"),
                                          Metric("flops", 1e9, "FLOP/s", "higher")])
    missing = verdicts.compare_record(current, base.metrics_for("r"))
    assert [m.verdict for m in current.metrics] == ["unchanged", "new"]
    assert [(m.name, m.verdict, m.baseline) for m in missing] == [("bandwidth", "missing", 5e9)]


# -- through pytest ---------------------------------------------------------------------------

FIXED = """
    import pytest

    @pytest.mark.parametrize("k", [1, 2])
    def test_fixed(hpml, k):
        hpml.record("size", 10.0 * k, unit="B", better="lower")
"""


def test_save_baseline_writes_machine_and_profile_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=2)
    expected = pytester.path / "baselines" / f"{machine_key(fingerprint())}-quick.json"
    assert only_baseline_file(pytester.path / "baselines") == expected
    result.stdout.fnmatch_lines([f"hpml: wrote {expected}"])
    base = load(expected)
    assert sorted(base.records) == ["test_save_baseline_writes_machine_and_profile_file.py::"
                                    f"test_fixed[{k}]" for k in (1, 2)]


def test_save_baseline_into_a_chosen_folder_merges(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "store"
    pytester.runpytest(*FAST, f"--hpml-baselines={folder}", "--hpml-save-baseline",
                       "-k", "1").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest(*FAST, f"--hpml-baselines={folder}", "--hpml-save-baseline",
                       "-k", "2").assert_outcomes(passed=1, deselected=1)
    assert not (pytester.path / "baselines").exists()
    assert len(load(only_baseline_file(folder)).records) == 2


@pytest.mark.parametrize("content, message", [
    (CORRUPT, "is not valid JSON"),
    (FOREIGN, "is not a pytest-hpml baseline"),
])
def test_unusable_baseline_stops_compare_and_save(pytester: pytest.Pytester, content: bytes,
                                                  message: str) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "baselines"
    folder.mkdir()
    path = folder / f"{machine_key(fingerprint())}-quick.json"
    path.write_bytes(content)

    result = pytester.runpytest(*FAST, "--hpml-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # before any test runs
    assert f"baseline file {path} {message}" in result.stderr.str()

    # A save checks the file before the tests too: hours of GPU work are not run into it.
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"baseline file {path} {message}" in result.stderr.str()
    assert path.read_bytes() == content
    assert _files(folder) == [path.name]


def test_another_machines_baseline_is_not_compared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    folder = pytester.path / "baselines"
    path = folder / f"{machine_key(fingerprint())}-quick.json"
    save(path, ELSEWHERE, "quick", [_record("x", 1.0)])  # copied here from a GPU box
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    result.assert_outcomes(passed=2)
    line = (f"hpml: --hpml-compare: {path} was recorded on 'nvidia-h100-80gb-hbm3-x8', not on "
            "this machine*not compared.")
    result.stdout.fnmatch_lines([line])
    assert result.stdout.str().count("was recorded on") == 1  # said once, not per test
    result.stdout.fnmatch_lines(["*size*new*"])


def test_compare_without_a_baseline_says_so_and_everything_is_new(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("no baseline for this machine") == 1
    result.stdout.fnmatch_lines(["*every metric is 'new'. Record one with --hpml-save-baseline."])
    result.stdout.fnmatch_lines(["Comparison with baseline", "*", "*", "*k=1*size*new*",
                                 "*k=2*size*new*"])
    assert not (pytester.path / "baselines").exists()  # comparing never writes


def test_a_software_upgrade_is_said_not_a_new_machine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FIXED)
    path = pytester.path / "baselines" / f"{machine_key(fingerprint())}-quick.json"
    before_upgrade = {**fingerprint(), "torch": "1.0.0"}
    save(path, before_upgrade, "quick", [_record("x", 1.0)])
    result = pytester.runpytest(*FAST, "--hpml-compare")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"hpml: --hpml-compare: software changed since the baseline: "
                                 f"torch 1.0.0 -> {fingerprint()['torch']}"])


def test_failed_tests_are_not_saved_into_the_baseline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_ok(hpml):
            hpml.record("x", 1.0)

        def test_wrong(hpml):
            hpml.record("x", 2.0)
            assert False, "the kernel computed the wrong result"
        """
    )
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["hpml: --hpml-save-baseline: 1 row(s) of failed tests not "
                                 "saved; their previous baseline entries are kept."])
    stored = load(only_baseline_file(pytester.path / "baselines"))
    assert [k.rsplit("::", 1)[1] for k in stored.records] == ["test_ok"]


@pytest.mark.parametrize("better", ["lower", "higher", None])
@pytest.mark.parametrize("new", [float("nan"), float("inf")])
def test_no_number_where_there_was_one_is_a_regression(better, new: float) -> None:
    m = verdicts.compare_metric(_m(new, better=better), _m(1.0, better=better))
    assert m.verdict == "regressed" and "not a number" in m.basis
    record = Record("r", "e", metrics=[m])
    assert verdicts.failures(record) == [f"r time: {new} where the baseline has 1 s (the run "
                                         "produced no number)"]


def test_a_stored_nan_is_never_an_improvement() -> None:
    assert verdicts.compare_metric(_m(1.0), _m(float("nan"))).verdict == "ambiguous"
