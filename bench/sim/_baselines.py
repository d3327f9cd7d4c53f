"""Models of other schedulers' policies (models of their placement rules, not the products).

All three work on the same snapshot and workload as ``kubegang`` and allocate through the same
checked primitives. What each models, and what it leaves out, is stated on its class.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement import MILLI, Allocation, Snapshot
from kubegang.topology import FABRIC_LEVELS, FlavourCapacity, TopologyIndex, flavour_key

from ._cluster import Cluster
from ._engine import Step
from ._workload import Job

RENDEZVOUS_TIMEOUT_S = 600.0
"""torchrun's default rendezvous join timeout: a gang whose pods are not all running by then fails."""


def free_gpus(snapshot: Snapshot, n: int, key: str, count: int) -> tuple[int, ...]:
    """``count`` wholly free GPU device indices of flavour ``key`` on node ``n`` (lowest first)."""
    out: list[int] = []
    gpus = snapshot.topology.nodes[n].gpus
    for p, free in enumerate(snapshot.gpu_milli[n]):
        if free == MILLI and snapshot.gpu_healthy[n][p] and key in snapshot.gpu_keys[n][p]:
            out.append(gpus[p].index)
            if len(out) == count:
                return tuple(out)
    raise AssertionError(f"node #{n} has fewer than {count} free {key} GPUs")


def allocate_pods(snapshot: Snapshot, job: Job, nodes: Iterable[tuple[int, int]], first_pod: int = 0) -> None:
    """Allocate the job's pods on ``(node, pods)`` pairs, all or none."""
    key = flavour_key(job.product)
    allocations: list[Allocation] = []
    pod = first_pod
    with snapshot.what_if():
        # Pick devices pod by pod on a scratch state so two pods on one node get distinct GPUs.
        for n, count in nodes:
            for _ in range(count):
                gpus = free_gpus(snapshot, n, key, job.gpus_per_pod)
                allocation = Allocation(job.id, pod, snapshot.topology.nodes[n].name, gpus)
                snapshot.allocate(allocation)
                allocations.append(allocation)
                pod += 1
    snapshot.allocate_all(allocations)


def _capacity(snapshot: Snapshot, job: Job) -> FlavourCapacity | None:
    return snapshot.capacity.get(flavour_key(job.product))


