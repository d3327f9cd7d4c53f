"""Small configurations of the benchmarks: correctness of the simulator and its policies, not speed."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

import pytest

from bench.sim import (
    POLICIES,
    GangWorkload,
    Job,
    KubegangPolicy,
    Policy,
    Step,
    Wrapped,
    benchmark_spec,
    for_cluster,
    generate,
    load_cluster,
    simulate,
)
from bench.sim import _openb as openb
from bench.sim._baselines import DefaultSchedulerModel
from bench.sim._cluster import Cluster
from kubegang.placement import MILLI


class Checked(Wrapped):
    """Delegates to a policy and checks the snapshot's books after every pass."""

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner)
        self.passes = 0

    def schedule(self, now: float) -> Step:
        step = self.inner.schedule(now)
        self.passes += 1
        held: dict[tuple[str, int], int] = defaultdict(int)
        for allocation in self.snapshot.allocations():
            for gpu in allocation.gpus:
                held[(allocation.node, gpu)] += allocation.gpu_milli
        for (node, gpu), milli in held.items():
            assert milli <= MILLI, f"GPU {gpu} of {node} over-allocated: {milli}/1000"
            assert self.snapshot.free_milli(node, gpu) == MILLI - milli
        for job_id in step.started:
            assert self.snapshot.allocations_of(job_id), f"{job_id} started without allocations"
        return step


def _gang(job_id: str, arrival: float, pods: int, gpus: int, duration: float = 3600.0, priority: int = 0) -> Job:
    return Job(job_id, arrival, pods, gpus, duration, "team-0", priority, "NVIDIA-H100-80GB-HBM3")


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("shape", ["superpod-h100", "gb200-nvl72"])
def test_every_policy_finishes_without_over_allocating(policy: str, shape: str) -> None:
    cluster = load_cluster(shape)
    jobs = generate(GangWorkload(jobs=120, seed=3), cluster.gpus, cluster.topology.max_gpus_per_node,
                    cluster.products[0])
    checked = Checked(POLICIES[policy]())
    result = simulate(checked, cluster, jobs, seed=3)
    assert result.metrics.completed == len(jobs)
    assert set(result.finished) == {j.id for j in jobs}
    assert checked.passes > 0
    assert 0.0 < result.metrics.alloc_while_waiting <= 1.0
    for job in jobs:
        assert result.finished[job.id] >= result.started[job.id] + job.duration - 1e-6
        assert result.started[job.id] >= job.arrival


@pytest.mark.parametrize("policy", ["kubegang", "gang-binpack", "slurm-tree"])
def test_gang_policies_never_hold_partial_gangs(policy: str) -> None:
    cluster = load_cluster("superpod-h100")
    jobs = generate(GangWorkload(jobs=150, seed=5), cluster.gpus, 8, cluster.products[0])
    metrics = simulate(POLICIES[policy](), cluster, jobs).metrics
    assert metrics.partial_gpu_hours == 0.0
    assert metrics.held_while_waiting == metrics.alloc_while_waiting


def _blocked_gang() -> tuple[Cluster, list[Job]]:
    # 4 nodes; "x" holds 2 of them for 10 h; "a" needs 3 whole nodes. Pod by pod, "a" takes the 2 free
    # nodes and holds them until "x" ends; a gang scheduler leaves them free.
    cluster = load_cluster("superpod-h100", limit=4)
    return cluster, [_gang("x", 0.0, 2, 8, 10 * 3600.0), _gang("a", 1.0, 3, 8)]


def test_default_scheduler_model_wastes_gpus_on_partial_gangs() -> None:
    cluster, jobs = _blocked_gang()
    spread = simulate(Checked(DefaultSchedulerModel(timeout=None)), cluster, jobs).metrics
    assert spread.completed == 2
    assert spread.partial_gpu_hours == pytest.approx(16 * (10 * 3600.0 - 1.0) / 3600.0)
    assert spread.held_while_waiting > spread.alloc_while_waiting
    gang = simulate(Checked(KubegangPolicy()), cluster, jobs).metrics
    assert gang.completed == 2
    assert gang.partial_gpu_hours == 0.0


