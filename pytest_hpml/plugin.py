"""pytest-hpml's entry point (pytest11): it only wires the plugin's modules, each of which
declares its own options, markers and hooks beside the code that reads them, and the hooks
by which they hand work to each other (hookspecs)."""

import pytest

#: The hook modules, registered in this order (pytest_addhooks), each as a plugin of its own.
HOOK_MODULES = [
    "pytest_hpml.session",  # the run's shared state: first, the others read it
    "pytest_hpml.termination",  # SIGTERM and SIGHUP stop the run as Ctrl-C does
    "pytest_hpml.environment",  # malloc thresholds, intra-op threads: before torch starts
    "pytest_hpml.selection",  # size profile, sweeps, the device parameter, precisions
    "pytest_hpml.devices",  # GPU discovery, xdist pinning, Triton's interpreter, gpu skips
    "pytest_hpml.policy",  # timing policy: options and @pytest.mark.hpml
    "pytest_hpml.fixture",  # the hpml fixture
    # progress before recording and rerun, which import it: registered first, it is imported
    # (and its asserts rewritten) as a plugin
    "pytest_hpml.progress",  # what a run says while fresh processes run (xdist workers' too)
    "pytest_hpml.recording",  # the records' way from a test to the controller
    # benchmark imports benchmark_options: registered first, it is imported (and its asserts
    # rewritten) as a plugin, not as a module benchmark happened to import
    "pytest_hpml.benchmark_options",  # pytest-benchmark's options where it is not active
    "pytest_hpml.benchmark",  # pytest-benchmark's benchmark fixture where it is not active
    # fresh_process before rerun, which imports it: registered first, it is imported (and its
    # asserts rewritten) as a plugin
    "pytest_hpml.fresh_process",  # being a fresh process of another run (--hpml-rerun)
    "pytest_hpml.rerun",  # fresh processes of the run's tests
    "pytest_hpml.judging",  # the rules every comparison holds a change to
    "pytest_hpml.stored_baseline",  # --hpml-compare: the stored baseline, read once
    "pytest_hpml.saving",  # --hpml-save-baseline: a run merged into it
    "pytest_hpml.base_ref",  # verdicts against a git ref measured now (--hpml-compare-ref)
    "pytest_hpml.reporting",  # tables, files, exports and charts at the end
    "pytest_hpml.ranks",  # torchrun / srun: the job's ranks run one session, rank 0 writes
]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_hpml import hookspecs

    pluginmanager.add_hookspecs(hookspecs)
    # Registered here rather than named in pytest_plugins, which pytest first looks up among
    # the entry points of every installed distribution, one scan a name: 0.03 s of every
    # process's start here, a third of a fresh confirming process's. import_plugin marks each
    # for assertion rewriting before it imports it, as pytest_plugins does.
    for name in HOOK_MODULES:
        pluginmanager.import_plugin(name)