class _FifoQueue:
    """Jobs by (higher priority, earlier arrival), as Volcano's and Slurm's priority queues order them."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def add(self, job: Job) -> None:
        self.jobs[job.id] = job

    def ordered(self) -> list[Job]:
        return sorted(self.jobs.values(), key=lambda j: (-j.priority, j.arrival, j.id))


class DefaultSchedulerModel:
    """A model of kube-scheduler alone: one pod at a time, no gangs.

    Pods queue by priority then creation time (the activeQ). Each pass tries every pending pod in
    that order; a pod goes to the feasible node with the most free GPUs left after it (the
    NodeResourcesFit *LeastAllocated* spread), ties broken at random as kube-scheduler's
    ``selectHost`` does. Unschedulable pods are retried on every cluster event, which is what the
    scheduling queue's move-on-event does (its backoff of 1-10 s is ignored at these time scales).
    A job starts only when all its pods run; until then the placed pods hold their GPUs. Nothing
    stops a deadlock but the workload itself: as torchrun does, a gang whose pods are not all
    running ``timeout`` seconds after its first pod started fails, its pods are deleted and the job
    controller recreates them at the back of the queue. ``timeout=None`` models no such timeout.
    """

    name = "default-scheduler"

    def __init__(self, timeout: float | None = RENDEZVOUS_TIMEOUT_S) -> None:
        self.timeout = timeout

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        self.rng = rng
        self.jobs: dict[str, Job] = {}
        self.order: dict[str, tuple[int, float, str]] = {}
        self.placed: dict[str, int] = {}
        self.first_pod: dict[str, float] = {}

    def submit(self, job: Job, now: float) -> None:
        self.jobs[job.id] = job
        self.order[job.id] = (-job.priority, now, job.id)
        self.placed[job.id] = 0

    def finished(self, job: Job, now: float) -> None:
        pass

    def waiting(self) -> int:
        return len(self.order)

    def partial_gpus(self) -> int:
        return sum(self.placed[j] * self.jobs[j].gpus_per_pod for j in self.first_pod)

    def next_timer(self) -> float | None:
        if self.timeout is None or not self.first_pod:
            return None
        return min(self.first_pod.values()) + self.timeout

    def schedule(self, now: float) -> Step:
        step = Step()
        if self.timeout is not None:
            for job_id in [j for j, t in self.first_pod.items() if t + self.timeout <= now]:
                self.snapshot.release(job_id)
                del self.first_pod[job_id]
                self.placed[job_id] = 0
                self.order[job_id] = (self.order[job_id][0], now, job_id)
        failed: dict[str, int] = {}  # flavour -> smallest pod size that found no node this pass
        for key in sorted(self.order, key=self.order.__getitem__):
            job = self.jobs[key]
            flavour = flavour_key(job.product)
            while self.placed[key] < job.pods:
                if job.gpus_per_pod >= failed.get(flavour, 1 << 30):
                    break
                n = self._pick_node(job)
                if n is None:
                    failed[flavour] = job.gpus_per_pod
                    break
                allocate_pods(self.snapshot, job, [(n, 1)], first_pod=self.placed[key])
                self.placed[key] += 1
                self.first_pod.setdefault(key, now)
            if self.placed[key] == job.pods:
                del self.order[key]
                self.first_pod.pop(key, None)
                step.started.append(key)
        return step

    def _pick_node(self, job: Job) -> int | None:
        cap = _capacity(self.snapshot, job)
        if cap is None:
            return None
        g = job.gpus_per_pod
        best: list[int] = []
        best_score = -1.0
        for free in range(g, len(cap.by_free)):
            for n in cap.by_free[free]:
                score = (cap.free[n] - g) / cap.total[n]
                if score > best_score:
                    best, best_score = [n], score
                elif score == best_score:
                    best.append(n)
        if not best:
            return None
        return self.rng.choice(sorted(best))


def _binpack_order(cap: FlavourCapacity, nodes: Iterable[int], rng: random.Random) -> list[int]:
    """Nodes fullest first (fewest free GPUs), equal nodes in a random order.

    Volcano's binpack plugin scores a node by its utilisation after the pod (with only the GPU
    resource weighted, the fewer GPUs left the higher) and ``SelectBestNode`` picks at random among
    the best-scored nodes; a tie by node name would follow the racks and give topology for free."""
    keyed = [(cap.free[n], rng.random(), n) for n in nodes]
    keyed.sort()
    return [n for _, _, n in keyed]


def _fill(cap: FlavourCapacity, order: Iterable[int], gpus_per_pod: int, pods: int) -> list[tuple[int, int]]:
    """As many pods per node as fit, in ``order``, until the gang is placed."""
    chosen: list[tuple[int, int]] = []
    left = pods
    for n in order:
        take = min(cap.free[n] // gpus_per_pod, left)
        if take:
            chosen.append((n, take))
            left -= take
            if not left:
                return chosen
    raise AssertionError(f"{pods} pods of {gpus_per_pod} GPUs do not fit the nodes offered")


class GangBinpackModel:
    """A model of Volcano's gang scheduling with the GPU binpack configuration, topology-blind.

    Configuration modelled: plugins ``gang`` (all-or-nothing, minAvailable = every pod) and
    ``binpack`` with ``binpack.resources: nvidia.com/gpu`` weighted (``binpack.weight: 10``,
    ``binpack.resources.nvidia.com/gpu: 10``; CPU and memory unweighted), ``predicates`` as the fit.
    Jobs by priority then arrival; each pass walks all of them and starts every job that fits now
    (a job that does not fit is skipped, not waited for: Volcano has no backfill reservation).
    Pods go to the fullest nodes first, as many per node as fit, **equal nodes in a seeded random
    order** (``_binpack_order``); the fabric is ignored.
    """

    name = "gang-binpack"

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        self.rng = rng
        self.queue = _FifoQueue()

    def submit(self, job: Job, now: float) -> None:
        self.queue.add(job)

    def finished(self, job: Job, now: float) -> None:
        pass

    def waiting(self) -> int:
        return len(self.queue.jobs)

    def partial_gpus(self) -> int:
        return 0

    def next_timer(self) -> float | None:
        return None

    def schedule(self, now: float) -> Step:
        step = Step()
        failed: dict[tuple[str, int], int] = {}  # (flavour, GPUs per pod) -> fewest pods that did not fit
        for job in self.queue.ordered():
            cap = _capacity(self.snapshot, job)
            key = (flavour_key(job.product), job.gpus_per_pod)
            if cap is None or job.pods >= failed.get(key, 1 << 30):
                continue
            if cap.pods_fit(Level.CLUSTER, 0, job.gpus_per_pod) < job.pods:
                failed[key] = job.pods
                continue
            allocate_pods(self.snapshot, job, self._choose(job, cap))
            del self.queue.jobs[job.id]
            step.started.append(job.id)
        return step

    def _choose(self, job: Job, cap: FlavourCapacity) -> list[tuple[int, int]]:
        g = job.gpus_per_pod
        nodes = [n for free in range(g, len(cap.by_free)) for n in cap.by_free[free]]
        return _fill(cap, _binpack_order(cap, nodes, self.rng), g, job.pods)


class VolcanoHyperNodeModel(GangBinpackModel):
    """Volcano with network-topology-aware scheduling (HyperNodes, Volcano >= 1.12), soft mode.

    The fabric levels are the HyperNode tiers (NVLink domain, leaf, spine, block; the cluster is the
    top). A gang goes to the lowest tier that has a HyperNode holding it whole; among the HyperNodes
    of that tier, the fullest one that fits (the binpack node scores summed over the HyperNode:
    fewest free GPUs first, ties random), and inside it the binpack node order. ``highestTierAllowed``
    is the cluster (soft), so a gang is never refused for topology, as in the gang-binpack model.
    """

    name = "volcano-hypernode"

    def _choose(self, job: Job, cap: FlavourCapacity) -> list[tuple[int, int]]:
        topo = self.snapshot.topology
        g = job.gpus_per_pod
        for level in FABRIC_LEVELS:
            if level is Level.NODE:
                fits = [n for n in range(topo.node_count) if cap.free[n] // g >= job.pods]
                if fits:
                    return [(_binpack_order(cap, fits, self.rng)[0], job.pods)]
                continue
            domains = [(cap.free_sum[level][d], self.rng.random(), d) for d in range(topo.domain_count(level))
                       if cap.pods_fit(level, d, g) >= job.pods]
            if domains:
                _, _, d = min(domains)
                members = [n for n in topo.members[level][d] if cap.free[n] >= g]
                return _fill(cap, _binpack_order(cap, members, self.rng), g, job.pods)
        raise AssertionError(f"job {job.id} fits the cluster but no domain was found")


BF_JOB_PART_COUNT_RESERVE = 5
"""Slurm's ``bf_job_part_count_reserve``: how many blocked jobs get a reservation per backfill pass."""
BF_MAX_JOB_TEST = 500
"""Slurm's ``bf_max_job_test`` default: jobs tested per backfill pass."""


