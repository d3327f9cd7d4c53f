"""FGD fragmentation: the measure on hand-checked nodes, its sanity properties, and the choice."""

from __future__ import annotations

import random

import pytest

from kubegang.placement import (
    Allocation,
    GangRequest,
    Placement,
    Snapshot,
    TaskShape,
    WorkloadMix,
    node_score,
    plan,
)
from kubegang.placement._fragmentation import FragmentationModel, node_state
from kubegang.topology import ANY_FLAVOUR, GPUInfo, NodeInfo, compile_index, uniform_fabric

ANY = (ANY_FLAVOUR,)
H100 = ("gpu:H100", ANY_FLAVOUR)


def frag(mix: WorkloadMix, milli: list[int], cpu: int = 1 << 40, mem: int = 1 << 40,
         keys: tuple[str, ...] = ANY) -> float:
    model = mix.model
    return model.fragmentation(node_state(milli, [keys] * len(milli), model), cpu, mem)


def test_free_gpus_no_shape_can_use_are_all_fragmented() -> None:
    mix = WorkloadMix({TaskShape(2): 1.0})
    # One whole GPU and a half: a 2-GPU pod fits nowhere, so all 1.5 free GPUs are stranded.
    assert frag(mix, [1000, 500, 0, 0]) == pytest.approx(1.5)
    # Two whole GPUs are exactly what the pod needs: nothing is fragmented.
    assert frag(mix, [1000, 1000, 0, 0]) == 0.0
    # It fits, but the half GPU beside the two whole ones is unusable to it.
    assert frag(mix, [1000, 1000, 500, 0]) == pytest.approx(0.5)


def test_expectation_over_the_mix() -> None:
    mix = WorkloadMix({TaskShape(1, 500): 3.0, TaskShape(8): 1.0})
    # Shares fit in both GPUs (nothing stranded for them); an 8-GPU pod fits nowhere (all of 1.3).
    assert frag(mix, [1000, 300]) == pytest.approx(0.75 * 0.3 + 0.25 * 1.3)
    assert frag(mix, [1000] * 8) == 0.0


def test_cpu_memory_and_model_make_a_node_unusable() -> None:
    mix = WorkloadMix({TaskShape(1, cpu_milli=4000, memory_mib=8192, flavours=("gpu:H100",)): 1.0})
    assert frag(mix, [1000, 1000], cpu=8000, mem=16384, keys=H100) == 0.0
    assert frag(mix, [1000, 1000], cpu=3999, mem=16384, keys=H100) == 2.0
    assert frag(mix, [1000, 1000], cpu=8000, mem=8191, keys=H100) == 2.0
    assert frag(mix, [1000, 1000], cpu=8000, mem=16384, keys=("gpu:A100", ANY_FLAVOUR)) == 2.0


def test_sanity_properties_on_random_states() -> None:
    rng = random.Random(7)
    shapes = {TaskShape(rng.choice([1, 2, 4, 8]), cpu_milli=rng.choice([0, 8000])): rng.random() for _ in range(6)}
    shapes[TaskShape(1, rng.choice([250, 500]))] = 1.0
    mix = WorkloadMix(shapes)
    for _ in range(200):
        milli = [rng.choice([0, 0, 250, 500, 1000, 1000]) for _ in range(8)]
        cpu = rng.choice([0, 4000, 16000])
        value = frag(mix, milli, cpu=cpu)
        # Never more than what is free, never negative; an empty node has nothing to fragment.
        assert 0.0 <= value <= sum(milli) / 1000 + 1e-9
        # More CPU never makes more GPUs unusable.
        assert frag(mix, milli, cpu=cpu + 8000) <= value + 1e-9
    assert frag(mix, [0] * 8) == 0.0


def test_observed_mix_decays_and_moves_its_version() -> None:
    mix = WorkloadMix(half_life=10, refresh_every=5)
    assert {s.gpus for s, _ in mix.distribution()} == {1, 2, 4, 8}  # the default before any request
    version = mix.version
    mix.observe(TaskShape(8))
    assert mix.version > version
    assert mix.distribution() == ((TaskShape(8), 1.0),)
    for _ in range(50):
        mix.observe(TaskShape(1, 500))
    mix.refresh()
    probs = dict(mix.distribution())
    assert probs[TaskShape(1, 500)] > 0.95  # 50 newer requests, the old one decayed by 2**-5
    with pytest.raises(ValueError, match="coverage"):
        WorkloadMix(coverage=0)
    with pytest.raises(ValueError, match="gpu_milli"):
        TaskShape(2, 500)


