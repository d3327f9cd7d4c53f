"""The FGD paper's workload-inflation experiment on the Alibaba GPU trace (openb).

Source: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23; trace from alibaba/clusterdata, cluster-trace-gpu-v2023
(copied into ``bench/data/openb``). The method, as the paper's artifact runs it: the trace's tasks
arrive one by one in a uniformly shuffled order (one per seed) and never leave; then tasks sampled
uniformly at random (with replacement) from the trace are cloned until the requested GPUs reach
1.3x the cluster's capacity (``multigpu50``'s tasks alone request 1.8x: nothing is cloned). A task
that does not fit when it arrives is dropped. The shuffle is the artifact's: its run scripts
(``experiments/run_scripts/generate_run_scripts.py``) pass ``--shuffle-pod=true``, and the trace's
``creation_time`` column cannot restore an order there (the simulator parses the annotation as
RFC 3339, which the trace's integer seconds are not, so every task sorts as "no time"). Creation
order is a harder workload (bursts of one shape): in it, our Random and BestFit fall 0.4 and 1.4
points short of the paper's published curves at 100% arrived; shuffled, they match them
(``replay(..., shuffle=False)`` keeps creation order). After every task we record the GPU allocation
rate (GPUs allocated, a shared GPU counting its fraction, over the cluster's 6,212) against the
arrived workload (GPUs requested so far over capacity); the curve is read at 0..130%.

Every constraint of a task is honoured: CPU, memory, GPU count, GPU fraction (``gpu_milli``) and the
GPU models it accepts (``gpu_spec``, ``A|B``). Policies:

- ``kubegang``: the core's single-pod placement, ``kubegang.placement.plan``: FGD, the pod goes where
  it grows the node's fragmentation least, measured against the trace's task mix
  (``workload_mix``; ``kubegang/placement/_fragmentation.py``). A task accepting several models is
  planned once per model and the best-scored placement wins. CPU-only tasks cannot be expressed
  as a ``GangRequest`` (it needs a GPU), so the adapter asks the same fragmentation index for the
  node where the task's CPU and memory grow fragmentation least (ties: the fewest free GPUs).
- ``random`` and ``bestfit``: re-implementations of the paper's Random-fit and Best-fit baselines
  (its simulator's ``getBestFitScore``: score = 1 - 0.5 (free CPU - request) / max CPU - 0.5 (free
  GPU milli - request) / max GPU milli, scaled to 0..100 as an integer, ties broken at random as
  kube-scheduler does). Shared GPUs: the fullest GPU that fits (best fit inside the node).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kubegang.placement import MILLI, Allocation, GangRequest, Placement, Snapshot, TaskShape, WorkloadMix, plan
from kubegang.topology import ANY_FLAVOUR, flavour_key

from ._cluster import Cluster
from ._locality import LocalityRecorder

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "openb"
"""The trace files, the paper's published curves, and the upstream README."""

WORKLOADS = ("default", "multigpu50")
INFLATION = 1.3
MAX_SPEC_CPU = 128_000.0
"""Best-fit's CPU normaliser, the paper simulator's ``MaxSpecCpu`` (milli-CPU)."""
MAX_SPEC_GPU = 8_000.0
"""Best-fit's GPU normaliser, its ``MaxSpecGpu`` (milli-GPU)."""
ARRIVED_POINTS = 131
"""Arrived workload 0..130 % of capacity."""


@dataclass(frozen=True, slots=True)
class Task:
    """One trace task (a pod)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Thousandths of each GPU; below 1000 only with ``num_gpu`` 1 (a shared GPU)."""
    gpu_spec: tuple[str, ...] = ()
    """GPU models accepted; empty means any."""

    @property
    def gpu_request(self) -> float:
        """GPUs requested, a shared GPU counted as its fraction."""
        return self.num_gpu * self.gpu_milli / MILLI

    @property
    def shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI


def load_tasks(workload: str, data_dir: Path = DATA_DIR) -> list[Task]:
    """The trace's tasks in creation order (file order when the file has no creation time)."""
    if workload not in WORKLOADS:
        raise ValueError(f"openb workload must be one of {', '.join(WORKLOADS)}, got {workload!r}")
    path = data_dir / f"openb_pod_list_{workload}.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    keyed: list[tuple[int, int, Task]] = []
    for i, row in enumerate(rows):
        num_gpu = int(row["num_gpu"])
        spec = row.get("gpu_spec") or ""
        task = Task(row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), num_gpu,
                    int(row["gpu_milli"]) if num_gpu else 0,
                    tuple(s for s in spec.split("|") if s))
        keyed.append((int(row.get("creation_time") or 0), i, task))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [task for _, _, task in keyed]


