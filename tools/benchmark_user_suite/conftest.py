import pytest
import torch


@pytest.fixture
def device() -> torch.device:
    # The project's own fixture: its tensors live on the CPU, whatever plugin is installed.
    return torch.device("cpu")
