"""pytest-benchmark's hooks with its argument names (from its hookspec module), declared by
pytest_hpml.benchmark where pytest-benchmark is not active, so that a conftest implementing one
(pytest_benchmark_update_machine_info is common) passes pytest's check of unknown hooks.
pytest-hpml never calls them. Never registered as a plugin: these are specifications only."""

from typing import Any

import pytest


@pytest.hookspec
def pytest_benchmark_scale_unit(config: pytest.Config, unit: Any, benchmarks: Any, best: Any,
                                worst: Any, sort: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_generate_machine_info(config: pytest.Config) -> Any: ...


@pytest.hookspec
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_generate_commit_info(config: pytest.Config) -> Any: ...


@pytest.hookspec
def pytest_benchmark_update_commit_info(config: pytest.Config, commit_info: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_group_stats(config: pytest.Config, benchmarks: Any, group_by: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_generate_json(config: pytest.Config, benchmarks: Any, include_data: Any,
                                   machine_info: Any, commit_info: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any,
                                 output_json: Any) -> Any: ...


@pytest.hookspec
def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: Any, compared_benchmark: Any) -> Any: ...
