"""Exhaustion: a pod that accepts any GPU keeps off a GPU model whose free GPUs the pods bound to it need."""

from __future__ import annotations

import pytest

from kubegang.placement import GangRequest, Placement, Snapshot, TaskShape, WorkloadMix, _exhaustion, node_score, plan
from kubegang.placement._exhaustion import bound_demand, exclusive_demand, scarce_classes, scarce_products
from kubegang.topology import ANY_FLAVOUR, GPUInfo, NodeInfo, compile_index

T4 = "gpu:T4"


def _node(name: str, product: str, gpus: int) -> NodeInfo:
    return NodeInfo(name, {}, tuple(GPUInfo(j, product) for j in range(gpus)), cpu_milli=64_000, memory_mib=262_144)


def _snapshot(t4_share: float) -> Snapshot:
    # Two 2-GPU T4 nodes, one of them full, and one 8-GPU A100 node: T4 has 2 of the 10 free GPUs.
    # ``t4_share`` of the demand (by GPUs) is bound to T4; the rest accepts any GPU, half of it
    # 1-GPU pods and half 8-GPU pods (which want the A100 node whole: FGD puts a 1-GPU pod on the
    # T4 node to keep it so).
    rest = 1.0 - t4_share
    mix = WorkloadMix({TaskShape(1, flavours=(T4,)): t4_share, TaskShape(1): rest * 8 / 9,
                       TaskShape(8): rest / 9})
    snap = Snapshot(compile_index([_node("a100", "A100", 8), _node("t4-0", "T4", 2), _node("t4-1", "T4", 2)]), mix)
    full = GangRequest("full", gpus_per_pod=2, gpu_product="T4")
    result = plan(full, snap)
    assert isinstance(result, Placement)
    snap.allocate_all(result.allocations(full))
    return snap


def _node_of(gang: GangRequest, snap: Snapshot) -> str:
    result = plan(gang, snap)
    assert isinstance(result, Placement), result
    return result.nodes[0]


def test_the_bound_demand_is_each_models_share_of_the_gpus_asked_for() -> None:
    mix = WorkloadMix({TaskShape(1, flavours=(T4,)): 1.0, TaskShape(2, flavours=("gpu:V100a", "gpu:V100b")): 1.0,
                       TaskShape(1): 2.0})
    # GPUs asked for: 1 (T4) + 2 (either V100) + 2 (any) = 5.
    assert bound_demand(mix) == pytest.approx({T4: 0.2, "gpu:V100a": 0.2, "gpu:V100b": 0.2})
    assert bound_demand(WorkloadMix({TaskShape(1): 1.0, TaskShape(4): 1.0})) == {}


def test_a_model_is_scarce_while_its_share_of_the_free_gpus_is_below_its_bound_demand() -> None:
    # T4: 2 of 10 free GPUs (a fifth); bound demand 0.4 -> scarce; 0.2 (not below) -> not.
    assert scarce_products(_snapshot(0.4)) == {T4}
    assert scarce_products(_snapshot(0.2)) == frozenset()


def test_a_pod_that_accepts_any_gpu_keeps_off_a_scarce_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = GangRequest("any", gpus_per_pod=1)
    snap = _snapshot(0.4)
    assert _node_of(pod, snap) == "a100"
    free_t4 = next(name for name in ("t4-0", "t4-1") if node_score(pod, snap, name) > 0)
    assert node_score(pod, snap, free_t4) == 1 < node_score(pod, snap, "a100")
    # Where T4 is not scarce, FGD's choice stands: the small node, so the 8-GPU node stays whole.
    assert _node_of(pod, _snapshot(0.2)) == free_t4
    # And without the rule the same pod takes the T4 node though T4 is scarce.
    monkeypatch.setattr(_exhaustion, "spare_for", lambda flavour, snapshot: _exhaustion.NOTHING)
    assert _node_of(pod, _snapshot(0.4)) == free_t4
    assert node_score(pod, _snapshot(0.4), free_t4) > 1


