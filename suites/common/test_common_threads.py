import torch

from suites.common.threads import one_cpu_thread


def test_one_thread_inside_the_block_on_the_cpu_and_restored_after_it():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_cpu_thread(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_restored_when_the_block_raises():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        try:
            with one_cpu_thread(torch.device("cpu")):
                raise RuntimeError("out of memory")
        except RuntimeError:
            pass
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_gpu_block_keeps_the_cpu_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        # Only the device's type is read: no GPU is needed to check this.
        with one_cpu_thread(torch.device("cuda", 0)):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