def test_default_scheduler_rendezvous_timeout_restarts_partial_gangs() -> None:
    cluster, jobs = _blocked_gang()
    checked = Checked(DefaultSchedulerModel(timeout=600.0))
    metrics = simulate(checked, cluster, jobs).metrics
    assert metrics.completed == 2
    assert metrics.partial_gpu_hours > 0.0
    # Every 600 s the partial gang fails, its pods are deleted and placed again: one pass per timeout.
    assert checked.passes >= 10 * 3600 / 600


def test_kubegang_preempts_whole_low_priority_gangs_for_a_high_priority_one() -> None:
    cluster = load_cluster("superpod-h100", limit=4)
    jobs = [_gang("low-1", 0.0, 2, 8, 10 * 3600.0), _gang("low-2", 0.0, 2, 8, 10 * 3600.0),
            _gang("high", 60.0, 3, 8, 3600.0, priority=1)]
    checked = Checked(KubegangPolicy())
    result = simulate(checked, cluster, jobs)
    assert result.metrics.evictions >= 1
    assert result.started["high"] == 60.0
    assert result.metrics.completed == 3
    assert result.metrics.partial_gpu_hours == 0.0
    # The work the evicted gangs had done (16 GPUs each for 60 s) is reported as lost.
    assert result.metrics.evicted_gpu_hours == result.metrics.evictions * 16 * 60.0 / 3600.0


def test_kubegang_places_every_gang_in_the_narrowest_feasible_domain() -> None:
    cluster = load_cluster("gb200-nvl72")
    jobs = generate(GangWorkload(jobs=150, seed=7), cluster.gpus, 4, cluster.products[0])
    metrics = simulate(KubegangPolicy(), cluster, jobs).metrics
    assert metrics.gangs == len(jobs)
    assert metrics.narrowest_share == 1.0


@pytest.mark.parametrize("policy", sorted(openb.OPENB_POLICIES))
def test_openb_replay_on_a_subset_allocates_monotonically(policy: str) -> None:
    cluster = load_cluster("openb", limit=50)
    tasks = openb.load_tasks("default")[:400]
    curves = openb.replay(cluster, "default", policy, [1, 2], tasks)
    for curve in curves:
        assert len(curve.allocation) == openb.ARRIVED_POINTS
        assert all(b >= a - 1e-9 for a, b in zip(curve.allocation, curve.allocation[1:], strict=False))
        assert 0.0 < curve.allocation[-1] <= 100.0
        assert curve.failed > 0  # 130% of the subset's GPUs were asked for
        # Drops so far, per point: none at first, never fewer later, all of them at the end.
        assert len(curve.dropped) == openb.ARRIVED_POINTS and curve.dropped[0] == 0
        assert all(b >= a for a, b in zip(curve.dropped, curve.dropped[1:], strict=False))
        assert curve.dropped[-1] == curve.failed
        # Until the first drop the allocation is what arrived: the point's share of the capacity.
        first = next(p for p, n in enumerate(curve.dropped) if n)
        assert all(curve.allocation[p] >= p - 1e-9 for p in range(first))


@pytest.mark.parametrize("policy", sorted(openb.OPENB_POLICIES))
def test_openb_placers_honour_cpu_memory_fraction_and_model(policy: str) -> None:
    cluster = load_cluster("openb", limit=50)
    snapshot = cluster.snapshot()
    place, refresh = openb.OPENB_POLICIES[policy](snapshot, random.Random(1))
    models = {g.product for n in cluster.topology.nodes for g in n.gpus}
    model = sorted(models)[0]
    tasks = [openb.Task(f"t{i}", 2000, 4096, 1, 300, (model,)) for i in range(30)]
    tasks += [openb.Task(f"c{i}", 4000, 8192, 0, 0) for i in range(30)]
    tasks += [openb.Task(f"w{i}", 8000, 16384, 2, MILLI) for i in range(30)]
    nodes = cluster.topology.nodes
    number = cluster.topology.node_number
    for task in tasks:
        allocation = place(task)
        if allocation is None:
            continue
        snapshot.allocate(allocation)
        refresh(number[allocation.node])
        node = nodes[number[allocation.node]]
        if task.gpu_spec:
            assert all(g.product in task.gpu_spec for g in node.gpus if g.index in allocation.gpus)
        assert allocation.gpu_milli == (task.gpu_milli if task.shared else MILLI)
        assert len(allocation.gpus) == task.num_gpu
    for n, node in enumerate(nodes):
        assert snapshot.cpu_used[n] <= node.cpu_milli
        assert snapshot.memory_used[n] <= node.memory_mib