def test_a_pod_bound_to_the_scarce_model_still_goes_there_and_so_does_one_that_fits_nowhere_else() -> None:
    snap = _snapshot(0.4)
    assert _node_of(GangRequest("t4", gpus_per_pod=1, gpu_product="T4"), snap).startswith("t4-")
    # The A100 node full: a pod that accepts any GPU takes the scarce model rather than wait.
    result = plan(GangRequest("whole", gpus_per_pod=8), snap)
    assert isinstance(result, Placement)
    snap.allocate_all(result.allocations(GangRequest("whole", gpus_per_pod=8)))
    assert _node_of(GangRequest("any", gpus_per_pod=1), snap).startswith("t4-")


def test_any_flavour_is_what_an_unconstrained_pod_asks_for() -> None:
    assert GangRequest("any", gpus_per_pod=1).flavour == ANY_FLAVOUR


def _classes_cluster(big_weight: float) -> Snapshot:
    # Two 8-GPU classes: "small" (96 CPUs, 384 GiB, three nodes) and "big" (128 CPUs, 768 GiB, one
    # node: a quarter of the free GPUs), the only one for the 120-CPU pods.
    nodes = [NodeInfo(f"small-{i}", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=96_000, memory_mib=393_216)
             for i in range(3)]
    nodes.append(NodeInfo("big", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=128_000, memory_mib=786_432))
    mix = WorkloadMix({TaskShape(4, cpu_milli=32_000, memory_mib=320_512): 6.0,
                       TaskShape(8, cpu_milli=120_000, memory_mib=655_360): big_weight})
    return Snapshot(compile_index(nodes), mix)


def test_a_node_class_is_bound_the_demand_only_it_can_hold() -> None:
    snap = _classes_cluster(2.0)
    classes = snap.node_classes
    big = classes.of[snap.topology.node_number["big"]]
    # GPUs asked for: 24 (4-GPU pods, either class) + 16 (only "big") = 40.
    demand = exclusive_demand(snap.workload, classes)
    assert demand[big] == pytest.approx(0.4)
    assert sum(demand) == pytest.approx(0.4)
    # "big" holds 8 of the 32 free GPUs (0.25 < 0.4): scarce; with a demand of 8/32, not (not below).
    assert scarce_classes(snap) == {big}
    assert scarce_classes(_classes_cluster(1.0)) == frozenset()
    # The free GPUs of a class follow allocations.
    pod = GangRequest("p", gpus_per_pod=1)
    result = plan(pod, snap)
    assert isinstance(result, Placement)
    snap.allocate_all(result.allocations(pod))
    assert sum(classes.free) == 31


def test_a_pod_keeps_off_a_scarce_class_while_another_node_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    mid = GangRequest("mid", gpus_per_pod=4, cpu_milli=60_000, memory_mib=320_512)
    # Counting memory, a "small" node would strand its other 4 GPUs for the 4-GPU shape (36 CPUs and
    # 72 GiB left), so FGD alone sends the pod to "big", which the 120-CPU pods need.
    assert _node_of(mid, _classes_cluster(2.0)).startswith("small-")
    monkeypatch.setattr(_exhaustion, "scarce_classes", lambda snapshot: frozenset())
    assert _node_of(mid, _classes_cluster(2.0)) == "big"
    monkeypatch.undo()
    # Where "big" is not short of GPUs for its own demand, FGD's choice stands.
    assert _node_of(mid, _classes_cluster(1.0)) == "big"
    # The pods bound to the class still go there.
    assert _node_of(GangRequest("b", gpus_per_pod=8, cpu_milli=120_000, memory_mib=655_360),
                    _classes_cluster(2.0)) == "big"


def test_one_class_is_never_scarce() -> None:
    snap = Snapshot(compile_index([_node(f"n{i}", "A100", 8) for i in range(2)]),
                    WorkloadMix({TaskShape(8): 1.0}))
    assert scarce_classes(snap) == frozenset()
