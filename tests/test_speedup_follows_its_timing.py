"""A speedup over a reference timed beside it (`record(..., timing=)`) is judged as the timed
code is: the reference's own change is the reference's verdict, never the code's regression.
Seen on an H200's host: the vector-add lab's C++ loop ran 35 % faster in a compare than in the
save a minute before, and `speedup_kernel = cpp / kernel` (recorded without timing=) failed
the compare of unchanged GPU code as "regressed"."""

from __future__ import annotations

import pytest
from hpml_testing import FAST, run_with_json, save_in_processes, verdicts_of

# The reference is a sleep ten times as long in the save as in the compare (a file says which):
# the code under test, a sleep of its own, does not change. A busy machine stretches short
# sleeps by milliseconds (beside make test's other worker and a CPU hog an 8 ms sleep read 12 ms
# in a save's fresh processes and a 1 ms sleep 8.8 ms, while a 10 ms sleep read 10.4 ms): every
# sleep here is 10 ms or more, and the tests assert the reference's change and what follows
# from it, not the verdict of the code's own sleep.
SUITE = """
    import time
    from pathlib import Path

    FASTER_REFERENCE = Path(__file__).with_name("faster.txt").exists()


    def test_speedup(hpml):
        reference = hpml.time(time.sleep, 0.01 if FASTER_REFERENCE else 0.1,
                              name="reference_time")
        code = hpml.time(time.sleep, 0.01, name="time")
        hpml.record("speedup", reference.median / code.median, better="higher",
                    {timing})
"""


def _save_then_compare(pytester: pytest.Pytester, timing: str) -> dict:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_suite=SUITE.format(timing=timing))
    baselines = pytester.path / "baselines"
    # The reference's change is the code's by construction: with the yardstick off, no move of
    # the machine's compute pace holds it back (compare/machine_moves.py).
    pytester.runpytest(*save_in_processes(3), "--hpml-yardstick=off",
                       f"--hpml-baselines={baselines}").assert_outcomes(passed=1)
    (pytester.path / "faster.txt").write_text("")
    result, document = run_with_json(pytester, "--hpml-compare", "--hpml-yardstick=off",
                                     f"--hpml-baselines={baselines}")
    verdicts = next(iter(verdicts_of(document).values()))
    return {"result": result, **{k: v["outcome"] for k, v in verdicts.items()},
            "basis": verdicts["speedup"].get("basis", "")}


def test_a_speedup_follows_the_timed_codes_verdict(pytester: pytest.Pytester) -> None:
    seen = _save_then_compare(pytester, "timing=code")
    assert seen["reference_time"] == "improved"  # the reference's change is its own
    # The speedup, ten times lower, follows the code's verdict, whatever the machine made of
    # the code's sleep.
    assert seen["speedup"] == seen["time"], seen
    assert seen["basis"].startswith("follows time: ")


def test_a_speedup_judged_on_its_own_takes_the_references_change(
        pytester: pytest.Pytester) -> None:
    # What the labs did before: the reference's change reads as the code's regression.
    seen = _save_then_compare(pytester, "")
    assert seen["speedup"] == "regressed", seen
    seen["result"].assert_outcomes(failed=1)


@pytest.mark.parametrize("timing", ["", "timing=code"])
def test_a_ratio_of_two_times_judged_on_its_own_is_named(pytester: pytest.Pytester,
                                                          timing: str) -> None:
    # What the vector-add lab did: the run says which two times the ratio is, and what to do.
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_suite=SUITE.format(timing=timing))
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1)
    warned = "speedup = reference_time / time, judged on its own" in result.stdout.str()
    assert warned is (not timing), result.stdout.str()
    if not timing:  # in pytest's warnings summary, at the test's line
        result.stdout.fnmatch_lines(["*warnings summary*", "test_suite.py::test_speedup",
                                     "*RatioOfTimesWarning: speedup = reference_time / time*"])
