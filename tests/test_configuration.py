"""What a team pins in its configuration file, and the strict modes of CI: every --hpml-*
option a team would pin also reads from the ini file (the command line winning), a bad value
there is a usage error naming the key and the file, and --hpml-require-gpu /
--hpml-require-baseline stop a run before its tests instead of letting it pass by skipping or
by calling every metric 'new'."""

from __future__ import annotations

from fnmatch import fnmatch

import pytest
from hpml_testing import FAST, without_gpu

from pytest_hpml import devices
from pytest_hpml.machine import gpus
from pytest_hpml.machine.gpus import GpuDiscovery
from pytest_hpml.session import PINNED


def _pytest_ini(pytester: pytest.Pytester, text: str) -> None:
    pytester.makefile(".ini", pytest=text)


SHOW_OPTIONS = """
def test_show(request):
    opt = request.config.option
    print("OPTIONS", opt.hpml_tolerance, opt.hpml_alpha, opt.hpml_confirm, opt.hpml_profile,
          opt.hpml_env, opt.hpml_max_time, opt.hpml_yardstick, opt.hpml_baselines,
          opt.hpml_require_baseline)
"""


def test_every_option_a_team_pins_has_an_ini_key() -> None:
    assert {"hpml_tolerance", "hpml_alpha", "hpml_confirm", "hpml_profile", "hpml_baselines",
            "hpml_baseline_runs", "hpml_baseline_processes", "hpml_env", "hpml_max_time",
            "hpml_min_samples", "hpml_target_rse", "hpml_yardstick", "hpml_require_gpu",
            "hpml_require_baseline"} <= set(PINNED)
    # Outputs and actions belong to one invocation, never to the configuration.
    assert not {"hpml_report", "hpml_compare", "hpml_save_baseline"} & set(PINNED)


@pytest.mark.parametrize("config_file", ["pytest.ini", "pyproject.toml"])
def test_ini_values_are_read_and_the_command_line_wins(pytester: pytest.Pytester,
                                                       config_file: str) -> None:
    settings = ("hpml_tolerance = 0.2\nhpml_alpha = 0.05\nhpml_confirm = 1\n"
                "hpml_profile = full\nhpml_env = keep\nhpml_max_time = 0.25\n"
                "hpml_yardstick = off\nhpml_baselines = bl\nhpml_require_baseline = true\n")
    if config_file == "pytest.ini":
        _pytest_ini(pytester, "[pytest]\n" + settings)
    else:
        pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + settings.replace(
            "= ", '= "').replace("\n", '"\n'))
    pytester.makepyfile(SHOW_OPTIONS)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    bl = pytester.path / "bl"
    result.stdout.fnmatch_lines([f"*OPTIONS 0.2 0.05 1 full keep 0.25 off {bl} True"])
    given = pytester.runpytest("-s", "-p", "no:cacheprovider", "--hpml-tolerance=0.3",
                               "--hpml-profile=quick")
    given.stdout.fnmatch_lines([f"*OPTIONS 0.3 0.05 1 quick keep 0.25 off {bl} True"])


def test_without_ini_values_the_defaults_hold(pytester: pytest.Pytester) -> None:
    _pytest_ini(pytester, "[pytest]\n")
    pytester.makepyfile(SHOW_OPTIONS)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*OPTIONS 0.1 0.01 2 None control None on None False"])


def test_a_baselines_folder_in_the_ini_file_is_relative_to_it(pytester: pytest.Pytester) -> None:
    _pytest_ini(pytester, "[pytest]\nhpml_baselines = perf/baselines\n")
    pytester.makepyfile(test_a="def test_a(hpml):\n    hpml.record('x', 1.0, better='lower')\n")
    sub = pytester.mkdir("elsewhere")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        result = pytester.runpytest(*FAST, "--hpml-save-baseline", str(pytester.path))
    result.assert_outcomes(passed=1)
    assert list((pytester.path / "perf" / "baselines").glob("*.json"))
    assert not (sub / "perf").exists()


