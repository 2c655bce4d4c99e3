"""Installing the plugin changes nothing in a run that does not use it: the process environment
(malloc thresholds, intra-op threads, OMP/MKL variables, Triton's interpreter, xdist GPU
pinning) is set only in a run that uses the plugin (an --hpml-* option, an hpml_* ini setting,
or a test file or conftest.py that uses it, found before it is imported), and only what
--hpml-env allows. Fresh processes: the variables of this test process are not theirs."""

from __future__ import annotations

import pytest

#: What the plugin may set, removed from the child's environment so that what it finds is the
#: plugin's doing.
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TRITON_INTERPRET", "MALLOC_MMAP_THRESHOLD_",
             "MALLOC_TRIM_THRESHOLD_", "PYTEST_HPML_GPUS")

SHOW = f"""
import os

AT_IMPORT = os.environ.get("TRITON_INTERPRET")

def test_show():
    print("ENV", {{k: os.environ.get(k) for k in {VARIABLES!r}}}, "AT_IMPORT", AT_IMPORT)
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _env_line(result: pytest.RunResult) -> str:
    return next(line for line in result.stdout.lines if "ENV {" in line)


def test_a_suite_that_never_uses_the_plugin_runs_as_without_it(pytester: pytest.Pytester,
                                                               clean_env: None) -> None:
    pytester.makepyfile(test_plain=SHOW)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    line = _env_line(result)
    assert "'TRITON_INTERPRET': None" in line and "'OMP_NUM_THREADS': None" in line, line
    assert "'MALLOC_MMAP_THRESHOLD_': None" in line and "AT_IMPORT None" in line, line
    result.stdout.fnmatch_lines(["hpml: not in use so far (no --hpml-* option, no hpml_* "
                                 "setting in the ini file)*"])
    assert "hpml: environment" not in result.stdout.str()


def test_an_hpml_option_uses_the_plugin_from_the_start(pytester: pytest.Pytester,
                                                       clean_env: None) -> None:
    pytester.makepyfile(test_plain=SHOW)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider",
                                           "--hpml-profile=quick")
    line = _env_line(result)
    assert "'OMP_NUM_THREADS': '" in line and "'MALLOC_MMAP_THRESHOLD_': '" in line, line
    result.stdout.fnmatch_lines(["hpml: environment: malloc mmap threshold*"])


def test_an_ini_setting_uses_the_plugin_from_the_start(pytester: pytest.Pytester,
                                                       clean_env: None) -> None:
    pytester.makefile(".ini", pytest="[pytest]\nhpml_tolerance = 0.2\n")
    pytester.makepyfile(test_plain=SHOW)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert "'OMP_NUM_THREADS': '" in _env_line(result)


def test_a_test_file_that_uses_the_fixture_sets_it_before_it_is_imported(
        pytester: pytest.Pytester, clean_env: None) -> None:
    pytester.makepyfile(test_uses=SHOW + "\ndef test_fixture(hpml):\n    pass\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    line = _env_line(result)
    assert "'OMP_NUM_THREADS': '" in line, line
    # Without a GPU the interpreter is on before the module (its kernels) was imported.
    from hpml_testing import HAS_GPU

    if not HAS_GPU:
        assert "AT_IMPORT 1" in line, line
    result.stdout.fnmatch_lines(["hpml: environment set when test_uses.py uses it: *"])


def test_keep_changes_nothing_not_even_the_interpreter(pytester: pytest.Pytester,
                                                       clean_env: None) -> None:
    pytester.makepyfile(test_uses=SHOW + "\ndef test_fixture(hpml):\n    pass\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--hpml-env=keep")
    line = _env_line(result)
    assert "'TRITON_INTERPRET': None" in line and "'OMP_NUM_THREADS': None" in line, line
    result.stdout.fnmatch_lines(["hpml: environment: left as it is (--hpml-env=keep)"])


def test_a_run_that_does_not_use_the_plugin_looks_for_no_gpu(pytester: pytest.Pytester,
                                                              clean_env: None) -> None:
    pytester.makepyfile(test_plain=SHOW)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert "hpml: GPUs" not in result.stdout.str() and "hpml: profile" not in result.stdout.str()
    assert "'PYTEST_HPML_GPUS': None" in _env_line(result)


def test_a_conftest_given_on_the_command_line_finds_the_interpreter_chosen(
        pytester: pytest.Pytester, clean_env: None) -> None:
    # The conftest.py of a path on the command line is imported before pytest_configure.
    lab = pytester.mkpydir("lab")
    (lab / "conftest.py").write_text("import os\n\nAT_CONFTEST = os.environ.get("
                                     "'TRITON_INTERPRET')\n\n\ndef pytest_report_header():\n"
                                     "    return f'AT_CONFTEST {AT_CONFTEST}'\n")
    (lab / "test_k.py").write_text("def test_k():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hpml-profile=quick",
                                           "lab")
    result.assert_outcomes(passed=1)
    from hpml_testing import HAS_GPU

    result.stdout.fnmatch_lines(["AT_CONFTEST None" if HAS_GPU else "AT_CONFTEST 1"])


def test_a_sibling_of_the_selected_file_does_not_decide(pytester: pytest.Pytester,
                                                        clean_env: None) -> None:
    # Issue 27: the plugin is in use by what pytest collects, not by bytes of files beside it.
    pytester.makepyfile(test_plain=SHOW,
                        test_other="def test_other(hpml):\n    hpml.setting('x', 1)\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "test_plain.py")
    result.assert_outcomes(passed=1)
    line = _env_line(result)
    assert "'OMP_NUM_THREADS': None" in line and "'TRITON_INTERPRET': None" in line, line
    assert "hpml: environment set" not in result.stdout.str()


def test_a_word_in_a_comment_or_string_is_not_a_use(pytester: pytest.Pytester,
                                                    clean_env: None) -> None:
    pytester.makepyfile(test_plain=SHOW + "\n# compare with the hpml suite\nNOTE = 'hpml'\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert "'OMP_NUM_THREADS': None" in _env_line(result)


@pytest.mark.parametrize("use", [
    "import pytest\n\n@pytest.mark.hpml_sweep('k', quick=[1], full=[1])\ndef test_m(k):\n"
    "    pass\n",
    "from pytest_hpml import Timing\n",
    "import pytest_hpml.distributed\n",
])
def test_markers_imports_and_plugin_names_are_uses(pytester: pytest.Pytester, clean_env: None,
                                                   use: str) -> None:
    pytester.makepyfile(test_uses=SHOW + "\n" + use)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert "'OMP_NUM_THREADS': '" in _env_line(result), result.stdout.str()
