"""The discrete-event engine: simulated time, an event heap, and what every policy must answer.

Events are job arrivals, job completions, policy timers (e.g. a rendezvous timeout) and metric
samples. After every batch of events at one instant the policy gets a scheduling pass and says which
gangs started (all their pods hold GPUs) and which it evicted. The engine owns the snapshot's
*releases* on completion, the clock and the metrics; policies own every allocation, and allocate
only through ``Snapshot.allocate`` / ``allocate_all``, whose invariant (a GPU is never handed out
beyond what is free) is therefore checked for every policy alike.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kubegang.placement import Snapshot

from ._cluster import Cluster
from ._metrics import MetricsRecorder, RunMetrics
from ._workload import Job


@dataclass
class Step:
    """What a scheduling pass did."""

    started: list[str] = field(default_factory=list)
    """Jobs whose every pod now holds its GPUs (their run time starts now)."""
    evicted: list[str] = field(default_factory=list)
    """Running jobs the policy evicted whole (released already, requeued by the policy)."""


class Policy(Protocol):
    """A scheduling policy under test; one instance per run."""

    name: str

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        """Start a run over an empty ``snapshot``; ``rng`` is the run's only randomness."""

    def submit(self, job: Job, now: float) -> None:
        """A job arrived."""

    def finished(self, job: Job, now: float) -> None:
        """A running job completed; the engine has already released its allocations."""

    def schedule(self, now: float) -> Step:
        """One scheduling pass at ``now``."""

    def waiting(self) -> int:
        """Jobs submitted and not started (partly placed ones included)."""

    def partial_gpus(self) -> int:
        """GPUs held by gangs that are not complete (waiting for siblings)."""

    def next_timer(self) -> float | None:
        """The next time the policy wants a pass without any arrival or completion, if any."""


class Wrapped:
    """A policy that delegates to ``inner``: the base of wrappers that observe a run (checks, figures),
    so each overrides only the calls it watches. ``snapshot`` is the run's, kept from ``reset``."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        self.inner.reset(cluster, snapshot, rng)

    def submit(self, job: Job, now: float) -> None:
        self.inner.submit(job, now)

    def finished(self, job: Job, now: float) -> None:
        self.inner.finished(job, now)

    def schedule(self, now: float) -> Step:
        return self.inner.schedule(now)

    def waiting(self) -> int:
        return self.inner.waiting()

    def partial_gpus(self) -> int:
        return self.inner.partial_gpus()

    def next_timer(self) -> float | None:
        return self.inner.next_timer()


_ARRIVAL, _COMPLETION, _TIMER, _SAMPLE = 0, 1, 2, 3


@dataclass
class RunResult:
    """One policy on one workload and shape."""

    policy: str
    cluster: str
    metrics: RunMetrics
    started: dict[str, float]
    """Job id -> last start time."""
    finished: dict[str, float]


def simulate(policy: Policy, cluster: Cluster, jobs: Sequence[Job], *, seed: int = 1,
             sample_every: float = 900.0, horizon: float | None = None) -> RunResult:
    """Replay ``jobs`` under ``policy`` until every job finished (or ``horizon`` seconds passed)."""
    snapshot = cluster.snapshot()
    policy.reset(cluster, snapshot, random.Random(seed))
    by_id = {job.id: job for job in jobs}
    recorder = MetricsRecorder(cluster, snapshot, by_id)
    heap: list[tuple[float, int, int, str, int]] = []
    seq = itertools.count()
    for job in jobs:
        heapq.heappush(heap, (job.arrival, next(seq), _ARRIVAL, job.id, 0))
    heapq.heappush(heap, (0.0, next(seq), _SAMPLE, "", 0))
    generation: dict[str, int] = {}
    running: dict[str, float] = {}
    started: dict[str, float] = {}
    finished: dict[str, float] = {}
    timers: set[float] = set()
    now = 0.0
    while heap and len(finished) < len(jobs):
        when = heap[0][0]
        if horizon is not None and when > horizon:
            recorder.advance(horizon, policy)
            now = horizon
            break
        recorder.advance(when, policy)
        now = when
        sample = False
        while heap and heap[0][0] == now:
            _, _, kind, job_id, gen = heapq.heappop(heap)
            if kind == _ARRIVAL:
                policy.submit(by_id[job_id], now)
            elif kind == _COMPLETION:
                if generation.get(job_id) != gen or job_id not in running:
                    continue  # evicted since: a stale completion
                del running[job_id]
                snapshot.release(job_id)
                finished[job_id] = now
                recorder.finish(job_id, now)
                policy.finished(by_id[job_id], now)
            elif kind == _TIMER:
                timers.discard(now)
            else:
                sample = True
        step = policy.schedule(now)
        for job_id in step.evicted:
            running.pop(job_id, None)
            generation[job_id] = generation.get(job_id, 0) + 1
            recorder.evict(job_id)
        for job_id in step.started:
            job = by_id[job_id]
            running[job_id] = now
            started[job_id] = now
            gen = generation.setdefault(job_id, 0)
            recorder.start(job_id, now, policy)
            heapq.heappush(heap, (now + job.duration, next(seq), _COMPLETION, job_id, gen))
        timer = policy.next_timer()
        if timer is not None and timer > now and timer not in timers:
            timers.add(timer)
            heapq.heappush(heap, (timer, next(seq), _TIMER, "", 0))
        if sample:
            recorder.sample(now)
            if len(finished) < len(jobs):
                heapq.heappush(heap, (now + sample_every, next(seq), _SAMPLE, "", 0))
    return RunResult(policy.name, cluster.name, recorder.result(now, len(jobs)), started, finished)
