"""The operator's admission metrics (docs/metrics.md, "Exposed") move as documented, end to end.

The session's kubegang stack (real kube-apiserver, kube-scheduler and kwok; the real operator and
extender processes) admits GPUJobs of a fresh GPUQueue, and the test reads the leader's /metrics
before and after, as a scraper does: plain HTTP when the stack runs with metrics auth off (the
default of ``hack/cluster kubegang up``), else HTTPS trusting the stack's CA with the scraper's
ServiceAccount token (what tests/e2e/test_prometheus.py checks Prometheus does).

Counters and histograms are process-wide, so the assertions are on differences across one step; the
series labelled with the test's own queue are exact, the ones shared with the rest of the cluster
(``step``, ``change``/``phase``, ``outcome``) only have to rise. Status writes and the queue gauges
are updated asynchronously (the queue gauges of held jobs by the GPUQueue status pass, every 5 s at
most), so every read polls with a bound.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .operator.conftest import H100, Ops

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
Kubegang = Any  # the `kubegang` fixture's object (tests/e2e/conftest.py)
GPUS = 8
STEPS = ("plan", "reserve", "record", "create")
"""The admission steps of a job that fits at once (``preempt`` is only asked for a preemption or a
backfill reservation)."""


@pytest.fixture
def ops(cluster: Cluster, kubegang: Kubegang, namespace: str) -> Iterator[Ops]:
    """tests/e2e/operator/conftest.py's ``ops``, for a test beside test_prometheus.py."""
    o = Ops(cluster, kubegang, namespace)
    try:
        yield o
    finally:
        o.cleanup()


Key = tuple[str, frozenset[tuple[str, str]]]