def test_inflation_reaches_the_target_with_clones_of_trace_tasks() -> None:
    tasks = openb.load_tasks("default")
    inflated = openb.inflate(tasks, 6212, random.Random(1))
    assert inflated[: len(tasks)] == tasks
    requested = sum(t.gpu_request for t in inflated)
    assert 1.3 * 6212 <= requested < 1.3 * 6212 + 8
    originals = {t.name for t in tasks}
    assert all(t.name.rsplit("-clone-", 1)[0] in originals for t in inflated[len(tasks):])


def test_a_gang_evicted_for_a_preemptor_is_not_evicted_again_and_again() -> None:
    """The shared cycle once evicted one job of this run 2,664 times: the GPUs it freed went back to it
    (backfill past the preemptor), and it was evicted again. The preemptor now claims what it freed.
    A large low-priority gang is the natural victim of several high-priority arrivals, so a job may be
    evicted a few times, but each time at a different instant, for a high-priority job started then."""
    cluster = load_cluster("superpod-h100")
    spec = dataclasses.replace(benchmark_spec("kalos", 1500, 1), priority_share=0.2)
    jobs = for_cluster(spec, cluster)
    by_id = {job.id: job for job in jobs}
    evicted: defaultdict[str, list[float]] = defaultdict(list)

    class Counting(KubegangPolicy):
        def schedule(self, now: float) -> Step:
            step = super().schedule(now)
            for uid in step.evicted:
                assert now not in evicted[uid], f"{uid} evicted twice at {now}"  # fail fast, not loop
                evicted[uid].append(now)
                assert any(by_id[s].priority > by_id[uid].priority for s in step.started), f"{uid} evicted for nobody"
                # A bound against the old livelock (2,664 evictions), not a quota: the cycle's deeper
                # walk past blocked heads admits more high-priority gangs, each of which may pick it.
                assert len(evicted[uid]) <= 16, f"{uid} evicted {len(evicted[uid])} times"
            return step

    result = simulate(Counting(), cluster, jobs, seed=1)
    assert result.metrics.completed == len(jobs)
    assert evicted


def test_a_gang_admitted_and_evicted_in_one_pass_does_not_run_in_the_simulator() -> None:
    """A pass runs several cycles; a gang admitted by one and evicted for a later one's preemptor was
    reported both started and evicted, and the simulator (evictions first, then starts) ran it while
    kubegang had requeued it: on this seed a gang started again while it "ran", its GPUs counted twice
    (allocation above 100% on others). The pass now reports what the cycles' effects add up to."""
    cluster = load_cluster("superpod-h100")
    spec = dataclasses.replace(benchmark_spec("kalos", 300, 3), priority_share=0.2)
    jobs = for_cluster(spec, cluster)
    running: set[str] = set()

    class Checking(KubegangPolicy):
        def schedule(self, now: float) -> Step:
            step = super().schedule(now)
            running.difference_update(step.evicted)
            again = [uid for uid in step.started if uid in running]
            assert not again, f"started while the simulator runs it: {again} at {now}"
            running.update(step.started)
            assert running.isdisjoint(self.waiting_jobs), f"running and waiting: {running & set(self.waiting_jobs)}"
            return step

        def finished(self, job: Job, now: float) -> None:
            assert job.id in running, f"{job.id} finished without running"
            running.discard(job.id)
            super().finished(job, now)

    result = simulate(Checking(), cluster, jobs, seed=3)
    assert result.metrics.completed == len(jobs)
    assert result.metrics.evictions > 0
    assert result.metrics.alloc_arrivals <= 1.0
