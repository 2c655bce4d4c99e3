"""The device parameter, size-profile sweeps, and option errors that say what to type."""

from __future__ import annotations

import pytest
from hpml_testing import FAST, HAS_GPU

from pytest_hpml.machine import gpus

DEVICE_TEST = """
    import pytest
    import torch

    @pytest.mark.hpml_devices
    def test_on(hpml, device):
        assert hpml.device == torch.device(device)
        assert torch.ones(2, device=device).sum().item() == 2

    @pytest.mark.hpml_devices("cpu")
    def test_cpu_only(device):
        assert torch.device(device).type == "cpu"
"""


def test_device_parameter_has_a_cpu_and_a_gpu_marked_cuda_case(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "*::test_on[[]cpu[]]",
        "*::test_on[[]cuda[]]",
        "*::test_cpu_only[[]cpu[]]",
        "3 tests collected*",
    ])
    result = pytester.runpytest("--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*::test_on[[]cuda[]]", "1/3 tests collected (2 deselected)*"])


def test_minus_m_gpu_runs_the_cuda_case_or_skips_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("-m", "gpu", "-rs", *FAST)
    assert result.ret == 0  # skips, not an error
    if HAS_GPU and gpus.cuda_usable():
        result.assert_outcomes(passed=1, deselected=2)
    else:
        result.assert_outcomes(skipped=1, deselected=2)
        result.stdout.fnmatch_lines(["SKIPPED*needs a CUDA GPU*"])


def test_minus_m_not_gpu_runs_the_cpu_cases_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("-m", "not gpu", "-v", *FAST)
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_on[[]cpu[]] PASSED*"])
    result.stdout.no_fnmatch_line("*cuda*PASSED*")


def test_a_projects_own_device_fixture_is_left_alone(pytester: pytest.Pytester) -> None:
    # pytest-benchmark suites often hold a `device` fixture of their own: with the plugin
    # installed it is theirs (it was parametrized with cpu and cuda, one failed, one skipped).
    pytester.makeconftest("""
        import pytest
        import torch

        @pytest.fixture
        def device():
            return torch.device("cpu")
    """)
    pytester.makepyfile("""
        def test_dev(device):
            assert device.type == "cpu"
    """)
    result = pytester.runpytest("-v", *FAST)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*::test_dev PASSED*"])


def test_the_ini_file_opts_every_device_test_in(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nhpml_devices = cpu cuda\n")
    pytester.makepyfile("""
        def test_on(device):
            assert device in ("cpu", "cuda")

        def test_plain():
            pass
    """)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*::test_on[[]cpu[]]", "*::test_on[[]cuda[]]",
                                 "*::test_plain", "3 tests collected*"])
    pytester.makeini("[pytest]\nhpml_devices = cpu tpu\n")
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*hpml_devices = cpu tpu in *tox.ini*'cpu' and/or 'cuda'*"])


def test_explicit_device_parametrization_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("device", ["meta"])
        def test_mine(device):
            assert device == "meta"

        @pytest.mark.parametrize("n, device", [(1, "meta")])
        def test_string_of_names(device, n):
            assert device == "meta"

        @pytest.mark.parametrize(["device", "n"], [("meta", 1)])
        def test_list_of_names(device, n):
            assert device == "meta"

        @pytest.mark.parametrize(argnames=("n", "device"), argvalues=[(1, "meta")])
        def test_keyword_names(device, n):
            assert device == "meta"
        """
    )
    pytester.runpytest(*FAST).assert_outcomes(passed=4)


def test_bad_hpml_devices_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.hpml_devices("tpu")
        def test_x(device):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret != 0
    assert "hpml_devices takes 'cpu' and/or 'cuda'" in result.stdout.str() + result.stderr.str()


SWEEP_TEST = """
    import pytest

    @pytest.mark.hpml_sweep("k", quick=[1, 2], full=[10, 20, 30])
    def test_sweep(hpml, k):
        hpml.record("k_seen", k, better=None)
        assert hpml.profile in ("quick", "full")
