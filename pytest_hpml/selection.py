"""What runs: the size profile, sweeps per profile, the `device` parametrization, the
precision markers and the shard of the suite this runner takes (a pytest plugin module)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_hpml.machine.gpus import visible_gpu_count
from pytest_hpml.session import add_option, run_of

PROFILES = ("quick", "full")
PRECISIONS = ("fp64", "fp32", "fp16", "bf16", "int8")
DEVICES = ("cpu", "cuda")


def precisions(*names: str) -> list[Any]:
    """pytest.param(torch.<dtype>, marks=<precision marker>, id=name) for each name."""
    import torch

    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16,
              "bf16": torch.bfloat16, "int8": torch.int8}
    unknown = [n for n in names if n not in dtypes]
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}; choose from {list(dtypes)}")
    return [pytest.param(dtypes[n], marks=getattr(pytest.mark, n), id=n) for n in names]


PROFILE_KEY = pytest.StashKey[str]()


def profile_of(config: pytest.Config) -> str:
    """The run's size profile: --hpml-profile, else full where a GPU is visible and quick
    elsewhere (decided once per process; every module asks here)."""
    if PROFILE_KEY not in config.stash:
        config.stash[PROFILE_KEY] = config.option.hpml_profile or (
            "full" if visible_gpu_count() > 0 else "quick")
    return config.stash[PROFILE_KEY]


def device_names(definition: pytest.Function, configured: list[str]) -> list[str]:
    """The devices the test's `device` argument is parametrized with: its hpml_devices marker's
    (all of them when the marker names none), else the ini file's `hpml_devices`; none when
    the test opted in neither way (a project's own `device` fixture is left alone)."""
    marker = definition.get_closest_marker("hpml_devices")
    if marker is None:
        return list(configured)  # checked once, when the run was configured
    names = list(marker.args) or list(configured or DEVICES)
    if [n for n in names if n not in DEVICES] or marker.kwargs:
        raise pytest.UsageError(
            f"{definition.nodeid}: hpml_devices takes 'cpu' and/or 'cuda', e.g. "
            f"hpml_devices('cuda'); got {names}")
    return names


def device_params(names: list[str]) -> list[Any]:
    """A case per device, the `cuda` one marked gpu."""
    return [pytest.param(n, marks=[pytest.mark.gpu] if n == "cuda" else [], id=n) for n in names]


#: The ini file's hpml_devices, read and checked once per run.
DEVICES_KEY = pytest.StashKey[list[str]]()


def configured_devices(config: pytest.Config) -> list[str]:
    """The ini file's `hpml_devices`, checked (read once: every test's parametrization asks)."""
    if DEVICES_KEY in config.stash:
        return config.stash[DEVICES_KEY]
    names = list(config.getini("hpml_devices"))
    bad = [n for n in names if n not in DEVICES]
    if bad:
        raise pytest.UsageError(f"hpml_devices = {' '.join(names)} in {config.inipath}: the "
                                f"devices are 'cpu' and/or 'cuda', e.g. hpml_devices = cpu cuda")
    config.stash[DEVICES_KEY] = names
    return names


def _sweep_list(where: str, argname: str, profile: str, values: Any) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise pytest.UsageError(
            f"{where}: hpml_sweep({argname!r}, {profile}=...) takes a list of values, e.g. "
            f"{profile}=[1, 10]; got {values!r}")
    if not values:
        raise pytest.UsageError(f"{where}: hpml_sweep({argname!r}) has no values for profile "
                                f"{profile!r}; give at least one")
    return list(values)


def sweep_values(definition: pytest.Function, profile: str) -> list[tuple[str, list[Any]]]:
    """(argname, values) for each @pytest.mark.hpml_sweep(argname, quick=[...], full=[...]).

    Both lists are checked whatever the profile, so a mistake in the full list shows on the
    quick run of a laptop rather than first on the GPU box.
    """
    sweeps = []
    where = definition.nodeid
    for marker in definition.iter_markers("hpml_sweep"):
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            raise pytest.UsageError(f"{where}: hpml_sweep takes one argument name, "
                                    "e.g. hpml_sweep('k_million', quick=[...], full=[...])")
        argname = marker.args[0]
        unknown = sorted(set(marker.kwargs) - set(PROFILES))
        if unknown:
            raise pytest.UsageError(f"{where}: hpml_sweep({argname!r}) got unknown key(s) "
                                    f"{unknown}; it takes quick=[...] and full=[...]")
        missing = [p for p in PROFILES if p not in marker.kwargs]
        if missing:
            raise pytest.UsageError(f"{where}: hpml_sweep({argname!r}) needs a list for "
                                    f"each profile; missing: {missing}")
        lists = {p: _sweep_list(where, argname, p, marker.kwargs[p]) for p in PROFILES}
        sweeps.append((argname, lists[profile]))
    return sweeps


def _already_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test parametrizes `name` itself ("a,b", ["a", "b"] or argnames=...)."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        if name in (str(a).strip() for a in argnames):
            return True
    return False


def shard_option(text: str) -> tuple[int, int]:
    """--hpml-shard=I/N: the I-th of N shards (1 <= I <= N)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index = count = 0
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the shard as I/N with 1 <= I <= N, e.g. --hpml-shard=1/3")
    return index, count


def shard_of(nodeids: Sequence[str], index: int, count: int) -> set[str]:
    """The node ids of shard `index` of `count`: every count-th of the sorted node ids, from
    the index-th. Every runner collects the same tests, so the shards are disjoint and cover
    the suite, whatever order each collected them in."""
    return set(sorted(nodeids)[index - 1::count])


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    # A rerun is given the profile this run chose (the default may differ in the rerun).
    add_option(parser, "--hpml-profile", pin=True, rerun=False, choices=PROFILES,
               help="size profile: quick (small sizes, minutes on a CPU) or full (the "
                    "experiments as published). Default: full with a GPU, else quick.")
    # The outer run's alone: a fresh process is given its test by node id.
    add_option(parser, "--hpml-shard", rerun=False, type=shard_option, default=None,
               metavar="I/N",
               help="run the I-th of N shards of the selected tests (round-robin over their "
                    "sorted node ids), e.g. one per CI runner; `python -m pytest_hpml merge` "
                    "brings the shards' reports and baselines together")
    # Opt-in: `device` is a common fixture name, and a project's own must stay its own.
    parser.addini("hpml_devices", type="args", default=[],
                  help="devices ('cpu', 'cuda') that every test taking a `device` argument is "
                       "parametrized with, the cuda case marked gpu (default: none; a test "
                       "opts in alone with @pytest.mark.hpml_devices)")


def pytest_configure(config: pytest.Config) -> None:
    configured_devices(config)  # a bad value stops the run before collection, saying so
    for name in PRECISIONS:
        config.addinivalue_line("markers", f"{name}: runs in {name}")
    config.addinivalue_line("markers", "hpml_sweep(argname, quick, full): parametrize argname "
                            "by the size profile")
    config.addinivalue_line("markers", "hpml_devices(*names): parametrize the test's `device` "
                            "argument with 'cpu' and/or 'cuda' (none named: the ini file's "
                            "hpml_devices, else both)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    if run_of(config).used_because is None:
        return []
    return [f"hpml: profile {profile_of(config)}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("hpml_sweep"):
        # Only a sweep needs the profile: a plain test costs no GPU discovery.
        for argname, values in sweep_values(metafunc.definition, profile_of(metafunc.config)):
            metafunc.parametrize(argname, values)
    if "device" in metafunc.fixturenames and not _already_parametrized(metafunc, "device"):
        names = device_names(metafunc.definition, configured_devices(metafunc.config))
        if names:
            metafunc.parametrize("device", device_params(names))


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect: shards split what they selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.option.hpml_shard
    if not shard:
        return
    kept = shard_of([item.nodeid for item in items], *shard)
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in kept])
    items[:] = [item for item in items if item.nodeid in kept]
