"""Extender helpers (filter reasons, prioritize scores) and the largest-placeable-gang metric."""

from __future__ import annotations

from kubegang.levels import Level
from kubegang.placement import (
    UNKNOWN_NODE,
    Allocation,
    GangRequest,
    Snapshot,
    feasible_nodes,
    largest_placeable,
    node_score,
    node_scores,
)
from kubegang.topology import GPUInfo, NodeInfo, Taint, compile_index, uniform_fabric


def test_feasible_nodes_gives_a_reason_per_failing_node() -> None:
    nodes = [
        *uniform_fabric(2, gpus=4, leaf_size=2, cpu_milli=8000),
        NodeInfo("cordoned", {}, (GPUInfo(0),), unschedulable=True),
        NodeInfo("tainted", {}, (GPUInfo(0),), taints=(Taint("gpu", "x", "NoExecute"),)),
    ]
    snap = Snapshot(compile_index(nodes))
    snap.allocate(Allocation("a", 0, "node-00000", (0, 1, 2)))
    snap.allocate(Allocation("b", 0, "node-00001", (0,), cpu_milli=6000))
    pod = GangRequest("p", gpus_per_pod=2, cpu_milli=4000)
    ok, failed = feasible_nodes(pod, snap, ["node-00000", "node-00001", "cordoned", "tainted", "cpu-only"])
    assert ok == []
    assert failed == {
        "node-00000": "needs 2 GPUs free; has 1 of 4",
        "node-00001": "needs 4000m CPU; has 2000m free",
        "cordoned": "node is cordoned",
        "tainted": "untolerated taint gpu=x:NoExecute",
        "cpu-only": UNKNOWN_NODE,
    }
    ok, failed = feasible_nodes(GangRequest("q", gpus_per_pod=1), snap)
    assert ok == ["node-00000", "node-00001"]


def test_scores_prefer_partly_used_nodes_and_busy_leaves() -> None:
    snap = Snapshot(compile_index(uniform_fabric(8, gpus=8, leaf_size=4)))
    snap.allocate(Allocation("a", 0, "node-00001", tuple(range(6))))
    pod = GangRequest("p", gpus_per_pod=2)
    scores = node_scores(pod, snap, ["node-00000", "node-00001", "node-00004"])
    assert scores["node-00001"] > scores["node-00000"] > scores["node-00004"], scores
    assert all(0 <= s <= 10 for s in scores.values())
    assert node_score(GangRequest("big", gpus_per_pod=8), snap, "node-00001") == 0


def test_fractional_score_prefers_an_already_shared_gpu() -> None:
    snap = Snapshot(compile_index(uniform_fabric(2, gpus=2, leaf_size=2)))
    snap.allocate(Allocation("s", 0, "node-00000", (0,), gpu_milli=500))
    pod = GangRequest("p", gpus_per_pod=0, gpu_fraction_milli=500)
    assert node_score(pod, snap, "node-00000") > node_score(pod, snap, "node-00001")


def test_largest_placeable_per_level() -> None:
    snap = Snapshot(compile_index(uniform_fabric(16, gpus=8, leaf_size=4, spine_size=2)))
    for n in (0, 1, 4, 9):
        snap.allocate(Allocation(f"x{n}", 0, f"node-{n:05d}", (0,)))
    whole = largest_placeable(snap)
    assert whole[Level.NODE] == 8
    assert whole[Level.LEAF] == 4 * 8  # leaf 3 (nodes 12-15) is untouched
    assert whole[Level.SPINE] == 7 * 8  # spine 1: leaf 2 has 3 whole nodes, leaf 3 has 4
    assert whole[Level.CLUSTER] == 12 * 8
    any_gpu = largest_placeable(snap, gpus_per_pod=1)
    assert any_gpu[Level.CLUSTER] == 16 * 8 - 4
    assert any_gpu[Level.LEAF] == 32
