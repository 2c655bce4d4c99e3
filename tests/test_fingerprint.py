"""Machine identity: the key of a baseline file, and software versions as changes."""

from __future__ import annotations

from pytest_hpml.fingerprint import fingerprint, machine_key, slugify, software_changes


def test_gpu_machines_are_keyed_by_gpu_model_and_count() -> None:
    facts = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "cpu": "AMD EPYC 9654 96-Core",
             "cpu_cores": 192}
    assert machine_key(facts) == "nvidia-h100-80gb-hbm3-x8"
    assert machine_key({**facts, "gpu_count": 0}) == "nvidia-h100-80gb-hbm3-x1"


def test_cpu_machines_are_keyed_by_cpu_model_and_cores() -> None:
    facts = {"gpu": None, "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu_cores": 2}
    assert machine_key(facts) == "intel-xeon-platinum-8481c-x2cores"


def test_software_versions_are_not_part_of_the_key() -> None:
    old = {"gpu": "NVIDIA A100-SXM4-40GB", "gpu_count": 1, "torch": "2.4.0", "driver": "550.54"}
    new = {**old, "torch": "2.5.1", "driver": "560.35"}
    assert machine_key(old) == machine_key(new)
    assert software_changes(old, new) == ["driver 550.54 -> 560.35", "torch 2.4.0 -> 2.5.1"]
    assert software_changes(old, dict(old)) == []


def test_slugify_keeps_names_file_safe() -> None:
    assert slugify("Tesla V100-SXM2-16GB") == "tesla-v100-sxm2-16gb"
    assert slugify("???") == "unknown"


def test_this_machine() -> None:
    facts = fingerprint()
    for key in ("gpu", "gpu_count", "cpu", "cpu_cores", "torch", "triton", "python", "cuda"):
        assert key in facts
    import torch

    assert facts["torch"] == torch.__version__
    key = machine_key(facts)
    assert key and "/" not in key and " " not in key
