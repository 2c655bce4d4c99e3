"""Q1: how many parameters, and how much memory they need in theory (fp32, stored once)."""

import pytest

from suites.complexity.models import (
    ALL_MODELS,
    CIFAR_RESNET18,
    basic_block_resnet_parameters,
    build_model,
    parameter_bytes,
    parameter_count,
)
from suites.complexity.reference import TORCHVISION_DOCS, TORCHVISION_PUBLISHED

pytestmark = pytest.mark.complexity


@pytest.mark.parametrize("model", ALL_MODELS)
def test_parameters_and_theoretical_memory(hpml, model: str) -> None:
    hpml.experiment = "Parameters and theoretical parameter memory (fp32)"
    net = build_model(model, "meta")  # shapes only: counting needs no weights
    count = parameter_count(net)
    hpml.record("parameters", count, better=None, exact=True)
    hpml.record("parameter_memory", parameter_bytes(net), unit="B", better=None, exact=True)
    if model == CIFAR_RESNET18:
        expected = basic_block_resnet_parameters(stem_kernel=3, classes=10)
        hpml.setting("closed_form", expected, note="closed_form: the BasicBlock ResNet formula "
                     "of models.py, derived on paper")
    else:
        expected = TORCHVISION_PUBLISHED[model].parameters
        hpml.reference("published", expected, source=TORCHVISION_DOCS)
    assert count == expected
    assert parameter_bytes(net) == 4 * count
