"""How close a multi-GPU pod's GPUs sit inside its node: the production choice against a topology-blind one.

The yardstick, for every pod that holds two or more whole GPUs but fewer than its node has (whole-node
pods have no choice): do its GPUs share one NUMA node, and one PCIe switch? Counted only over the pods
for which the node's free GPUs at that moment allowed it (some NUMA node, or switch, had that many
free), so the share is of what was possible, 100% at best. The wiring judged is the node's true one
(``GPUInfo.numa_node`` / ``pcie_switch``, from ``kubegang.topology.LAYOUTS``).

*Topology-blind* is kubegang as it chooses GPUs on a node whose wiring it does not know (no agent, or a
GPUNode without these readings): the lowest free indices, ``kubegang.placement.choose_gpus(None, ...)``.
It is measured on a shadow snapshot of the same run: every allocation the run makes is mirrored there
on the same node with the blind choice, and every release too. Which GPUs of a node are held never
changes a node-level decision (the capacity index and FGD's node states count free GPUs, and a
shared GPU's room, not which GPU it is), so the shadow holds exactly what a run with the wiring hidden
would hold; ``tests/unit/bench/test_locality.py`` checks that against a real blind run.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubegang.placement import MILLI, Allocation, Snapshot, choose_gpus
from kubegang.topology import GPUInfo, NodeInfo, TopologyIndex, compile_index

from ._cluster import Cluster
from ._engine import Policy, Step, Wrapped
from ._workload import Job


@dataclass
class LocalityCounts:
    """Multi-GPU pods judged, and how many shared a NUMA node / PCIe switch where they could."""

    pods: int = 0
    numa_possible: int = 0
    numa: int = 0
    switch_possible: int = 0
    switch: int = 0

    def add(self, other: LocalityCounts) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def numa_share(self) -> float:
        """Fraction 0..1 of the pods that could sit on one NUMA node and did (NaN: none could)."""
        return self.numa / self.numa_possible if self.numa_possible else math.nan

    @property
    def switch_share(self) -> float:
        """The same for one PCIe switch."""
        return self.switch / self.switch_possible if self.switch_possible else math.nan


def blind(node: NodeInfo) -> NodeInfo:
    """``node`` with its GPUs' wiring hidden (what kubegang sees without the agent's readings)."""
    gpus = tuple(dataclasses.replace(g, numa_node=None, pcie_switch=None, nvlink_peers=frozenset()) for g in node.gpus)
    return dataclasses.replace(node, gpus=gpus)


def blind_topology(topology: TopologyIndex) -> TopologyIndex:
    return compile_index([blind(n) for n in topology.nodes])


def _judge(gpus: Sequence[GPUInfo], held: Sequence[int], free_before: set[int]) -> LocalityCounts:
    """One pod holding device indices ``held`` of a node's ``gpus``, chosen among ``free_before``."""
    k = len(held)
    counts = LocalityCounts()
    if k < 2 or k >= len(gpus):
        return counts
    counts.pods = 1
    by_index = {g.index: g for g in gpus}
    for attr, possible, done in (("numa_node", "numa_possible", "numa"), ("pcie_switch", "switch_possible", "switch")):
        free_in: dict[object, int] = {}
        for i in free_before:
            gid = getattr(by_index[i], attr)
            if gid is not None:
                free_in[gid] = free_in.get(gid, 0) + 1
        if any(c >= k for c in free_in.values()):
            setattr(counts, possible, 1)
            ids = {getattr(by_index[i], attr) for i in held}
            setattr(counts, done, int(len(ids) == 1 and None not in ids))
    return counts


class LocalityRecorder:
    """Judges every allocation of a run, and mirrors it on a topology-blind shadow (module docstring)."""

    def __init__(self, topology: TopologyIndex) -> None:
        self.topology = topology
        self.shadow = Snapshot(blind_topology(topology))
        self.aware = LocalityCounts()
        self.blind = LocalityCounts()

    def placed(self, snapshot: Snapshot, allocations: Iterable[Allocation]) -> None:
        """``allocations`` were just applied to ``snapshot`` (one pod or a whole gang)."""
        items = list(allocations)
        nodes = self.topology.nodes
        # Pods placed together on one node chose one after another: each among what the later ones left.
        later: dict[str, set[int]] = {}
        for a in reversed(items):
            n = self.topology.node_number[a.node]
            gpus = nodes[n].gpus
            if a.gpu_milli == MILLI:
                free_now = {g.index for p, g in enumerate(gpus)
                            if snapshot.gpu_milli[n][p] == MILLI and snapshot.gpu_healthy[n][p]}
                mine = later.setdefault(a.node, set())
                mine.update(a.gpus)
                self.aware.add(_judge(gpus, a.gpus, free_now | mine))
        for a in items:
            self._mirror(snapshot, a)

    def _mirror(self, snapshot: Snapshot, a: Allocation) -> None:
        shadow = self.shadow
        n = shadow.topology.node_number[a.node]
        gpus = shadow.topology.nodes[n].gpus
        milli = shadow.gpu_milli[n]
        if a.gpu_milli == MILLI:
            free = [p for p, m in enumerate(milli) if m == MILLI and shadow.gpu_healthy[n][p]]
            positions = choose_gpus(shadow.gpu_wiring[n], free, len(a.gpus))
            held = tuple(gpus[p].index for p in positions)
            self.blind.add(_judge(self.topology.nodes[n].gpus, held, {gpus[p].index for p in free}))
        else:  # a share: the lowest GPU with the room the real run's GPU had (the same FGD choice)
            room = snapshot.free_milli(a.node, a.gpus[0]) + a.gpu_milli
            held = (next(gpus[p].index for p, m in enumerate(milli) if m == room and shadow.gpu_healthy[n][p]),)
        shadow.allocate(dataclasses.replace(a, gpus=held))

    def released(self, owner: str) -> None:
        self.shadow.release(owner)

    def figures(self) -> dict[str, dict[str, int]]:
        """The counts as plain data (raw results): ``aware`` (the run's own choice) and ``blind``."""
        return {"aware": dataclasses.asdict(self.aware), "blind": dataclasses.asdict(self.blind)}


class LocalityObserver(Wrapped):
    """A gang policy under the recorder: each start is judged, each completion and eviction released.
    ``truth``: the wiring to judge by, when the run's cluster hides it (tests of the shadow)."""

    def __init__(self, inner: Policy, truth: TopologyIndex | None = None) -> None:
        super().__init__(inner)
        self.truth = truth

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        super().reset(cluster, snapshot, rng)
        self.recorder = LocalityRecorder(self.truth or cluster.topology)

    def schedule(self, now: float) -> Step:
        step = self.inner.schedule(now)
        for uid in step.evicted:
            self.recorder.released(uid)
        for uid in step.started:
            self.recorder.placed(self.snapshot, self.snapshot.allocations_of(uid))
        return step

    def finished(self, job: Job, now: float) -> None:
        self.recorder.released(job.id)
        self.inner.finished(job, now)
