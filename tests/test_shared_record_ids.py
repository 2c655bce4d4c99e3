"""Record ids that two tests share (issue 31 item 6): a baseline keys its rows by id, so two
tests making one id were saved as one row and compared with each other ("improved 2 -> 1").
The later test fails naming both, neither row is saved; a baseline holding an id twice (a hand
merge) is refused naming the file, not read last-wins."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, baseline_file, strict_json

SHARED = """
    import pytest

    @pytest.mark.parametrize("case", ["p", "p-x=1"])
    def test_a(hpml, case):
        if case == "p":
            with hpml.row(x=1) as row:
                row.record("time", 2e-3, unit="s")
        else:
            hpml.record("time", 1e-3, unit="s")

    def test_b(hpml):
        hpml.record("time", 1e-3, unit="s")
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "-n 2"])
def test_two_tests_making_one_record_id_fail_and_save_neither(
        pytester: pytest.Pytester, workers: tuple[str, ...]) -> None:
    pytester.makepyfile(test_x=SHARED)
    result = pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline", *workers)
    result.assert_outcomes(passed=2, failed=1)
    # Whichever of the two reaches the controller second fails (under -n 2, either).
    first, second = "test_x.py::test_a[p]", "test_x.py::test_a[p-x=1]"
    said = ("hpml: a row's id is another test's too (a baseline keys its rows by id): "
            "test_x.py::test_a[p-x=1] is also made by {}; name the case's id or the row's "
            "columns apart (pytest.param(..., id=...))")
    out = result.stdout.str()
    assert said.format(first) in out or said.format(second) in out
    stored = strict_json(baseline_file(pytester.path / "baselines"))
    assert [r["id"] for r in stored["records"]] == ["test_x.py::test_b"]


def test_a_baseline_holding_an_id_twice_is_refused_naming_the_file(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_b(hpml):\n    hpml.record('time', 1e-3, unit='s')\n")
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    path = baseline_file(pytester.path / "baselines")
    document = json.loads(path.read_text(encoding="utf-8"))
    twin = json.loads(json.dumps(document["records"][0]))
    twin["metrics"][0]["value"] = 5e-3
    document["records"].append(twin)  # a hand merge of two saves
    path.write_text(json.dumps(document), encoding="utf-8")
    result = pytester.runpytest(*FAST, "--hpml-compare")
    assert result.ret != pytest.ExitCode.OK
    out = result.stdout.str() + result.stderr.str()
    assert f"baseline file {path}" in out
    assert "record 'test_x.py::test_b' is in it twice; keep one of the two" in out
