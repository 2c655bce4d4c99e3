import pytest
import torch

from suites.common.threads import one_cpu_thread


@pytest.fixture
def two_threads():
    """Two intra-op threads for the test, whatever the process had, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_one_thread_inside_the_block_on_the_cpu_and_restored_after_it(two_threads):
    with one_cpu_thread(torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_restored_when_the_block_raises(two_threads):
    with pytest.raises(RuntimeError), one_cpu_thread(torch.device("cpu")):
        raise RuntimeError("out of memory")
    assert torch.get_num_threads() == 2


def test_a_gpu_block_keeps_the_cpu_threads(two_threads):
    # Only the device's type is read: no GPU is needed to check this.
    with one_cpu_thread(torch.device("cuda", 0)):
        assert torch.get_num_threads() == 2
