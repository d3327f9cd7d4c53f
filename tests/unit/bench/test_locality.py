"""The "GPUs inside a node" yardstick (``bench.sim._locality``): what it counts, and that its shadow is
what a run with the wiring hidden would choose."""

from __future__ import annotations

import dataclasses
import random

from bench import _locality as tables
from bench.sim import KubegangPolicy, benchmark_spec, for_cluster, load_cluster, simulate
from bench.sim import _openb as openb
from bench.sim._cluster import Cluster
from bench.sim._locality import LocalityCounts, LocalityObserver, LocalityRecorder, blind_topology
from kubegang.placement import Allocation, Snapshot
from kubegang.topology import GPUInfo, NodeInfo, compile_index, layout


def _pcie_node() -> Snapshot:
    gpus = layout("pcie-8gpu").dress(tuple(GPUInfo(j, "T4") for j in range(8)))
    return Snapshot(compile_index([NodeInfo("n0", {}, gpus)]))


def test_a_pod_counts_where_one_numa_node_or_switch_had_room_and_whole_node_pods_not_at_all() -> None:
    snapshot = _pcie_node()
    recorder = LocalityRecorder(snapshot.topology)
    for alloc in (Allocation("one", 0, "n0", (0,)), Allocation("split", 0, "n0", (3, 4)),
                  Allocation("pair", 0, "n0", (6, 7))):
        snapshot.allocate(alloc)
        recorder.placed(snapshot, (alloc,))
    # "split" could have had 2-3 (a switch, a socket) and took neither; "pair" took a switch and a socket.
    assert recorder.aware == LocalityCounts(pods=2, numa_possible=2, numa=1, switch_possible=2, switch=1)
    # The blind shadow took the lowest free GPUs: 1-2 for "split" (one socket, two switches), then
    # 3-4 for "pair" (neither).
    assert recorder.blind == LocalityCounts(pods=2, numa_possible=2, numa=1, switch_possible=2, switch=0)
    whole = LocalityRecorder(_pcie_node().topology)
    empty = _pcie_node()
    alloc = Allocation("all", 0, "n0", tuple(range(8)))
    empty.allocate(alloc)
    whole.placed(empty, (alloc,))
    assert whole.aware.pods == 0


def test_openb_kubegangs_choice_beats_the_blind_one_and_the_shadow_is_a_blind_run() -> None:
    full = load_cluster("openb")
    # A slice with every board of the trace: 8-GPU PCIe and V100 servers, 4- and 2-GPU ones.
    nodes = [n for n in full.topology.nodes if len(n.gpus) >= 4][::6] + [
        n for n in full.topology.nodes if len(n.gpus) < 4][::20]
    cluster = Cluster("openb-slice", compile_index(nodes), sum(len(n.gpus) for n in nodes), full.products)
    tasks = openb.load_tasks("multigpu50")
    (aware,) = openb.replay(cluster, "multigpu50", "kubegang", [3], tasks)
    assert aware.locality is not None
    hidden = Cluster(cluster.name, blind_topology(cluster.topology), cluster.gpus, cluster.products)
    (blind,) = openb.replay(hidden, "multigpu50", "kubegang", [3], tasks)
    # Which GPUs a node holds never changes where tasks go: the same curve.
    assert blind.allocation == aware.allocation
    # The real blind run, judged by the true wiring, is what the shadow counted.
    order = list(tasks)
    random.Random(3).shuffle(order)
    snapshot = hidden.snapshot()
    snapshot.workload = openb.workload_mix(tasks)
    place, _ = openb.kubegang_placer(snapshot, random.Random(3))
    judge = LocalityRecorder(cluster.topology)
    arrived = 0.0
    for task in openb.inflate(order, cluster.gpus, random.Random(3)):
        if arrived * 100 >= (openb.ARRIVED_POINTS - 1) * cluster.gpus:
            break
        arrived += task.gpu_request
        allocation = place(task)
        if allocation is not None:
            snapshot.allocate(allocation)
            judge.placed(snapshot, (allocation,))
    assert judge.aware == aware.locality.blind
    assert aware.locality.aware.pods > 20
    assert aware.locality.aware.numa_share == 1.0
    assert aware.locality.blind.numa_share < aware.locality.aware.numa_share


def test_gang_runs_the_shadow_is_a_blind_run_and_the_table_shows_both() -> None:
    cluster = load_cluster("superpod-h100")
    jobs = for_cluster(dataclasses.replace(benchmark_spec("philly", 60, 105)), cluster)
    observed = LocalityObserver(KubegangPolicy())
    simulate(observed, cluster, jobs, seed=105)
    hidden = Cluster(cluster.name, blind_topology(cluster.topology), cluster.gpus, cluster.products)
    real_blind = LocalityObserver(KubegangPolicy(), truth=cluster.topology)
    simulate(real_blind, hidden, jobs, seed=105)
    assert real_blind.recorder.aware == observed.recorder.blind
    assert observed.recorder.aware.pods > 0
    runs = [{"shape": "superpod-h100", "workload": "philly", "policy": "kubegang", "seed": 105,
             "locality": observed.recorder.figures()}]
    (row,) = [line for line in tables.gang_lines(runs) if line.startswith("| superpod-h100")]
    assert f"| {observed.recorder.aware.pods:,} |" in row
