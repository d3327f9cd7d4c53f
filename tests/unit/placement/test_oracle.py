"""The engine's topology span against an exhaustive oracle on random clusters of <= 32 nodes.

The oracle shares nothing with the engine's index or capacity arithmetic: for every level and
every domain (grouped straight from node labels), it simulates placing the gang's pods one by one
on concrete free GPUs, with every constraint, and records the narrowest level where some domain
takes them all. The engine must find that same level (or say unplaceable exactly when the oracle
finds nothing within the required level) in at least 99% of cases, and every placement it returns
must be valid.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.topology import NodeInfo

ClusterFactory = Callable[[random.Random], tuple[list[NodeInfo], Snapshot]]
GangFactory = Callable[[random.Random, str], GangRequest]

CASES = 400


def _domain_key(node: NodeInfo, level: Level) -> str:
    if level is Level.NODE:
        return node.name
    if level is Level.NVLINK:
        return node.nvlink_domain or f"self:{node.name}"
    if level is Level.CLUSTER:
        return "all"
    return node.labels[f"kubegang.io/{level.label}"]


def _pods_on_node(snapshot: Snapshot, n: int, node: NodeInfo, gang: GangRequest) -> int:
    """Simulate: how many of the gang's pods does this node take, one at a time?"""
    if node.unschedulable:
        return 0
    if any(k not in node.labels or node.labels[k] != v for k, v in gang.node_selector.items()):
        return 0
    for taint in node.taints:
        if not any(t.key in ("", taint.key) and (t.operator == "Exists" or t.value == taint.value)
                   for t in gang.tolerations):
            return 0
    free_gpus = [
        p for p, gpu in enumerate(node.gpus)
        if snapshot.gpu_healthy[n][p] and snapshot.gpu_milli[n][p] == 1000
        and (gang.gpu_product is None or gpu.product == gang.gpu_product)
    ]
    cpu_left = node.cpu_milli - snapshot.cpu_used[n]
    pods_left = node.max_pods - snapshot.pods_used[n]
    placed = 0
    while True:
        if len(free_gpus) < gang.gpus_per_pod:
            return placed
        if node.cpu_milli and gang.cpu_milli and cpu_left < gang.cpu_milli:
            return placed
        if node.max_pods and pods_left < 1:
            return placed
        del free_gpus[:gang.gpus_per_pod]
        cpu_left -= gang.cpu_milli
        pods_left -= 1
        placed += 1


def oracle_span(nodes: list[NodeInfo], snapshot: Snapshot, gang: GangRequest) -> Level | None:
    top = gang.required_level or Level.CLUSTER
    number = snapshot.topology.node_number
    for level in (lvl for lvl in Level if Level.NODE <= lvl <= top):
        domains: dict[str, int] = {}
        for node in nodes:
            key = _domain_key(node, level)
            domains[key] = domains.get(key, 0) + _pods_on_node(snapshot, number[node.name], node, gang)
        if any(room >= gang.pods for room in domains.values()):
            return level
    return None


def _valid(nodes: list[NodeInfo], snapshot: Snapshot, gang: GangRequest, placement: Placement) -> bool:
    assert len(placement.assignments) == gang.pods
    keys = {_domain_key(next(n for n in nodes if n.name == a.node), placement.level) for a in placement.assignments}
    assert len(keys) == 1, "pods must all be in the reported domain"
    with snapshot.what_if():
        snapshot.allocate_all(placement.allocations(gang))  # raises if any GPU is double-booked
        for node in nodes:
            n = snapshot.topology.node_number[node.name]
            assert not node.cpu_milli or snapshot.cpu_used[n] <= node.cpu_milli or not gang.cpu_milli or \
                all(a.node != node.name for a in placement.assignments)
            assert not node.max_pods or snapshot.pods_used[n] <= node.max_pods or \
                all(a.node != node.name for a in placement.assignments)
    return True


def test_span_matches_exhaustive_oracle(make_cluster: ClusterFactory, make_gang: GangFactory) -> None:
    rng = random.Random(20240601)
    agree = 0
    placed = 0
    for case in range(CASES):
        nodes, snapshot = make_cluster(rng)
        gang = make_gang(rng, f"gang-{case}")
        expected = oracle_span(nodes, snapshot, gang)
        result = plan(gang, snapshot)
        got = result.level if isinstance(result, Placement) else None
        if isinstance(result, Placement):
            placed += 1
            assert _valid(nodes, snapshot, gang, result)
            assert gang.required_level is None or result.level <= gang.required_level
        agree += got == expected
    assert placed > CASES // 4, "the generator must produce enough placeable cases to mean something"
    assert placed < CASES, "and some unplaceable ones"
    assert agree / CASES >= 0.99, f"span matched the oracle in {agree}/{CASES} cases"