@dataclass(frozen=True)
class _Reservation:
    """Specific GPUs on specific nodes, held for a blocked job over [start, end) (its time limit)."""

    job: str
    start: float
    end: float
    nodes: dict[int, int]
    """Node -> GPUs reserved there."""


def tree_select(topo: TopologyIndex, free: list[int], pods: int, gpus_per_pod: int) -> list[tuple[int, int]] | None:
    """Slurm topology/tree's node choice over a per-node free-GPU vector; None when it cannot hold the job.

    The lowest switch level with a domain that holds the job; there, the domain with the fewest free
    GPUs (best fit); inside it, leaf switches with the most room first (fewest leaves), and the
    fullest nodes first (cons_tres best fit), ties by node order as Slurm's node index does."""
    g = gpus_per_pod
    per_node = [f // g for f in free]
    if sum(per_node) < pods:
        return None
    for level in FABRIC_LEVELS:
        if level is Level.NODE:
            fits = [(free[n], n) for n in range(topo.node_count) if per_node[n] >= pods]
            if fits:
                return [(min(fits)[1], pods)]
            continue
        best: tuple[int, int] | None = None
        for d, domain in enumerate(topo.members[level]):
            if sum(per_node[n] for n in domain) >= pods:
                room = sum(free[n] for n in domain)
                if best is None or room < best[0]:
                    best = (room, d)
        if best is None:
            continue
        leaf_of = topo.domain_of[Level.LEAF]
        leaf_room: dict[int, int] = {}
        members = [n for n in topo.members[level][best[1]] if per_node[n]]
        for n in members:
            leaf_room[leaf_of[n]] = leaf_room.get(leaf_of[n], 0) + per_node[n]
        members.sort(key=lambda n: (-leaf_room[leaf_of[n]], free[n], n))
        chosen: list[tuple[int, int]] = []
        left = pods
        for n in members:
            take = min(per_node[n], left)
            chosen.append((n, take))
            left -= take
            if not left:
                return chosen
    return None


class SlurmTreeModel:
    """A model of Slurm (select/cons_tres, topology/tree) with conservative backfill driven by time limits.

    - **Time limits, not run times**: Slurm knows each job's limit (``Job.limit``: the user's estimate,
      1-5x the run time rounded up to a common limit), so it plans as if every running job ends at
      its start + limit; a job that ends earlier frees its nodes early and the next pass replans.
    - **Node-aware reservations**: each pass, the first ``reserve`` blocked jobs in priority order
      (``bf_job_part_count_reserve``) get a reservation of *specific nodes and GPUs* at the earliest
      time a will-run test finds room for them (the nodes' GPUs freed by the limits of the jobs
      running there, minus the GPUs other reservations hold over that window), chosen by the same
      topology/tree selection. ``reserve=1`` is EASY backfill; the default 5 is a partly
      conservative backfill, as Slurm sites run it.
    - **Backfill**: any job, in priority order (the head too), starts now if it fits on GPUs that no
      reservation overlapping [now, now + its limit) needs; at most ``max_test`` jobs are tested per
      pass (``bf_max_job_test``).
    - Node selection: ``tree_select`` (topology/tree best fit by switch).

    Left out: Slurm's fair-share/multifactor priority (every policy here orders by priority then
    arrival), the backfill interval (a pass runs at every event) and ``bf_window`` (unbounded).
    """

    name = "slurm-tree"

    def __init__(self, reserve: int = BF_JOB_PART_COUNT_RESERVE, max_test: int = BF_MAX_JOB_TEST) -> None:
        if reserve < 1 or max_test < 1:
            raise ValueError(f"SlurmTreeModel: reserve and max_test must be >= 1, got {reserve} and {max_test}")
        self.reserve = reserve
        self.max_test = max_test

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        self.queue = _FifoQueue()
        self.ends: dict[str, float] = {}
        """Running job -> its start + time limit (when Slurm expects it to end)."""
        self.reservations: list[_Reservation] = []
        """The last pass's reservations (for tests and the analysis)."""

    def submit(self, job: Job, now: float) -> None:
        self.queue.add(job)

    def finished(self, job: Job, now: float) -> None:
        self.ends.pop(job.id, None)

    def waiting(self) -> int:
        return len(self.queue.jobs)

    def partial_gpus(self) -> int:
        return 0

    def next_timer(self) -> float | None:
        return None

    def schedule(self, now: float) -> Step:
        step = Step()
        pass_ = _BackfillPass(self, now)
        for job in self.queue.ordered()[: self.max_test]:
            chosen = pass_.try_start(job)
            if chosen is not None:
                allocate_pods(self.snapshot, job, chosen)
                del self.queue.jobs[job.id]
                self.ends[job.id] = now + job.limit
                pass_.started(job, chosen)
                step.started.append(job.id)
            elif len(pass_.reservations) < self.reserve:
                pass_.reserve(job)
        self.reservations = pass_.reservations
        return step


class _BackfillPass:
    """One backfill pass's view: free GPUs now, when running jobs' limits free theirs, reservations."""

    def __init__(self, model: SlurmTreeModel, now: float) -> None:
        self.model = model
        self.now = now
        snapshot = model.snapshot
        self.topo = snapshot.topology
        self.key: str | None = None
        self.free: list[int] = []
        self.releases: list[tuple[float, int, int]] = []
        """(expected end, node, GPUs) of running jobs, soonest first."""
        self.reservations: list[_Reservation] = []
        self.failed: list[tuple[int, int, float]] = []
        """(GPUs per pod, pods, limit) that found no room this pass: a job asking as much or more fails too."""
        self._spare: dict[float, list[int]] = {}

    def _load(self, job: Job) -> FlavourCapacity | None:
        cap = _capacity(self.model.snapshot, job)
        key = flavour_key(job.product)
        if cap is not None and key != self.key:  # one flavour per pass in practice; reload if it changes
            self.key = key
            self.free = list(cap.free)
            releases: list[tuple[float, int, int]] = []
            number = self.topo.node_number
            for job_id, end in self.model.ends.items():
                per_node: dict[int, int] = {}
                for a in self.model.snapshot.allocations_of(job_id):
                    per_node[number[a.node]] = per_node.get(number[a.node], 0) + len(a.gpus)
                releases += [(end, n, gpus) for n, gpus in per_node.items()]
            releases.sort()
            self.releases = releases
            self._spare.clear()
        return cap

    def _avail(self, t: float) -> list[int]:
        """Free GPUs per node at ``t`` if every running job ends at its limit."""
        avail = list(self.free)
        for end, n, gpus in self.releases:
            if end > t:
                break
            avail[n] += gpus
        return avail

    def _held(self, start: float, end: float) -> list[int]:
        """GPUs per node that reservations overlapping [start, end) hold (summed: conservative)."""
        held = [0] * self.topo.node_count
        for r in self.reservations:
            if r.start < end and start < r.end:
                for n, gpus in r.nodes.items():
                    held[n] += gpus
        return held

    def spare_now(self, limit: float) -> list[int]:
        """GPUs per node a job may take now for ``limit`` seconds without touching a reservation."""
        end = self.now + limit
        cut = sum(1 for r in self.reservations if r.start < end)
        key = float(cut)
        spare = self._spare.get(key)
        if spare is None:
            spare = list(self.free)
            for r in self.reservations:
                if r.start >= end:
                    continue
                avail = self._avail(r.start)
                held = self._held(r.start, r.start + 1e-9)  # what is reserved at that instant
                for n in range(self.topo.node_count):
                    spare[n] = min(spare[n], avail[n] - held[n])
            self._spare[key] = spare
        return spare

    def try_start(self, job: Job) -> list[tuple[int, int]] | None:
        if self._load(job) is None:
            return None
        limit = job.limit
        if any(job.gpus_per_pod == g and job.pods >= p and limit >= lim for g, p, lim in self.failed):
            return None
        chosen = tree_select(self.topo, self.spare_now(limit), job.pods, job.gpus_per_pod)
        if chosen is None:
            self.failed.append((job.gpus_per_pod, job.pods, limit))
        return chosen

    def started(self, job: Job, chosen: list[tuple[int, int]]) -> None:
        end = self.now + job.limit
        for n, pods in chosen:
            self.free[n] -= pods * job.gpus_per_pod
        self.releases += [(end, n, pods * job.gpus_per_pod) for n, pods in chosen]
        self.releases.sort()
        self._spare.clear()

    def reserve(self, job: Job) -> None:
        """The will-run test: the earliest expected end after which the job fits, on those nodes."""
        if self._load(job) is None:
            return
        times = sorted({end for end, _, _ in self.releases if end > self.now} | {r.end for r in self.reservations})
        for t in times:
            avail = self._avail(t)
            held = self._held(t, t + job.limit)
            free = [max(0, a - h) for a, h in zip(avail, held, strict=True)]
            chosen = tree_select(self.topo, free, job.pods, job.gpus_per_pod)
            if chosen is not None:
                nodes = {n: pods * job.gpus_per_pod for n, pods in chosen}
                self.reservations.append(_Reservation(job.id, t, t + job.limit, nodes))
                self._spare.clear()
                return
