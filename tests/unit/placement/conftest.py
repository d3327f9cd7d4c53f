"""Random small clusters for the property and oracle tests (seeded, reproducible)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from kubegang.levels import Level
from kubegang.placement import Allocation, GangRequest, Snapshot, Toleration
from kubegang.topology import GPUInfo, NodeInfo, Taint, compile_index

ClusterFactory = Callable[[random.Random], tuple[list[NodeInfo], Snapshot]]
GangFactory = Callable[[random.Random, str], GangRequest]


def random_nodes(rng: random.Random, max_nodes: int = 32) -> list[NodeInfo]:
    """A consistent random tree: nodes in NVLink groups (or none), leaves, spines, blocks."""
    count = rng.randint(2, max_nodes)
    leaf_size = rng.randint(1, 8)
    spine_size = rng.randint(1, 4)
    block_size = rng.randint(1, 3)
    nvlink_size = rng.choice([0, 0, 2, 4])
    gpu_choices = rng.choice([(8,), (4, 8), (2, 4, 8)])
    products = rng.choice([("H100",), ("H100", "A100")])
    nodes = []
    for i in range(count):
        leaf = i // leaf_size
        spine = leaf // spine_size
        block = spine // block_size
        labels = {"kubegang.io/leaf": f"l{leaf}", "kubegang.io/spine": f"s{spine}", "kubegang.io/block": f"b{block}",
                  "zone": rng.choice(["a", "b"])}
        # NVLink groups never straddle a leaf: start a new group at each leaf boundary.
        nvlink = f"nv{leaf}-{(i % leaf_size) // nvlink_size}" if nvlink_size else None
        taints = (Taint("reserved", "yes"),) if rng.random() < 0.1 else ()
        product = rng.choice(products)
        nodes.append(NodeInfo(
            name=f"n{i:02d}", labels=labels,
            gpus=tuple(GPUInfo(j, product, healthy=rng.random() > 0.03) for j in range(rng.choice(gpu_choices))),
            nvlink_domain=nvlink, cpu_milli=rng.choice([0, 16_000, 64_000]), memory_mib=0,
            max_pods=rng.choice([0, 0, 3]), taints=taints, unschedulable=rng.random() < 0.03,
        ))
    return nodes


def random_load(rng: random.Random, snapshot: Snapshot) -> None:
    """Random single-node pods, whole and fractional, placed directly (not through plan)."""
    for n, node in enumerate(snapshot.topology.nodes):
        for p, gpu in enumerate(node.gpus):
            if not snapshot.gpu_healthy[n][p] or rng.random() < 0.5:
                continue
            milli = 1000 if rng.random() < 0.8 else rng.choice([250, 500])
            snapshot.allocate(Allocation(f"bg-{node.name}-{gpu.index}", 0, node.name, (gpu.index,), milli,
                                         cpu_milli=rng.choice([0, 4000, 12_000])))


def random_gang(rng: random.Random, gang_id: str) -> GangRequest:
    required = rng.choice([None, None, Level.NODE, Level.NVLINK, Level.LEAF, Level.SPINE, Level.BLOCK])
    return GangRequest(
        gang_id,
        pods=rng.randint(1, 6),
        gpus_per_pod=rng.choice([1, 2, 4, 8]),
        cpu_milli=rng.choice([0, 4000]),
        gpu_product=rng.choice([None, None, "H100", "A100"]),
        node_selector={"zone": "a"} if rng.random() < 0.1 else {},
        tolerations=(Toleration("reserved", "Exists"),) if rng.random() < 0.5 else (),
        required_level=required,
    )


@pytest.fixture
def make_cluster() -> ClusterFactory:
    def build(rng: random.Random) -> tuple[list[NodeInfo], Snapshot]:
        nodes = random_nodes(rng)
        snapshot = Snapshot(compile_index(nodes))
        random_load(rng, snapshot)
        return nodes, snapshot
    return build


@pytest.fixture
def make_gang() -> GangFactory:
    return random_gang
