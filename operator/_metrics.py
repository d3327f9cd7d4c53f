"""Prometheus metrics of the operator (prefix ``kubegang_``, base units, no job names as labels)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)
"""The operator's own registry, served on ``--metrics-port`` (no process-global side effects in tests)."""

ADMISSION_STEP_SECONDS = Histogram(
    "kubegang_admission_duration_seconds",
    "Time spent in each step of the admission cycle.",
    ["step"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


class PerQueue:
    """A gauge with one series per GPUQueue, whose series go with their queue.

    A deleted queue's last value would otherwise stay until the operator restarts, and an alert on it
    (``KubegangQueueStarving`` on pending jobs) would fire for ever."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self._names: set[str] = set()

    def export(self, counts: Mapping[str, int]) -> None:
        """Set one series per queue of ``counts``; remove the series of queues no longer in it."""
        for name in self._names - counts.keys():
            self.gauge.remove(name)
        for name, count in counts.items():
            self.gauge.labels(name).set(count)
        self._names = set(counts)


QUEUE_PENDING_JOBS = PerQueue(Gauge(
    "kubegang_queue_pending_jobs", "Jobs waiting for admission per leaf queue.", ["queue"], registry=REGISTRY
))
QUEUE_ADMITTED_JOBS = PerQueue(Gauge(
    "kubegang_queue_admitted_jobs", "Jobs holding quota per leaf queue.", ["queue"], registry=REGISTRY
))
JOBS_ADMITTED = Counter("kubegang_jobs_admitted_total", "Gangs admitted.", ["queue"], registry=REGISTRY)
JOBS_PREEMPTED = Counter("kubegang_jobs_preempted_total", "Gangs evicted whole.", ["queue"], registry=REGISTRY)
GANG_REPAIRS = Counter(
    "kubegang_gang_repairs_total",
    "Gangs whose slots pods kubegang did not place took: re-placed near the gang (moved) or requeued whole.",
    ["outcome"],
    registry=REGISTRY,
)
GANG_RESTARTS = Counter(
    "kubegang_gang_restarts_total",
    "Whole-gang restarts after a pod failure or timeout.",
    ["reason"],
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    "kubegang_queue_wait_seconds",
    "Time from a job's creation to its admission.",
    ["queue"],
    registry=REGISTRY,
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)
IS_LEADER = Gauge("kubegang_operator_is_leader", "1 while this replica holds the leader Lease.", registry=REGISTRY)
STATUS_WRITES = Counter(
    "kubegang_operator_gpujob_status_writes_total",
    "GPUJob status writes sent, by what they carry (kubegang.operator._status_writer.StatusChange) and "
    "the phase they write (empty when none).",
    ["change", "phase"],
    registry=REGISTRY,
)
FENCED_WRITES = Counter(
    "kubegang_operator_fenced_writes_total",
    "Writes this replica refused to send because it was past its leader renew deadline.",
    registry=REGISTRY,
)
