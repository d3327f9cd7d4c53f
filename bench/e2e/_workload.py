"""The seeded burst: GPUJob gangs, the same pods as plain pods, and a quota tree that holds them all.

The end-to-end benchmark measures how fast the control loop turns a burst of submissions into
running pods, not how well it packs (bench/sim and bench/placement measure that). So the burst is
sized to *fit* the cluster: every job can run at once, no job waits for another to finish, and
"time until all Running" is the time the system needs, not a runtime we chose.

Issue 8 asks for 2,000 jobs of 1 to 64 pods on 1,024 nodes x 8 GPUs. That fits only if the mean job
is under ~4 GPUs, so the distribution is heavy on single pods (as the Acme and Philly traces are:
median job of 1 GPU) and gangs are mostly 1-GPU workers:

- pods per job (``POD_WEIGHTS``): 1 with 80%, then 2, 4, 8, 16, 32, 64 with falling weights
  (mean 2.4 pods);
- GPUs per pod, the same for every pod of a job: single-pod jobs 1/2/4/8 (``SINGLE_GPU_WEIGHTS``),
  gangs 1/2 (``GANG_GPU_WEIGHTS``); mean 3.36 GPUs per job, ~82% of bench-1024 for 2,000 jobs;
- a GPU budget: a draw that would take the burst over ``fill`` of the cluster's GPUs is drawn again
  (up to 20 times, then the job becomes a 1-pod 1-GPU job), so the burst always fits.

The contended variant (``python -m bench.e2e.run --contended``) draws the same distribution with
``fill`` above 1 (the burst asks for more GPUs than the cluster has) and gives every job a fake run
time, so jobs must wait for others to finish: that is where queueing and gang admission differ.

Sizes are powers of two, which lets even a spreading scheduler fit the whole burst when pods arrive
largest first (the free GPUs of every node stay a multiple of the current size); the plain-pod
baseline is applied in that order, see ``baseline_order``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubegang.kubectl._runtime import FAKE_RUNTIME_ANNOTATION

GPU = "nvidia.com/gpu"
API_VERSION = "kubegang.io/v1alpha1"
JOB_LABEL = "bench.kubegang.io/job"

POD_WEIGHTS: dict[int, float] = {1: 0.80, 2: 0.08, 4: 0.05, 8: 0.035, 16: 0.02, 32: 0.01, 64: 0.005}
"""Pods per job (the gang size) and their probabilities."""
SINGLE_GPU_WEIGHTS: dict[int, float] = {1: 0.70, 2: 0.15, 4: 0.10, 8: 0.05}
"""GPUs per pod of single-pod jobs."""
GANG_GPU_WEIGHTS: dict[int, float] = {1: 0.80, 2: 0.20}
"""GPUs per pod of multi-pod jobs (each worker the same)."""
REDRAWS = 20
MAX_FILL = 2.0
"""The most a burst may ask for, as a multiple of the cluster's GPUs (above 1: the contended variant)."""


@dataclass(frozen=True)
class BenchJob:
    """One job of the burst: ``pods`` identical pods of ``gpus_per_pod`` GPUs each."""

    name: str
    queue: str
    pods: int
    gpus_per_pod: int
    runtime_s: int | None = None
    """Seconds each pod runs before it succeeds (kwok's fake run time); None: runs until deleted."""

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


def mean_gpus_per_job() -> float:
    """The distribution's expected GPUs per job (before the budget's redraws): sizes a contended burst."""
    single = sum(g * w for g, w in SINGLE_GPU_WEIGHTS.items())
    gang = sum(g * w for g, w in GANG_GPU_WEIGHTS.items())
    return sum(w * p * (single if p == 1 else gang) for p, w in POD_WEIGHTS.items())


def _draw(rng: random.Random, weights: dict[int, float]) -> int:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def generate(n_jobs: int, seed: int, capacity_gpus: int, fill: float, leaves: Sequence[str],
             runtime_s: int | None = None) -> list[BenchJob]:
    """``n_jobs`` jobs from the documented distribution whose GPUs total at most ``fill`` x capacity,
    each running ``runtime_s`` seconds (None: until deleted).

    Raises ValueError when even one GPU per job would not fit the budget.
    """
    if not 0 < fill <= MAX_FILL:
        raise ValueError(f"fill must be in (0, {MAX_FILL}] (above 1 only for a contended burst), got {fill}")
    if runtime_s is not None and runtime_s < 1:
        raise ValueError(f"runtime_s must be a whole number of seconds >= 1 or None, got {runtime_s}")
    if not leaves:
        raise ValueError("leaves: at least one leaf queue is needed")
    budget = int(capacity_gpus * fill)
    if n_jobs > budget:
        raise ValueError(f"{n_jobs} jobs cannot fit a budget of {budget} GPUs ({fill:.0%} of {capacity_gpus})")
    rng = random.Random(seed)
    jobs: list[BenchJob] = []
    used = 0
    for i in range(n_jobs):
        # Keep one GPU for every job still to come, so the budget never runs dry early.
        room = budget - used - (n_jobs - i - 1)
        pods, per_pod = 1, 1
        for _ in range(REDRAWS):
            p = _draw(rng, POD_WEIGHTS)
            g = _draw(rng, SINGLE_GPU_WEIGHTS if p == 1 else GANG_GPU_WEIGHTS)
            if p * g <= room:
                pods, per_pod = p, g
                break
        jobs.append(BenchJob(f"job-{i:05d}", leaves[i % len(leaves)], pods, per_pod, runtime_s))
        used += pods * per_pod
    return jobs


