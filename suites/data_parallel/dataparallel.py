"""DataParallel (the handout's wrapper, compared with DDP): one process drives N GPUs. Every step it
scatters the batch across them, copies the model from GPU 0 to each (replicate), runs the
replicas in threads, gathers the outputs on GPU 0, and backward sums the gradients there; there
are no ranks and no all-reduce, and GPU 0 does more than the others. GPU only: DataParallel needs
CUDA devices. The loop is the same as DDP's (training.train_epoch).
"""

from __future__ import annotations

import torch
from torch import nn

from suites.common.models import resnet18_cifar
from suites.data_parallel.config import Recipe
from suites.data_parallel.instruments import CudaEventClock
from suites.data_parallel.loader import DataSpec, make_loader
from suites.data_parallel.training import EpochRecord, train_epoch


def dataparallel_epochs(gpus: int, data: DataSpec, recipe: Recipe) -> list[EpochRecord]:
    """Train on GPUs 0..gpus-1 with nn.DataParallel; the batch is ``batch_per_worker`` per GPU,
    as DDP's, so that both take the same steps over the same global batches."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < gpus:
        raise ValueError(f"DataParallel on {gpus} GPUs needs {gpus} CUDA devices; "
                         f"{torch.cuda.device_count()} visible")
    device = torch.device("cuda", 0)
    torch.manual_seed(recipe.seed)
    model = nn.DataParallel(resnet18_cifar(recipe.width).to(device), device_ids=list(range(gpus)))
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                weight_decay=recipe.weight_decay)
    loader, sampler = make_loader(data.train(), recipe, world_size=1, rank=0, pin_memory=True,
                                  batch_size=recipe.global_batch(gpus))
    clock = CudaEventClock(device)
    epochs, step = [], 0
    for epoch in range(1, recipe.epochs + 1):
        sampler.set_epoch(epoch)
        epochs.append(train_epoch(model, loader, optimizer, recipe, gpus, device, clock, epoch,
                                  step))
        step += len(loader)
    return epochs
