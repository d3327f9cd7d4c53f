"""Models of other schedulers' policies (models of their placement rules, not the products).

All three work on the same snapshot and workload as ``kubegang`` and allocate through the same
checked primitives. What each models, and what it leaves out, is stated on its class.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kubegang.levels import Level
from kubegang.placement import MILLI, Allocation, Snapshot
from kubegang.topology import FABRIC_LEVELS, FlavourCapacity, flavour_key

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


class GangBinpackModel:
    """A model of Volcano-like gang scheduling: all-or-nothing, topology-blind first-fit bin packing.

    Jobs by priority then arrival; each pass walks all of them and starts every job that fits now
    (a job that does not fit is skipped, not waited for: no reservation). A job's pods go to nodes
    in *binpack* order, fullest first (fewest free GPUs, then node name), as many per node as fit;
    the fabric is ignored.
    """

    name = "gang-binpack"

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
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
        for job in self.queue.ordered():
            cap = _capacity(self.snapshot, job)
            if cap is None or cap.pods_fit(Level.CLUSTER, 0, job.gpus_per_pod) < job.pods:
                continue
            g, left = job.gpus_per_pod, job.pods
            chosen: list[tuple[int, int]] = []
            for free in range(g, len(cap.by_free)):
                for n in sorted(cap.by_free[free], key=lambda n: self.snapshot.topology.nodes[n].name):
                    take = min(free // g, left)
                    chosen.append((n, take))
                    left -= take
                    if not left:
                        break
                if not left:
                    break
            allocate_pods(self.snapshot, job, chosen)
            del self.queue.jobs[job.id]
            step.started.append(job.id)
        return step


class SlurmTreeModel:
    """A model of Slurm's topology/tree selection with EASY backfill.

    Priority order; the first job that does not fit gets a reservation at the earliest time enough
    GPUs will be free (from the running jobs' end times: users' time limits are taken as exact),
    and later jobs may start only if they end before it or fit in the GPUs it leaves spare. Node
    selection as in topology/tree: the lowest switch level with a domain that holds the job, the
    domain there with the fewest free GPUs (best fit), and inside it, leaf groups with the most
    room first, fullest nodes first.
    """

    name = "slurm-tree"

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        self.queue = _FifoQueue()
        self.ends: dict[str, float] = {}

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
        shadow: float | None = None
        spare = 0
        for job in self.queue.ordered():
            cap = _capacity(self.snapshot, job)
            if cap is None:
                continue
            fits = cap.pods_fit(Level.CLUSTER, 0, job.gpus_per_pod) >= job.pods
            if shadow is not None and fits:
                ends_in_time = now + job.duration <= shadow
                if not ends_in_time and job.gpus > spare:
                    continue
                if not ends_in_time:
                    spare -= job.gpus
            if not fits:
                if shadow is None:
                    shadow, spare = self._reservation(job, cap, now)
                continue
            allocate_pods(self.snapshot, job, self._select(job, cap))
            del self.queue.jobs[job.id]
            self.ends[job.id] = now + job.duration
            step.started.append(job.id)
        return step

    def _reservation(self, job: Job, cap: FlavourCapacity, now: float) -> tuple[float, int]:
        free = cap.free_sum[Level.CLUSTER][0]
        for end, job_id in sorted((e, j) for j, e in self.ends.items()):
            free += self.snapshot.gpus_held(job_id)
            if free >= job.gpus:
                return end, free - job.gpus
        return float("inf"), 0

    def _select(self, job: Job, cap: FlavourCapacity) -> list[tuple[int, int]]:
        topo = self.snapshot.topology
        g = job.gpus_per_pod
        for level in FABRIC_LEVELS:
            if level is Level.NODE:
                fits = [(cap.free[n], n) for n in range(topo.node_count) if cap.free[n] // g >= job.pods]
                if fits:
                    return [(min(fits)[1], job.pods)]
                continue
            domains = [(cap.free_sum[level][d], d) for d in range(topo.domain_count(level))
                       if cap.pods_fit(level, d, g) >= job.pods]
            if not domains:
                continue
            _, d = min(domains)
            leaf_of = topo.domain_of[Level.LEAF]
            members = [n for n in topo.members[level][d] if cap.free[n] >= g]
            members.sort(key=lambda n: (-cap.free_sum[Level.LEAF][leaf_of[n]], cap.free[n], n))
            chosen: list[tuple[int, int]] = []
            left = job.pods
            for n in members:
                take = min(cap.free[n] // g, left)
                chosen.append((n, take))
                left -= take
                if not left:
                    return chosen
        raise AssertionError(f"job {job.id} fits the cluster but no domain was found")
