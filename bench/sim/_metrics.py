"""What a run measures, integrated over simulated time.

The headline figures are over windows that are the same for every policy (the audit found that
"while this policy's queue is non-empty" compares policies over different times):

- **alloc (arrivals)**: GPUs of running gangs over all GPUs, time-averaged from the first to the last
  arrival (the same window for every policy on one workload).
- **alloc (to drain end)**: the same from the first arrival to the end of the drain (the last
  completion). Over one common window to the *latest* policy's end this would be the same number for
  every policy (they all run the same work), so the drain is compared by **makespan** (first
  arrival to last completion) and this figure is that makespan's utilisation.
- **Waits by size**: queueing delay (first start - arrival) of the largest decile of jobs (jobs at or
  above the 90th percentile of GPUs): p99 and maximum; **starved**: jobs that waited more than
  ``STARVED_AFTER_S``.
- **Offered load**: what the run's jobs actually asked for (``offered_load``), printed per run.

Kept for the backfill sweep and the raw JSON (not the headline):

- **Allocation while jobs wait**: the time average of GPUs held by *running* gangs over the cluster's
  GPUs, counted only while at least one job waits (an idle cluster with an empty queue is not a
  scheduler's failure). GPUs held by incomplete gangs are reported apart (``held_while_waiting``
  includes them) because they are allocated but do no work.
  ``steady_alloc`` is the same average restricted to the arrival window (first to last arrival): a
  finite workload ends with a drain in which the last big gangs wait for the cluster to empty,
  whatever the policy, and that tail says more about the workload's length than about placement.
- **Partial-gang GPU-hours**: the integral of GPUs held by gangs still waiting for siblings
  (kube-scheduler's deadlock waste; zero by construction for all-or-nothing policies).
- **Queueing delay** (first start - arrival) and **job completion time** (finish - arrival): mean, p95.
- **Narrowest domain**: for each gang start, the level the policy's placement spans against the
  narrowest level at which some domain could hold the whole gang *at that moment* (the gang's own
  GPUs given back), judged by counting free GPUs (``bench.sim._oracle.narrowest_level``), not by
  any policy's planner. ``ideal`` compares with the narrowest level on an empty cluster.
- **Largest placeable gang per level** (``kubegang.placement.largest_placeable``), sampled over time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubegang.levels import Level
from kubegang.placement import GangRequest, Snapshot, largest_placeable
from kubegang.topology import FABRIC_LEVELS, flavour_key, level_span

from ._cluster import Cluster
from ._oracle import narrowest_level
from ._workload import Job, offered_load

STARVED_AFTER_S = 24 * 3600.0
"""A job that waited longer than this to start counts as starved."""
LARGE_DECILE = 90.0
"""Jobs at or above this percentile of size (GPUs) are the "largest decile"."""

if TYPE_CHECKING:
    from ._engine import Policy


def gang_request(job: Job) -> GangRequest:
    """The core's request for a job (one shape for every policy and for the oracle)."""
    return GangRequest(job.id, pods=job.pods, gpus_per_pod=job.gpus_per_pod, gpu_product=job.product)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class RunMetrics:
    """The numbers of one run (see the module docstring)."""

    jobs: int
    completed: int
    makespan_h: float
    alloc_while_waiting: float
    """Fraction 0..1: running gangs' GPUs over the cluster's, averaged while jobs wait."""
    held_while_waiting: float
    """Same, counting GPUs of incomplete gangs too."""
    steady_alloc: float
    """``alloc_while_waiting`` within the arrival window only."""
    waiting_h: float
    """Simulated hours during which at least one job waited."""
    partial_gpu_hours: float
    useful_gpu_hours: float
    queue_delay_mean_h: float
    queue_delay_p95_h: float
    jct_mean_h: float
    jct_p95_h: float
    gangs: int
    """Gang starts considered for the narrowest-domain share (multi-pod or single-pod)."""
    narrowest_share: float
    """Share of starts placed at the narrowest level feasible at that moment."""
    ideal_share: float
    """Share of starts placed at the narrowest level that could hold them on an empty cluster."""
    evictions: int
    restarts: int
    evicted_gpu_hours: float = 0.0
    """GPU-hours of work lost to evictions (what evicted gangs had run before they were requeued)."""
    alloc_arrivals: float = 0.0
    """Fraction 0..1: running gangs' GPUs over the cluster's, first to last arrival (common window)."""
    alloc_to_drain: float = 0.0
    """Same, first arrival to the last completion (the makespan's utilisation)."""
    queue_delay_p99_h: float = math.nan
    queue_delay_max_h: float = math.nan
    large_gpus: int = 0
    """Smallest job size (GPUs) of the largest decile."""
    large_jobs: int = 0
    large_wait_p99_h: float = math.nan
    large_wait_max_h: float = math.nan
    starved: int = 0
    """Jobs that waited more than ``STARVED_AFTER_S``."""
    offered_load: float = math.nan
    """The run's actual offered load (``bench.sim._workload.offered_load``)."""
    largest: dict[str, float] = field(default_factory=dict)
    """Level -> time-averaged largest placeable gang (GPUs, whole-node pods)."""
    largest_series: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    """(hours, level -> largest placeable gang in GPUs) samples."""


