"""What a run measures, integrated over simulated time.

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
- **Narrowest domain**: for each gang start, the narrowest level at which some domain could hold the
  whole gang *at that moment* (asked of the placement engine with the gang's own allocation rolled
  back) against the level the policy's placement actually spans. ``ideal`` compares with the
  narrowest level that could hold the gang on an empty cluster.
- **Largest placeable gang per level** (``kubegang.placement.largest_placeable``), sampled over time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, largest_placeable, plan
from kubegang.topology import FABRIC_LEVELS, level_span

from ._cluster import Cluster
from ._workload import Job

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
        with self.snapshot.what_if():
            self.snapshot.release(job.id)
            now = plan(gang_request(job), self.snapshot)
        self.gangs += 1
        if isinstance(now, Placement) and actual <= now.level:
            self.narrow += 1
        ideal = self._ideal(job)
        if ideal is not None and actual <= ideal:
            self.ideal += 1

    def _ideal(self, job: Job) -> Level | None:
        key = (job.pods, job.gpus_per_pod, job.product)
        if key not in self._ideal_level:
            result = plan(gang_request(job), self.cluster.snapshot())
            self._ideal_level[key] = result.level if isinstance(result, Placement) else None
        return self._ideal_level[key]

    def result(self, end: float, jobs: int) -> RunMetrics:
        delays = [self.first_start[j] - self.jobs[j].arrival for j in self.first_start]
        jcts = [self.finish_at[j] - self.jobs[j].arrival for j in self.finish_at]
        gpus = self.cluster.gpus
        levels = [lvl.label for lvl in FABRIC_LEVELS]
        largest = {lvl: sum(s[1][lvl] for s in self.series) / len(self.series) if self.series else 0.0
                   for lvl in levels}
        return RunMetrics(
            jobs=jobs,
            completed=len(self.finish_at),
            makespan_h=end / 3600.0,
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
            largest=largest,
            largest_series=self.series,
        )