class Samples:
    """One scrape: sample name and labels to value."""

    def __init__(self, text: str) -> None:
        self.values: dict[Key, float] = {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}

    def __repr__(self) -> str:  # in an assertion's "where" line
        return f"<scrape: {len(self.values)} samples>"

    def get(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        """A labelled child that was never touched has no series yet: 0."""
        return self.get(name, **labels) or 0.0


class Leader:
    """The leading operator replica's /metrics."""

    def __init__(self, ops: Ops) -> None:
        self.ops = ops
        identity = ops.leader()
        assert identity is not None, "no operator holds the Lease"
        self.identity = identity
        port = ops.kubegang.ports["operator_metrics"][int(identity.rsplit("-", 1)[-1])]
        metrics = ops.kubegang.metrics
        self.verify: ssl.SSLContext | bool = False
        if metrics["auth"] == "on":
            self.url = f"https://127.0.0.1:{port}/metrics"
            token = Path(metrics["token_file"]).read_text().strip()
            self.headers = {"Authorization": f"Bearer {token}"}
            self.verify = ssl.create_default_context(cafile=metrics["ca"])
        else:
            self.url, self.headers = f"http://127.0.0.1:{port}/metrics", {}
        assert self.scrape().get("kubegang_operator_is_leader") == 1, f"{identity} holds the Lease but does not say so"

    def scrape(self) -> Samples:
        response = httpx.get(self.url, headers=self.headers, verify=self.verify, timeout=10)
        assert response.status_code == 200, f"{self.url}: {response.status_code} {response.text[:300]}"
        return Samples(response.text)

    def wait(self, what: str, predicate: Callable[[Samples], bool], timeout: float = 30) -> Samples:
        """Scrape until ``predicate`` holds; on timeout fail naming ``what`` and the kubegang series seen."""
        last: list[Samples] = []

        def holds() -> bool:
            last[:] = [self.scrape()]
            return predicate(last[0])

        def detail() -> str:
            leader = self.ops.leader()
            moved = "" if leader == self.identity else f" (the Lease moved to {leader}: the counts are per replica)"
            series = sorted(f"{name}{dict(sorted(labels))} {value}" for (name, labels), value in last[0].values.items()
                            if name.startswith("kubegang_") and not name.endswith(("_bucket", "_created")))
            return f"leader {self.identity}{moved}; its kubegang series:\n  " + "\n  ".join(series)

        self.ops.cluster.wait_for(what, holds, timeout=timeout, interval=0.5, detail=detail)
        return last[0]

    def assert_still_leading(self) -> None:
        assert self.ops.leader() == self.identity, (
            f"the Lease moved from {self.identity} to {self.ops.leader()} during the test: per-replica deltas are void")


def _rose(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def test_an_admission_and_a_job_over_quota_move_the_admission_metrics_of_their_queue(ops: Ops) -> None:
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("metrics", [(H100, GPUS)])  # room for one 8-GPU job, not two
    leader = Leader(ops)
    # Documented: the queue's series exist (at 0) before anything is admitted, so increase() sees the first.
    before = leader.wait(f"the series of queue {q} at 0", lambda s: (
        s.get("kubegang_jobs_admitted_total", queue=q) == 0
        and s.get("kubegang_queue_pending_jobs", queue=q) == 0
        and s.get("kubegang_queue_admitted_jobs", queue=q) == 0))

    start = time.monotonic()
    ops.job("first", q, 1, GPUS)
    ops.wait_phase("first", "Running")
    elapsed = time.monotonic() - start
    after = leader.wait("the admission's status writes counted, and the queue's job held", lambda s: (
        _rose(before, s, "kubegang_operator_gpujob_status_writes_total", change="decision", phase="Running") >= 1
        and s.get("kubegang_queue_admitted_jobs", queue=q) == 1))
    leader.assert_still_leading()

    assert _rose(before, after, "kubegang_jobs_admitted_total", queue=q) == 1
    assert _rose(before, after, "kubegang_queue_wait_seconds_count", queue=q) == 1
    assert _rose(before, after, "kubegang_queue_wait_seconds_bucket", queue=q, le="+Inf") == 1
    # creationTimestamp has whole seconds: the wait measured from it can exceed what the test saw by 1 s.
    waited = _rose(before, after, "kubegang_queue_wait_seconds_sum", queue=q)
    assert 0 <= waited <= elapsed + 1.5, f"queue wait {waited:.3f}s, the job was Running {elapsed:.1f}s after its apply"
    for step in STEPS:
        assert _rose(before, after, "kubegang_admission_duration_seconds_count", step=step) >= 1, step
    for phase in ("Admitted", "Running"):
        rose = _rose(before, after, "kubegang_operator_gpujob_status_writes_total", change="decision", phase=phase)
        assert rose >= 1, f"decision/{phase} writes rose by {rose}"
    assert after.get("kubegang_queue_pending_jobs", queue=q) == 0

    # A second job over the queue's quota waits: pending counts it, nothing more is admitted.
    ops.job("second", q, 1, GPUS)
    ops.wait_phase("second", "Queued")
    waiting = leader.wait(f"queue {q} to count one pending job", lambda s: (
        s.get("kubegang_queue_pending_jobs", queue=q) == 1
        and _rose(after, s, "kubegang_operator_gpujob_status_writes_total", change="report", phase="Queued") >= 1))
    assert waiting.get("kubegang_queue_admitted_jobs", queue=q) == 1
    assert _rose(before, waiting, "kubegang_jobs_admitted_total", queue=q) == 1
    assert _rose(before, waiting, "kubegang_queue_wait_seconds_count", queue=q) == 1

    ops.cluster.kubectl("delete", "gpujob", "second", "-n", ops.namespace)
    leader.wait(f"queue {q}'s pending count back to 0", lambda s: s.get("kubegang_queue_pending_jobs", queue=q) == 0)
    ops.cluster.kubectl("delete", "gpujob", "first", "-n", ops.namespace)
    gone = leader.wait(f"queue {q}'s admitted count back to 0",
                       lambda s: s.get("kubegang_queue_admitted_jobs", queue=q) == 0)
    assert _rose(before, gone, "kubegang_jobs_admitted_total", queue=q) == 1  # a deletion admits nothing
    # Documented: a deleted queue's gauges go with it (else an alert on pending jobs would fire for ever).
    ops.cluster.kubectl("delete", "gpuqueue", q)
    leader.wait(f"the gauges of the deleted queue {q} to go", lambda s: (
        s.get("kubegang_queue_pending_jobs", queue=q) is None
        and s.get("kubegang_queue_admitted_jobs", queue=q) is None))
    leader.assert_still_leading()


def test_a_slot_taken_by_a_pod_placed_by_hand_counts_one_moved_repair(ops: Ops) -> None:
    """tests/e2e/operator/test_serving_intrusion.py's deterministic intrusion, with a 2-pod gang: the
    gang's pods are held unbound by a scheduling gate while a pod with a manual ``nodeName`` takes one
    planned node, and the extender's Repair moves that slot near the gang."""
    ops.cluster.use_shape("superpod-h100")
    q = ops.queue("repair", [(H100, 2 * GPUS)])
    leader = Leader(ops)
    before = leader.scrape()
    job = ops.job_manifest("gang", q, 2, GPUS)
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kubegang-test/hold"}]
    ops.cluster.apply(job)
    ops.cluster.wait_for("the gang's pods to exist", lambda: len(ops.pods("gang")) == 2, timeout=60)
    taken = next(p["metadata"]["annotations"]["kubegang.io/node"] for p in ops.pods("gang")
                 if p["metadata"]["labels"]["kubegang.io/replica-index"] == "1")
    ops.cluster.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "by-hand", "namespace": ops.namespace, "labels": {"kubegang.io/routing": "disabled"}},
        "spec": {"nodeName": taken, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": GPUS}}}]},
    })
    ops.cluster.wait_for("the gang repaired (an Event)", lambda: any(
        e["reason"] in ("Repaired", "GangDisplaced") for e in ops.events("gang")), timeout=30, interval=0.5)
    after = leader.wait("the repair counted", lambda s: sum(
        _rose(before, s, "kubegang_gang_repairs_total", outcome=o) for o in ("moved", "requeued")) >= 1)
    leader.assert_still_leading()
    assert _rose(before, after, "kubegang_gang_repairs_total", outcome="moved") == 1
    assert _rose(before, after, "kubegang_gang_repairs_total", outcome="requeued") == 0