def inflate(tasks: Sequence[Task], capacity: float, rng: random.Random, ratio: float = INFLATION) -> list[Task]:
    """The trace, then uniformly sampled clones until requests reach ``ratio`` x ``capacity`` GPUs."""
    out = list(tasks)
    requested = sum(t.gpu_request for t in out)
    clone = 0
    while requested < ratio * capacity:
        source = tasks[rng.randrange(len(tasks))]
        out.append(Task(f"{source.name}-clone-{clone}", source.cpu_milli, source.memory_mib, source.num_gpu,
                        source.gpu_milli, source.gpu_spec))
        requested += source.gpu_request
        clone += 1
    return out


def arrivals(trace: Sequence[Task], capacity: float, seed: int) -> list[Task]:
    """The tasks of one shuffled replay, in arrival order: the trace in ``seed``'s random order, then
    its clones (``inflate``), as the paper's artifact runs it."""
    order = list(trace)
    random.Random(seed).shuffle(order)
    return inflate(order, capacity, random.Random(seed))


def workload_mix(tasks: Sequence[Task]) -> WorkloadMix:
    """The trace's GPU task mix, the distribution FGD measures fragmentation against (as the paper
    does: the target workload's shapes by popularity). The paper's artifact keeps the most popular
    shapes that make 95% of the tasks, CPU-only tasks included; here every GPU shape is kept, which
    allocated more on openb, and CPU-only tasks are left out: they see every free GPU as a fragment,
    so for a GPU task they shift every node's value alike and only blur the comparison."""
    counts: dict[TaskShape, float] = {}
    for task in tasks:
        if task.num_gpu == 0:
            continue  # a CPU-only task uses no GPU: it cannot see a GPU fragment
        flavours = tuple(flavour_key(model) for model in task.gpu_spec) or (ANY_FLAVOUR,)
        shape = TaskShape(task.num_gpu, task.gpu_milli, task.cpu_milli, task.memory_mib, flavours)
        counts[shape] = counts.get(shape, 0.0) + 1.0
    return WorkloadMix(counts)


Placer = Callable[[Task], Allocation | None]
"""Chooses where a task goes (an allocation not yet applied), or None when it fits nowhere."""


class _Arrays:
    """Per-node free resources as numpy arrays, kept in step with the snapshot (baselines' fast path)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        nodes = snapshot.topology.nodes
        self.cpu_free = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem_free = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.whole = np.array([len(n.gpus) for n in nodes], dtype=np.int64)
        self.max_milli = np.array([MILLI if n.gpus else 0 for n in nodes], dtype=np.int64)
        self.milli_total = np.array([MILLI * len(n.gpus) for n in nodes], dtype=np.int64)
        self.max_cpu = MAX_SPEC_CPU
        self.max_gpu = MAX_SPEC_GPU
        products = sorted({g.product for n in nodes for g in n.gpus})
        self.model: dict[str, npt.NDArray[np.bool_]] = {
            p: np.array([any(g.product == p for g in n.gpus) for n in nodes]) for p in products}

    def refresh(self, n: int) -> None:
        node = self.snapshot.topology.nodes[n]
        milli = self.snapshot.gpu_milli[n]
        self.cpu_free[n] = node.cpu_milli - self.snapshot.cpu_used[n]
        self.mem_free[n] = node.memory_mib - self.snapshot.memory_used[n]
        self.whole[n] = sum(1 for m in milli if m == MILLI)
        self.max_milli[n] = max(milli, default=0)
        self.milli_total[n] = sum(milli)

    def feasible(self, task: Task) -> npt.NDArray[np.bool_]:
        ok = (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.memory_mib)
        if task.shared:
            ok &= self.max_milli >= task.gpu_milli
        elif task.num_gpu:
            ok &= self.whole >= task.num_gpu
        if task.gpu_spec:
            accepted = np.zeros_like(ok)
            for model in task.gpu_spec:
                if model in self.model:
                    accepted |= self.model[model]
            ok &= accepted
        return ok


def _on_node(snapshot: Snapshot, task: Task, owner: str, n: int, rng: random.Random | None) -> Allocation:
    """The allocation of ``task`` on node ``n``: best-fit shared GPU (or a random one), lowest free GPUs."""
    node = snapshot.topology.nodes[n]
    milli = snapshot.gpu_milli[n]
    if task.num_gpu == 0:
        return Allocation(owner, 0, node.name, (), MILLI, task.cpu_milli, task.memory_mib)
    if task.shared:
        fitting = [p for p, m in enumerate(milli) if m >= task.gpu_milli]
        p = rng.choice(fitting) if rng is not None else min(fitting, key=lambda p: (milli[p], p))
        return Allocation(owner, 0, node.name, (node.gpus[p].index,), task.gpu_milli, task.cpu_milli,
                          task.memory_mib)
    free = [node.gpus[p].index for p, m in enumerate(milli) if m == MILLI][: task.num_gpu]
    return Allocation(owner, 0, node.name, tuple(free), MILLI, task.cpu_milli, task.memory_mib)


def random_placer(snapshot: Snapshot, rng: random.Random) -> tuple[Placer, Callable[[int], None]]:
    """The paper's Random-fit: any feasible node, uniformly."""
    arrays = _Arrays(snapshot)

    def place(task: Task) -> Allocation | None:
        nodes = np.flatnonzero(arrays.feasible(task))
        if not len(nodes):
            return None
        return _on_node(snapshot, task, task.name, int(nodes[rng.randrange(len(nodes))]), rng)

    return place, arrays.refresh