@pytest.mark.parametrize("line, message", [
    ("hpml_tolerance = ten", "hpml_tolerance = ten in *pytest.ini: 'ten' is not a number"),
    ("hpml_profile = huge", "hpml_profile = huge in *pytest.ini: choose from quick, full"),
    ("hpml_baseline_runs = 0", "hpml_baseline_runs = 0 in *pytest.ini: '0' must be > 0"),
])
def test_a_bad_ini_value_is_a_usage_error_naming_the_key_and_the_file(
        pytester: pytest.Pytester, line: str, message: str) -> None:
    _pytest_ini(pytester, f"[pytest]\n{line}\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}*"])


@pytest.mark.parametrize("config_file, text, message", [
    # issue 31 item 11: "invalid truth value 'perhaps'" named neither the key nor the file
    ("pytest.ini", "[pytest]\nhpml_require_gpu = perhaps\n",
     "pytest.ini: invalid truth value 'perhaps'; write true or "
     "false"),
    # a TOML list made a folder named "['a', 'b']"
    ("pyproject.toml", '[tool.pytest.ini_options]\nhpml_baselines = ["a", "b"]\n',
     "pyproject.toml: a list (['a', 'b']); give one value, e.g. "
     "hpml_baselines = a"),
])
def test_an_ini_value_of_the_wrong_kind_names_the_key_and_the_file(
        pytester: pytest.Pytester, config_file: str, text: str, message: str) -> None:
    (pytester.path / config_file).write_text(text, encoding="utf-8")
    pytester.makepyfile("def test_x(hpml):\n    hpml.record('x', 1.0, better='lower')\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    key = text.splitlines()[1].split(" =")[0]
    assert f"ERROR: {key} in {pytester.path / config_file}: " in result.stderr.str()
    assert message in result.stderr.str()
    assert not (pytester.path / "['a', 'b']").exists()


# -- strict modes ---------------------------------------------------------------------------------

def test_require_baseline_stops_a_comparison_without_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(hpml):\n    hpml.record('x', 1.0, better='lower')\n")
    (pytester.path / "bl").mkdir()
    (pytester.path / "bl" / "other-machine-quick.json").write_text("{}")
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-require-baseline",
                                "--hpml-baselines=bl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --hpml-require-baseline: no baseline of this machine "
                                 "(*) and profile 'quick' at *; the folder holds "
                                 "other-machine-quick.json. Save one*"])
    assert "passed" not in result.stdout.str()
    # Without the strict mode the same run passes, every metric 'new', as before.
    (pytester.path / "bl" / "other-machine-quick.json").unlink()
    pytester.runpytest(*FAST, "--hpml-compare", "--hpml-baselines=bl").assert_outcomes(passed=1)


@without_gpu
def test_require_gpu_stops_a_run_on_a_machine_without_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    assert pytester.runpytest("-p", "no:cacheprovider").ret == pytest.ExitCode.OK  # skips
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-require-gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --hpml-require-gpu: 0 GPU(s) found by *: this job "
                                 "needs a GPU runner"])


@pytest.mark.parametrize("answer, problem", [
    ("True 12.8 2.9.0", None),
    ("False 12.8 2.9.0+cu128", "1 GPU(s) found by test, but torch cannot use them (torch "
                               "2.9.0+cu128, built for CUDA 12.8): *"),
    (None, "1 GPU(s) found by test, but torch cannot use them: *"),
])
def test_require_gpu_names_a_gpu_that_torch_cannot_use(monkeypatch: pytest.MonkeyPatch,
                                                       answer: str | None,
                                                       problem: str | None) -> None:
    monkeypatch.setattr(gpus, "discovery", lambda: GpuDiscovery(1, "test"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = devices.missing_gpu(ask=lambda code: answer)
    assert found is None if problem is None else fnmatch(found or "", problem), found


def test_require_gpu_says_when_cuda_visible_devices_hides_the_gpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "discovery", lambda: GpuDiscovery(4, "nvidia-smi"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.missing_gpu(ask=lambda code: "True") == (
        "4 GPU(s) found by nvidia-smi (CUDA_VISIBLE_DEVICES='' hides them): this job needs a "
        "GPU runner")