def test_a_share_goes_where_it_fills_a_fragment() -> None:
    # Node 0 has one GPU with 0.3 left, node 1 is empty. The mix is mostly whole 1-GPU pods.
    snap = Snapshot(compile_index(uniform_fabric(2, gpus=2, leaf_size=2)),
                    WorkloadMix({TaskShape(1): 9.0, TaskShape(1, 300): 1.0}))
    snap.allocate(Allocation("bg", 0, "node-00000", (0,), gpu_milli=700))
    result = plan(GangRequest("p", gpus_per_pod=0, gpu_fraction_milli=300), snap)
    assert isinstance(result, Placement)
    assert result.assignments[0].node == "node-00000" and result.assignments[0].gpus == (0,)
    # A share that does not fit the 0.3 hole strands half a GPU for 1-GPU pods on either node:
    # the tie goes to best fit, the node already broken.
    other = plan(GangRequest("q", gpus_per_pod=0, gpu_fraction_milli=500), snap)
    assert isinstance(other, Placement) and other.assignments[0].node == "node-00000"


def test_choice_keeps_whole_nodes_for_the_shapes_that_need_them() -> None:
    # Node 0: 4 of 8 GPUs free; node 1: 6 of 8 free, but only 1000m CPU left. The mix is 4-GPU
    # pods with 8 CPUs, so node 1's GPUs are stranded already (no CPU) and node 0's four GPUs
    # are exactly one future pod. Best fit by GPU count would break node 0's block of four.
    nodes = [NodeInfo(f"n{i}", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=64_000) for i in range(2)]
    snap = Snapshot(compile_index(nodes), WorkloadMix({TaskShape(4, cpu_milli=8000): 1.0}))
    snap.allocate(Allocation("a", 0, "n0", (0, 1, 2, 3), cpu_milli=8000))
    snap.allocate(Allocation("b", 0, "n1", (0, 1), cpu_milli=63_000))
    pod = GangRequest("p", gpus_per_pod=1, cpu_milli=500)
    result = plan(pod, snap)
    assert isinstance(result, Placement) and result.assignments[0].node == "n1"
    assert node_score(pod, snap, "n1") > node_score(pod, snap, "n0")


def test_index_follows_allocations_and_rollbacks() -> None:
    snap = Snapshot(compile_index(uniform_fabric(4, gpus=4, leaf_size=2)), WorkloadMix({TaskShape(4): 1.0}))
    index = snap.fragmentation
    assert index.node_fragmentation(0) == 0.0
    with snap.what_if():
        snap.allocate(Allocation("x", 0, "node-00000", (0,)))
        assert index.node_fragmentation(0) == pytest.approx(3.0)  # 3 GPUs left, a 4-GPU pod cannot fit
    assert index.node_fragmentation(0) == 0.0
    # Once a node is broken, 1-GPU pods fill it rather than break a second one.
    snap.allocate(Allocation("bg", 0, "node-00001", (0,)))
    for i in range(3):
        pod = GangRequest(f"p{i}")
        result = plan(pod, snap)
        assert isinstance(result, Placement) and result.assignments[0].node == "node-00001"
        snap.allocate_all(result.allocations(pod))
    assert all(index.node_fragmentation(n) == 0.0 for n in range(4))


def test_model_memo_is_shared_and_consistent() -> None:
    mix = WorkloadMix({TaskShape(2): 1.0})
    model: FragmentationModel = mix.model
    state = node_state([1000, 500], [ANY, ANY], model)
    first = model.fragmentation(state, 0, 0)
    assert model.fragmentation(state, 0, 0) == first == pytest.approx(1.5)
    mix.observe(TaskShape(1, 500))
    mix.refresh()
    assert model.fragmentation(state, 0, 0) < first  # the new mix can use the half GPU