def bestfit_placer(snapshot: Snapshot, rng: random.Random) -> tuple[Placer, Callable[[int], None]]:
    """The paper's Best-fit (see the module docstring for the score)."""
    arrays = _Arrays(snapshot)

    def place(task: Task) -> Allocation | None:
        ok = arrays.feasible(task)
        nodes = np.flatnonzero(ok)
        if not len(nodes):
            return None
        request = task.num_gpu * task.gpu_milli
        waste = (0.5 * (arrays.cpu_free[nodes] - task.cpu_milli) / arrays.max_cpu
                 + 0.5 * (arrays.milli_total[nodes] - request) / arrays.max_gpu)
        score = ((1.0 - waste) * 100).astype(np.int64)
        best = nodes[score == score.max()]
        return _on_node(snapshot, task, task.name, int(best[rng.randrange(len(best))]), None)

    return place, arrays.refresh


def kubegang_placer(snapshot: Snapshot, rng: random.Random) -> tuple[Placer, Callable[[int], None]]:
    """The core's ``plan`` for GPU tasks, its fragmentation index for CPU-only ones (module docstring)."""
    arrays = _Arrays(snapshot)

    def place(task: Task) -> Allocation | None:
        if task.num_gpu == 0:
            shape = TaskShape(0, MILLI, task.cpu_milli, task.memory_mib)
            for _, members in snapshot.fragmentation.ranked(shape):
                return _on_node(snapshot, task, task.name, min(members), None)
            return None
        best: tuple[Placement, GangRequest] | None = None
        for model in task.gpu_spec or (None,):
            gang = GangRequest(
                task.name, pods=1,
                gpus_per_pod=0 if task.shared else task.num_gpu,
                gpu_fraction_milli=task.gpu_milli if task.shared else 0,
                cpu_milli=task.cpu_milli, memory_mib=task.memory_mib,
                gpu_product=model,
            )
            if model is not None and snapshot.capacity.get(flavour_key(model)) is None:
                continue
            result = plan(gang, snapshot)
            if isinstance(result, Placement) and (best is None or result.score > best[0].score):
                best = (result, gang)
        if best is None:
            return None
        (allocation,) = best[0].allocations(best[1])
        return allocation

    return place, arrays.refresh


OPENB_POLICIES: dict[str, Callable[[Snapshot, random.Random], tuple[Placer, Callable[[int], None]]]] = {
    "kubegang": kubegang_placer,
    "random": random_placer,
    "bestfit": bestfit_placer,
}
"""Single-pod placement policies for the openb experiment."""

DETERMINISTIC = frozenset({"kubegang"})
"""Policies whose choices do not depend on the seed: the trace prefix is replayed once for them."""


@dataclass
class Curve:
    """Allocation rate (%) at each arrived-workload point 0..130 (%), plus what was dropped."""

    allocation: list[float]
    placed: int
    failed: int
    dropped: list[int] = field(default_factory=list)
    """Tasks dropped so far at each arrived point (0: every task that arrived was placed, so the
    allocation is what arrived, whatever the policy)."""
    locality: LocalityRecorder | None = None
    """GPUs of multi-GPU tasks inside their nodes, production and topology-blind (``_locality``)."""