"""


@pytest.mark.parametrize("profile, ids", [("quick", ["1", "2"]), ("full", ["10", "20", "30"])])
def test_sweep_follows_the_profile(pytester: pytest.Pytester, profile: str,
                                   ids: list[str]) -> None:
    pytester.makepyfile(SWEEP_TEST)
    result = pytester.runpytest("--collect-only", f"--hpml-profile={profile}")
    result.stdout.fnmatch_lines([f"hpml: profile {profile}"])
    result.stdout.fnmatch_lines([f"*<Function test_sweep[[]{i}[]]>" for i in ids])
    assert f"collected {len(ids)} items" in result.stdout.str()


def test_default_profile_is_quick_without_a_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SWEEP_TEST)
    expected = "full" if HAS_GPU else "quick"
    result = pytester.runpytest("-v", "--hpml-max-time=0.05", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"hpml: profile {expected}"])
    result.assert_outcomes(passed=3 if HAS_GPU else 2)


def test_sweep_without_both_lists_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.hpml_sweep("k", quick=[1])
        def test_sweep(k):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret != 0
    assert "missing: ['full']" in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("option, fragment", [
    ("--hpml-profile=medium", "--hpml-profile: invalid choice: 'medium'"),
    ("--hpml-tolerance=ten", "--hpml-tolerance: 'ten' is not a number"),
    ("--hpml-tolerance=-0.1", "--hpml-tolerance: '-0.1' is out of range"),
    ("--hpml-max-time=0", "--hpml-max-time: '0' must be > 0"),
    ("--hpml-min-samples=many", "--hpml-min-samples: 'many' is not a int"),
    ("--hpml-report=out.txt", "--hpml-report: 'out.txt': the report file must end in .md"),
])
def test_malformed_options_are_usage_errors(pytester: pytest.Pytester, option: str,
                                            fragment: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert fragment in result.stderr.str()


@pytest.mark.parametrize("options, message", [
    ("min_sample=3", "test_x: unknown @pytest.mark.hpml option 'min_sample'; known: min_samples"),
    ("warmup=0", "test_x: @pytest.mark.hpml(warmup=0): warmup takes an int >= 1 (the first "
                 "call is never a sample)"),
    ('min_samples="3"', "test_x: @pytest.mark.hpml(min_samples='3'): min_samples takes an int "
                        ">= 1, e.g. min_samples=5"),
    ("3", "test_x: @pytest.mark.hpml takes keyword options only, got (3,); write e.g. "
          "@pytest.mark.hpml(min_samples=3)"),
    ("tolerance=-1", "tolerance takes a fraction >= 0"),
    ("cold_l2=1", "cold_l2 takes True or False"),
])
def test_bad_hpml_marker_options_are_a_one_line_error(pytester: pytest.Pytester, options: str,
                                                      message: str) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.hpml({options})
        def test_x(hpml):
            hpml.record("x", 1.0, better="lower")
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # at collection, before any test runs
    assert message in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("sweep, message", [
    ('"k", quick=[1], full=[2], ful=[3]', "hpml_sweep('k') got unknown key(s) ['ful']; it takes "
                                          "quick=[...] and full=[...]"),
    ('"k", quick="123", full=[1]', "hpml_sweep('k', quick=...) takes a list of values, e.g. "
                                   "quick=[1, 10]; got '123'"),
    ('"k", quick=[1], full=[]', "hpml_sweep('k') has no values for profile 'full'"),
    ('"k", quick=[1], full=5', "hpml_sweep('k', full=...) takes a list of values"),
])
def test_bad_sweeps_are_one_line_errors_in_either_profile(pytester: pytest.Pytester, sweep: str,
                                                          message: str) -> None:
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.hpml_sweep({sweep})\n"
                        "def test_x(k):\n    pass\n")
    result = pytester.runpytest(*FAST)  # the quick profile: the full list is checked too
    assert result.ret != 0
    assert message in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