class MetricsRecorder:
    """Accumulates a run's metrics; the engine calls it on every event."""

    def __init__(self, cluster: Cluster, snapshot: Snapshot, jobs: Mapping[str, Job]) -> None:
        self.cluster = cluster
        self.snapshot = snapshot
        self.jobs = jobs
        self.t = 0.0
        self.last_arrival = max((j.arrival for j in jobs.values()), default=0.0)
        self.first_arrival = min((j.arrival for j in jobs.values()), default=0.0)
        self.window_busy = 0.0
        self.steady_wait = 0.0
        self.steady_busy = 0.0
        self.busy = 0
        self.wait_time = 0.0
        self.busy_wait = 0.0
        self.held_wait = 0.0
        self.partial = 0.0
        self.useful = 0.0
        self.first_start: dict[str, float] = {}
        self.finish_at: dict[str, float] = {}
        self.narrow = 0
        self.ideal = 0
        self.gangs = 0
        self.evictions = 0
        self.restarts = 0
        self.lost = 0.0
        self.run_start: dict[str, float] = {}
        self.running: set[str] = set()
        self._ideal_level: dict[tuple[int, int, str | None], Level | None] = {}
        self.series: list[tuple[float, dict[str, int]]] = []

    def advance(self, t: float, policy: Policy) -> None:
        dt = t - self.t
        if dt <= 0:
            return
        partial = policy.partial_gpus()
        self.partial += partial * dt
        self.useful += self.busy * dt
        self.window_busy += self.busy * max(0.0, min(t, self.last_arrival) - max(self.t, self.first_arrival))
        if policy.waiting() > 0:
            self.wait_time += dt
            self.busy_wait += self.busy * dt
            self.held_wait += (self.busy + partial) * dt
            inside = max(0.0, min(t, self.last_arrival) - self.t)
            self.steady_wait += inside
            self.steady_busy += self.busy * inside
        self.t = t

    def start(self, job_id: str, now: float, policy: Policy) -> None:
        job = self.jobs[job_id]
        if job_id in self.first_start:
            self.restarts += 1
        else:
            self.first_start[job_id] = now
        self.running.add(job_id)
        self.run_start[job_id] = now
        self.busy += job.gpus
        self._judge_span(job)

    def finish(self, job_id: str, now: float) -> None:
        self.finish_at[job_id] = now
        self.running.discard(job_id)
        self.busy -= self.jobs[job_id].gpus

    def evict(self, job_id: str) -> None:
        if job_id in self.running:
            self.running.discard(job_id)
            self.busy -= self.jobs[job_id].gpus
            self.lost += self.jobs[job_id].gpus * max(0.0, self.t - self.run_start.get(job_id, self.t))
        self.evictions += 1

    def sample(self, now: float) -> None:
        largest = largest_placeable(self.snapshot)
        self.series.append((now / 3600.0, {lvl.label: v for lvl, v in largest.items()}))

    def _judge_span(self, job: Job) -> None:
        allocations = self.snapshot.allocations_of(job.id)
        topo = self.snapshot.topology
        nodes = sorted({topo.node_number[a.node] for a in allocations})
        if not nodes:
            return
        actual, _ = level_span(topo, nodes)
        cap = self.snapshot.capacity.get(flavour_key(job.product))
        if cap is None:
            return
        free = list(cap.free)
        for a in allocations:  # give the gang's own GPUs back: what was free just before it started
            free[topo.node_number[a.node]] += len(a.gpus)
        now = narrowest_level(topo, free, job.pods, job.gpus_per_pod)
        self.gangs += 1
        if now is not None and actual <= now:
            self.narrow += 1
        ideal = self._ideal(job, cap.total)
        if ideal is not None and actual <= ideal:
            self.ideal += 1

    def _ideal(self, job: Job, total: list[int]) -> Level | None:
        key = (job.pods, job.gpus_per_pod, job.product)
        if key not in self._ideal_level:
            self._ideal_level[key] = narrowest_level(self.snapshot.topology, total, job.pods, job.gpus_per_pod)
        return self._ideal_level[key]

    def result(self, end: float, jobs: int) -> RunMetrics:
        delays = [self.first_start[j] - self.jobs[j].arrival for j in self.first_start]
        jcts = [self.finish_at[j] - self.jobs[j].arrival for j in self.finish_at]
        gpus = self.cluster.gpus
        levels = [lvl.label for lvl in FABRIC_LEVELS]
        largest = {lvl: sum(s[1][lvl] for s in self.series) / len(self.series) if self.series else 0.0
                   for lvl in levels}
        window = self.last_arrival - self.first_arrival
        drain = end - self.first_arrival
        sizes = [j.gpus for j in self.jobs.values()]
        large_gpus = int(percentile([float(g) for g in sizes], LARGE_DECILE)) if sizes else 0
        large = [self.first_start[j] - self.jobs[j].arrival for j in self.first_start
                 if self.jobs[j].gpus >= large_gpus]
        return RunMetrics(
            jobs=jobs,
            completed=len(self.finish_at),
            makespan_h=drain / 3600.0,
            alloc_while_waiting=self.busy_wait / (self.wait_time * gpus) if self.wait_time else 0.0,
            held_while_waiting=self.held_wait / (self.wait_time * gpus) if self.wait_time else 0.0,
            steady_alloc=self.steady_busy / (self.steady_wait * gpus) if self.steady_wait else 0.0,
            waiting_h=self.wait_time / 3600.0,
            partial_gpu_hours=self.partial / 3600.0,
            useful_gpu_hours=self.useful / 3600.0,
            queue_delay_mean_h=sum(delays) / len(delays) / 3600.0 if delays else math.nan,
            queue_delay_p95_h=percentile(delays, 95) / 3600.0,
            jct_mean_h=sum(jcts) / len(jcts) / 3600.0 if jcts else math.nan,
            jct_p95_h=percentile(jcts, 95) / 3600.0,
            gangs=self.gangs,
            narrowest_share=self.narrow / self.gangs if self.gangs else math.nan,
            ideal_share=self.ideal / self.gangs if self.gangs else math.nan,
            evictions=self.evictions,
            restarts=self.restarts,
            evicted_gpu_hours=self.lost / 3600.0,
            alloc_arrivals=self.window_busy / (window * gpus) if window > 0 else 0.0,
            alloc_to_drain=self.useful / (drain * gpus) if drain > 0 else 0.0,
            queue_delay_p99_h=percentile(delays, 99) / 3600.0,
            queue_delay_max_h=max(delays) / 3600.0 if delays else math.nan,
            large_gpus=large_gpus,
            large_jobs=len(large),
            large_wait_p99_h=percentile(large, 99) / 3600.0,
            large_wait_max_h=max(large) / 3600.0 if large else math.nan,
            starved=sum(d > STARVED_AFTER_S for d in delays),
            offered_load=offered_load(list(self.jobs.values()), gpus),
            largest=largest,
            largest_series=self.series,
        )