class _Replay:
    """Feeds tasks to a placer over one snapshot and records the curve."""

    def __init__(self, cluster: Cluster, policy: str, rng: random.Random, snapshot: Snapshot | None = None,
                 workload: WorkloadMix | None = None) -> None:
        self.cluster = cluster
        self.snapshot = snapshot if snapshot is not None else cluster.snapshot()
        if workload is not None:
            self.snapshot.workload = workload
        self.place, self.refresh = OPENB_POLICIES[policy](self.snapshot, rng)
        # A replay from a copied prefix has no shadow of that prefix: it is not judged.
        self.locality = LocalityRecorder(self.snapshot.topology) if snapshot is None else None
        if snapshot is not None:
            for n in range(self.snapshot.topology.node_count):
                self.refresh(n)
        self.arrived = 0.0
        self.allocated = 0.0
        self.placed = 0
        self.failed = 0
        self.points: list[float] = []
        self.dropped: list[int] = []

    def feed(self, tasks: Sequence[Task]) -> None:
        capacity = self.cluster.gpus
        number = self.snapshot.topology.node_number
        for task in tasks:
            if len(self.points) == ARRIVED_POINTS:
                return  # the curve is complete at 130% arrived
            allocation = self.place(task)
            if allocation is None:
                self.failed += 1
            else:
                self.snapshot.allocate(allocation)
                if self.locality is not None:
                    self.locality.placed(self.snapshot, (allocation,))
                self.refresh(number[allocation.node])
                self.allocated += task.gpu_request
                self.placed += 1
            self.arrived += task.gpu_request
            while len(self.points) < ARRIVED_POINTS and self.arrived * 100.0 >= len(self.points) * capacity:
                self.points.append(100.0 * self.allocated / capacity)
                self.dropped.append(self.failed)

    def curve(self) -> Curve:
        missing = ARRIVED_POINTS - len(self.points)
        points = self.points + [self.points[-1] if self.points else 0.0] * missing
        dropped = self.dropped + [self.failed] * missing
        return Curve(points, self.placed, self.failed, dropped, self.locality)


def replay(cluster: Cluster, workload: str, policy: str, seeds: Sequence[int],
           tasks: Sequence[Task] | None = None, *, shuffle: bool = True) -> list[Curve]:
    """One curve per seed: the trace in a seeded random order, then the seed's clones (``inflate``).

    ``shuffle=False`` replays the trace in creation order instead (where the file gives one; the
    paper's artifact shuffles, see the module docstring).
    """
    trace = list(tasks) if tasks is not None else load_tasks(workload)
    mix = workload_mix(trace)
    curves: list[Curve] = []
    prefix: _Replay | None = None
    if shuffle:
        for seed in seeds:
            run = _Replay(cluster, policy, random.Random(seed), workload=mix)
            run.feed(arrivals(trace, cluster.gpus, seed))
            curves.append(run.curve())
        return curves
    if policy in DETERMINISTIC:
        prefix = _Replay(cluster, policy, random.Random(0), workload=mix)
        prefix.feed(trace)
    for seed in seeds:
        rng = random.Random(seed)
        clones = inflate(trace, cluster.gpus, random.Random(seed))[len(trace):]
        if prefix is not None:
            run = _Replay(cluster, policy, rng, prefix.snapshot.clone())
            run.arrived, run.allocated = prefix.arrived, prefix.allocated
            run.placed, run.failed, run.points = prefix.placed, prefix.failed, list(prefix.points)
            run.dropped = list(prefix.dropped)
        else:
            run = _Replay(cluster, policy, rng, workload=mix)
            run.feed(trace)
        run.feed(clones)
        curves.append(run.curve())
    return curves


def paper_curves(workload: str, data_dir: Path = DATA_DIR) -> dict[str, list[float]]:
    """The paper's published allocation curves for ``workload``: policy name -> 131 points."""
    out: dict[str, list[float]] = {}
    with (data_dir / "fgd-paper-gpu-allocation.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["workload"] == f"openb_pod_list_{workload}":
                name = row["policy"].split("-", 1)[1]
                out[name] = [float(row[f"arrived_{i}"]) for i in range(ARRIVED_POINTS)]
    return out
