"""The baseline file a run reads or writes (issue 31 item 12): a folder under the file's name
is named, not blamed on --hpml-baselines; a file whose profile field is not the one its name
says is refused, not compared with figures of other sizes."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, baseline_file

TEST = "def test_a(hpml):\n    hpml.record('time', 1e-3, unit='s')\n"


def test_a_folder_under_the_baseline_files_name_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TEST)
    path = baseline_file(pytester.path / "baselines")
    path.mkdir(parents=True)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (f"ERROR: --hpml-save-baseline: the baseline file {path} is a folder; move it away "
            "(a save writes this machine's baseline under that name)") in err
    assert "the option takes a file name" not in err


@pytest.mark.parametrize("mode", ["--hpml-compare", "--hpml-save-baseline"])
def test_a_baseline_whose_profile_is_not_its_names_is_refused(
        pytester: pytest.Pytester, mode: str) -> None:
    pytester.makepyfile(test_a=TEST)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    path = baseline_file(pytester.path / "baselines")
    document = json.loads(path.read_text(encoding="utf-8"))
    document["profile"] = "full"  # a full-profile file copied under the quick name
    path.write_text(json.dumps(document), encoding="utf-8")
    before = path.read_text(encoding="utf-8")
    result = pytester.runpytest(*FAST, mode)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: baseline file {path} holds the 'full' profile, not 'quick' as its name "
            "says; it was left untouched. Rename it to ") in result.stderr.str()
    assert path.read_text(encoding="utf-8") == before
