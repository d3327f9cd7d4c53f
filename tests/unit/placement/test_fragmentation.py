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
from kubegang.placement._fragmentation import FragmentationModel, fgd_level, node_state
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


def test_cpu_model_and_memory_make_a_node_unusable_memory_unless_told_not_to() -> None:
    shape = TaskShape(1, cpu_milli=4000, memory_mib=8192, flavours=("gpu:H100",))
    mix = WorkloadMix({shape: 1.0}, count_memory=False)
    assert frag(mix, [1000, 1000], cpu=8000, mem=16384, keys=H100) == 0.0
    assert frag(mix, [1000, 1000], cpu=3999, mem=16384, keys=H100) == 2.0
    assert frag(mix, [1000, 1000], cpu=8000, mem=16384, keys=("gpu:A100", ANY_FLAVOUR)) == 2.0
    # The paper's measure has CPU and GPU only: short memory strands nothing...
    assert frag(mix, [1000, 1000], cpu=8000, mem=8191, keys=H100) == 0.0
    # ...ours counts it by default.
    counted = WorkloadMix({shape: 1.0})
    assert counted.count_memory
    assert frag(counted, [1000, 1000], cpu=8000, mem=8191, keys=H100) == 2.0
    assert frag(counted, [1000, 1000], cpu=8000, mem=8192, keys=H100) == 0.0


def test_memory_stays_a_hard_constraint_of_placement() -> None:
    nodes = [NodeInfo(f"n{i}", {}, tuple(GPUInfo(j) for j in range(2)), cpu_milli=64_000, memory_mib=16_384)
             for i in range(2)]
    snap = Snapshot(compile_index(nodes), WorkloadMix({TaskShape(1, memory_mib=8192): 1.0}))
    snap.allocate(Allocation("a", 0, "n0", (0,), memory_mib=12_288))
    pod = GangRequest("p", gpus_per_pod=1, memory_mib=8192)
    # n0 is the best fit by GPUs, but has 4 GiB left: the pod must go to n1.
    result = plan(pod, snap)
    assert isinstance(result, Placement) and result.assignments[0].node == "n1"


def test_mid_size_pod_leaves_the_big_memory_node_for_the_pods_only_it_holds() -> None:
    # n0: 8 GPUs, 96 CPUs, 384 GiB; n1: 8 GPUs, 128 CPUs, 768 GiB, the only node for the
    # 120-CPU pods. A 4-GPU pod of 60 CPUs and 313 GiB leaves too little memory on n0 for the
    # mix's 4-GPU pods (32 CPUs, 313 GiB); counting memory calls that stranding and sends the
    # pod to n1. That is right while n1 has GPUs to spare for the pods only it holds; once their
    # demand needs them, n1's class is scarce and the pod keeps off it (``_exhaustion``; tested in
    # test_exhaustion.py). The paper's CPU-and-GPU measure keeps n1 whole.
    def cluster(mix: WorkloadMix) -> Snapshot:
        return Snapshot(compile_index([
            NodeInfo("n0", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=96_000, memory_mib=393_216),
            NodeInfo("n1", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=128_000, memory_mib=786_432),
        ]), mix)

    shapes = {TaskShape(4, cpu_milli=32_000, memory_mib=320_512): 6.0,
              TaskShape(8, cpu_milli=120_000, memory_mib=655_360): 1.0}
    mid = GangRequest("mid", gpus_per_pod=4, cpu_milli=60_000, memory_mib=320_512)
    for count_memory, node in ((False, "n0"), (True, "n1")):
        result = plan(mid, cluster(WorkloadMix(shapes, count_memory=count_memory)))
        assert isinstance(result, Placement) and result.assignments[0].node == node, count_memory


def test_fgd_level_is_the_papers_score() -> None:
    assert fgd_level(0.0) == 50
    assert fgd_level(1e-12) == 50 and fgd_level(-1e-12) == 50  # float noise is no change
    assert fgd_level(0.001) == 49  # any growth of fragmentation scores below no change
    assert fgd_level(-0.039) == 50 and fgd_level(-0.041) == 51  # a level is ~1/25 GPU near zero
    assert fgd_level(-1.0) == 73 and fgd_level(1.0) == 26
    assert fgd_level(-20.0) == 99 and fgd_level(20.0) == 0


def test_changes_within_one_level_go_to_best_fit() -> None:
    # A 0.3-GPU share. n0 has 1.6 GPUs free (0.6 and a whole one), n1 has 1.2 (0.8 and 0.4).
    # Against this mix the share shrinks n0's fragmentation by 0.018 GPU more than n1's: noise
    # at the paper's resolution (both changes are one level), so best fit decides: n1.
    mix = WorkloadMix({TaskShape(1, 100): 1.0, TaskShape(1): 1.0, TaskShape(1, 300): 0.5, TaskShape(2): 0.3})
    snap = Snapshot(compile_index(uniform_fabric(2, gpus=2, leaf_size=2)), mix)
    snap.allocate(Allocation("a", 0, "node-00000", (0,), gpu_milli=400))
    snap.allocate(Allocation("b", 0, "node-00001", (0,), gpu_milli=200))
    snap.allocate(Allocation("c", 0, "node-00001", (1,), gpu_milli=600))
    shape = TaskShape(1, 300)
    c0, c1 = snap.fragmentation.choice(0, shape), snap.fragmentation.choice(1, shape)
    assert c0 is not None and c1 is not None
    assert c0.delta < c1.delta - 0.01 and fgd_level(c0.delta) == fgd_level(c1.delta)
    result = plan(GangRequest("p", gpus_per_pod=0, gpu_fraction_milli=300), snap)
    assert isinstance(result, Placement) and result.assignments[0].node == "node-00001"


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


def test_ties_go_to_the_papers_best_fit_of_gpus_and_cpu() -> None:
    # Against 1-GPU pods no placement changes fragmentation (one level everywhere). After the pod
    # n0 would keep 1 GPU and 60 CPUs, n1 2 GPUs and 4 CPUs. Fewest free GPUs alone says n0; the
    # paper's best fit (free GPUs and CPU, each as a share of the largest node's) says n1, and
    # keeps n0's CPUs for a pod that needs them.
    nodes = [NodeInfo(f"n{i}", {}, tuple(GPUInfo(j) for j in range(8)), cpu_milli=64_000) for i in range(2)]
    snap = Snapshot(compile_index(nodes), WorkloadMix({TaskShape(1): 1.0}))
    snap.allocate(Allocation("a", 0, "n0", (0, 1, 2, 3, 4, 5), cpu_milli=3000))
    snap.allocate(Allocation("b", 0, "n1", (0, 1, 2, 3, 4), cpu_milli=59_000))
    result = plan(GangRequest("p", gpus_per_pod=1, cpu_milli=1000), snap)
    assert isinstance(result, Placement) and result.assignments[0].node == "n1"


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
