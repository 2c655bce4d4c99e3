"""Across nodes: the rank functions of question 9, written against torch.distributed only.

    node_layout            which node each rank is on: the launcher's (GROUP_RANK, as torchrun
                           and the plugin's srun mapping set it) or, on one machine, nodes of
                           ``ranks_per_node`` consecutive ranks (emulated: every link is loopback);
                           a process group per node, and one of each node's first rank
    nodes_allreduce_rank   an all_reduce sweep within each node (every node at once), across the
                           nodes (one rank per node: the link between them alone) and over every
                           rank of the job
    nodes_training_rank    the same DDP training on the first node's ranks alone (the others
                           wait), then on every rank

Every rank makes every group, in the same order: torch.distributed.new_group is entered by all
ranks of the default group, members or not.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from pytest_hpml.distributed import rank_device
from suites.data_parallel.config import DataSpec, Recipe
from suites.data_parallel.instruments import clock_for
from suites.data_parallel.ranks import RankResult, sweep_seconds, train_rank


@dataclass
class NodeLayout:
    node: int  # this rank's node, 0 .. nodes-1
    members: list[list[int]]  # the ranks of each node
    group: Any  # this node's ranks
    leaders: Any  # each node's first rank (None on one node)
    is_leader: bool

    @property
    def nodes(self) -> int:
        return len(self.members)


def node_layout(rank: int, world_size: int, ranks_per_node: int | None = None) -> NodeLayout:
    """``ranks_per_node``: emulate nodes of that many consecutive ranks; None: the launcher's."""
    node = (rank // ranks_per_node if ranks_per_node else
            int(os.environ.get("GROUP_RANK", "0")))
    nodes_of: list[Any] = [None] * world_size
    dist.all_gather_object(nodes_of, node)
    ids = sorted(set(nodes_of))
    members = [[r for r in range(world_size) if nodes_of[r] == n] for n in ids]
    groups = [dist.new_group(m) for m in members]
    first = [m[0] for m in members]
    leaders = dist.new_group(first) if len(members) > 1 else None
    index = ids.index(node)
    return NodeLayout(node=index, members=members, group=groups[index], leaders=leaders,
                      is_leader=rank in first)


def nodes_allreduce_rank(rank: int, world_size: int, sizes: list[int], device: str = "cpu",
                         ranks_per_node: int | None = None) -> dict[str, Any]:
    """This rank's seconds per all_reduce of each size within its node, across the nodes (on
    the nodes' first ranks; None elsewhere) and over every rank. One scope at a time: the
    others wait at a barrier, so that no scope's traffic crosses another's."""
    layout = node_layout(rank, world_size, ranks_per_node)
    dev = rank_device(device)
    clock = clock_for(dev)
    clock.calibrate()
    within = sweep_seconds(sizes, dev, clock, layout.group)
    dist.barrier()
    across = None
    if layout.leaders is not None and layout.is_leader:
        across = sweep_seconds(sizes, dev, clock, layout.leaders)
    dist.barrier()
    every = sweep_seconds(sizes, dev, clock)
    return {"node": layout.node, "members": layout.members, "within": within, "across": across,
            "all": every, "host": socket.gethostname()}


def nodes_training_rank(rank: int, world_size: int, data: DataSpec, recipe: Recipe,
                        device: str = "cpu", ranks_per_node: int | None = None
                        ) -> dict[str, Any]:
    """The run on the first node alone (its ranks; None on the others), then on every rank,
    each with the recipe's batch per worker (weak scaling)."""
    layout = node_layout(rank, world_size, ranks_per_node)
    one_node: RankResult | None = None
    if layout.node == 0:
        ranks = layout.members[0]
        one_node = train_rank(ranks.index(rank), len(ranks), data, recipe, device,
                              group=layout.group)
    dist.barrier()
    every = train_rank(rank, world_size, data, recipe, device)
    return {"node": layout.node, "members": layout.members, "one_node": one_node,
            "all_nodes": every, "host": socket.gethostname()}