def leaf_names(n: int) -> list[str]:
    return [f"bench-leaf-{i:02d}" for i in range(n)]


def leaf_share(capacity_gpus: int, leaves: Sequence[str]) -> int:
    """Each leaf queue's nominal GPUs: the cluster split evenly, rounded up (the same in every half)."""
    return -(-capacity_gpus // len(leaves))


def queue_tree(leaves: Sequence[str], capacity_gpus: int, flavor: str, namespace: str) -> list[dict[str, Any]]:
    """A root and ``leaves`` leaves sharing the whole cluster (Kueue-style cohort: leaves borrow freely)."""
    share = leaf_share(capacity_gpus, leaves)
    docs: list[dict[str, Any]] = [{
        "apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": "bench-root"},
        "spec": {"resources": [{"flavor": flavor, "nominal": 0}]},
    }]
    for leaf in leaves:
        docs.append({
            "apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": leaf},
            "spec": {"parent": "bench-root", "namespaces": [namespace],
                     "resources": [{"flavor": flavor, "nominal": share}]},
        })
    return docs


def container(gpus: int) -> dict[str, Any]:
    return {"name": "worker", "image": "registry.example.com/train:bench",
            "resources": {"limits": {GPU: str(gpus)}}}


def pod_metadata(job: BenchJob) -> dict[str, Any]:
    """Labels and annotations every pod of ``job`` carries, in every half: the job label the
    observers group by, and the fake run time when the job has one."""
    meta: dict[str, Any] = {"labels": {JOB_LABEL: job.name}}
    if job.runtime_s is not None:
        meta["annotations"] = {FAKE_RUNTIME_ANNOTATION: f"{job.runtime_s}s"}
    return meta


def gpujob_manifest(job: BenchJob, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "GPUJob",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": {"queue": job.queue, "replicas": job.pods,
                 "template": {"metadata": pod_metadata(job),
                              "spec": {"containers": [container(job.gpus_per_pod)]}}},
    }


def plain_pod_manifests(job: BenchJob, namespace: str) -> list[dict[str, Any]]:
    """The same pods as the GPUJob's gang, for kube-scheduler's default profile (no gang, no extender)."""
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job.name}-{i}", "namespace": namespace, **pod_metadata(job)},
        "spec": {"schedulerName": "default-scheduler", "restartPolicy": "Never",
                 "containers": [container(job.gpus_per_pod)]},
    } for i in range(job.pods)]


def baseline_order(jobs: Sequence[BenchJob], namespace: str) -> list[dict[str, Any]]:
    """Every plain pod, largest GPU request first: the order in which the spreading default scheduler
    cannot fragment a burst that fits (its best case, so the baseline is not handicapped)."""
    ordered = sorted(jobs, key=lambda j: -j.gpus_per_pod)
    return [pod for job in ordered for pod in plain_pod_manifests(job, namespace)]


def deal(docs: Sequence[dict[str, Any]], ways: int) -> list[list[dict[str, Any]]]:
    """Split round-robin, so parallel appliers each keep the overall order (and the same mix)."""
    chunks: list[list[dict[str, Any]]] = [[] for _ in range(max(1, min(ways, len(docs))))]
    for i, doc in enumerate(docs):
        chunks[i % len(chunks)].append(doc)
    return chunks


def describe(jobs: Sequence[BenchJob]) -> dict[str, Any]:
    """What the burst holds: counts by gang size and GPUs per pod, totals."""
    by_pods: dict[int, int] = {}
    by_gpus: dict[int, int] = {}
    for j in jobs:
        by_pods[j.pods] = by_pods.get(j.pods, 0) + 1
        by_gpus[j.gpus_per_pod] = by_gpus.get(j.gpus_per_pod, 0) + 1
    return {
        "jobs": len(jobs), "pods": sum(j.pods for j in jobs), "gpus": sum(j.gpus for j in jobs),
        "jobs_by_pods": {str(k): v for k, v in sorted(by_pods.items())},
        "jobs_by_gpus_per_pod": {str(k): v for k, v in sorted(by_gpus.items())},
        "largest_job_pods": max((j.pods for j in jobs), default=0),
    }
