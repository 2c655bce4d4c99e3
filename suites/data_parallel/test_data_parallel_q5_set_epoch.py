"""Question 5: why must a DDP training loop call DistributedSampler.set_epoch(epoch)?

Shown with the sample order each rank's loader served in epochs 1 and 2. The sampler shuffles
with a generator seeded by seed + epoch, and it only learns the epoch from set_epoch: without
the call, every epoch replays epoch 0's permutation, so each rank sees the same shard in the
same order every epoch (the same batches, the same BatchNorm batch statistics). DataParallel
needs no such call: one process, one ordinary shuffling sampler that draws a new permutation
every epoch.
"""

from __future__ import annotations

import pytest

from suites.data_parallel.lab import launch
from suites.data_parallel.ranks import sample_order_rank

pytestmark = pytest.mark.data_parallel

IMAGES = 256
WORKERS = 2


def _head(order: list[int], n: int = 6) -> str:
    return " ".join(str(i) for i in order[:n]) + " ..."


def _same_position(a: list[int], b: list[int]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def _shared(a: list[int], b: list[int]) -> float:
    return len(set(a) & set(b)) / len(set(a))


@pytest.mark.hpml_devices("cpu")  # the sampler is the same on any device
@pytest.mark.parametrize("set_epoch", [True, False], ids=["set_epoch", "no_set_epoch"])
def test_set_epoch_reshuffles_every_epoch(hpml, device, set_epoch, lab):
    hpml.experiment = "Q5: DistributedSampler.set_epoch - sample order of epochs 1 and 2"
    recipe = lab.recipe(batch_per_worker=32, set_epoch=set_epoch)
    orders = launch(sample_order_rank, WORKERS, IMAGES, recipe, 2)  # [rank][epoch][position]
    hpml.param(workers=WORKERS, images=IMAGES,
               rank0_epoch1=_head(orders[0][0]), rank0_epoch2=_head(orders[0][1]))
    hpml.record("same_position", 100 * sum(_same_position(*r) for r in orders) / WORKERS,
                unit="%", note="same_position: share of positions holding the same sample in "
                "epochs 1 and 2 (mean over ranks)", better=None)
    hpml.record("shard_kept", 100 * sum(_shared(*r) for r in orders) / WORKERS, unit="%",
                note="shard_kept: share of a rank's epoch-1 samples it sees again in epoch 2 "
                f"({100 // WORKERS} % by chance)", better=None)

    for epoch in range(2):
        shards = [set(rank[epoch]) for rank in orders]
        # Within an epoch the ranks split the data: disjoint shards that cover it.
        assert set().union(*shards) == set(range(IMAGES))
        assert sum(len(s) for s in shards) == IMAGES
    replayed = all(r[0] == r[1] for r in orders)
    assert replayed is not set_epoch, ("without set_epoch every epoch must replay the same "
                                       "order, with it the order must change")
