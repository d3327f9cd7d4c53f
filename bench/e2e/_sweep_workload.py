"""The short-job sweep's objects: training gangs that hold most of the cluster, 1-GPU trials, two queues.

Issue 13's seed: a 500-trial hyperparameter sweep of 5-minute trials, through one queue, while
multi-node training gangs hold part of the cluster. Here the training gangs take ``training_nodes``
whole nodes (pods of a whole node each, as pre-training runs are placed) and run until the half ends:
the benchmark gives them every node but a few, the e2e smoke two. The trials are 1-GPU jobs whose
fake pods Succeed after ``runtime_s`` (``kubegang.io/fake-runtime``, hack/kwok/kubegang-stages.yaml).

For kubegang a trial is a 1-replica GPUJob in the leaf queue ``sweep-trials`` and a training run a
GPUJob in ``sweep-training``; each leaf's nominal quota is exactly what its jobs hold, so nothing
borrows and no preemption can take part. For the baseline the same pods are plain pods for
kube-scheduler's default profile. The objects reuse bench/e2e/_workload.py's manifests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.e2e._workload import API_VERSION, BenchJob, gpujob_manifest, plain_pod_manifests

TRIALS_QUEUE = "sweep-trials"
TRAINING_QUEUE = "sweep-training"
ROOT_QUEUE = "sweep-root"
QUEUES = (TRIALS_QUEUE, TRAINING_QUEUE, ROOT_QUEUE)
FAKE_RUNTIME = "kubegang.io/fake-runtime"
SEED_TRIAL_RUNTIME_S = 300.0
"""The seed's trials run 5 minutes; the benchmark's shorter run time is stated as a factor of this."""


@dataclass(frozen=True)
class SweepPlan:
    """What one half runs: the training gangs, then ``trials`` trials with ``concurrency`` in flight."""

    training: tuple[BenchJob, ...]
    trials: int
    concurrency: int
    runtime_s: float
    gpus_per_node: int

    @property
    def training_gpus(self) -> int:
        return sum(j.gpus for j in self.training)

    @property
    def scale_factor(self) -> float:
        """How many times shorter than the seed's 5-minute trials these are."""
        return SEED_TRIAL_RUNTIME_S / self.runtime_s


def plan(nodes: Mapping[str, int], training_nodes: int, gang_nodes: int, trials: int, runtime_s: float,
         concurrency: int | None = None) -> SweepPlan:
    """Training gangs of ``gang_nodes`` whole nodes (the last one smaller) on ``training_nodes`` nodes;
    the trials' concurrency defaults to the GPUs of the other nodes, as a sweep driver sized to the
    free capacity (Ray Tune, Katib's parallelTrialCount) would keep in flight."""
    sizes = set(nodes.values())
    if len(sizes) != 1:
        raise ValueError(f"nodes: the sweep needs one GPU count per node, the shape has {sorted(sizes)}")
    per_node = sizes.pop()
    if not 0 <= training_nodes < len(nodes):
        raise ValueError(f"training_nodes must be between 0 and {len(nodes) - 1} (the shape has {len(nodes)} "
                         f"nodes), got {training_nodes}")
    if gang_nodes < 1:
        raise ValueError(f"gang_nodes must be >= 1, got {gang_nodes}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if runtime_s <= 0:
        raise ValueError(f"runtime_s must be > 0 seconds, got {runtime_s}")
    free_gpus = (len(nodes) - training_nodes) * per_node
    in_flight = free_gpus if concurrency is None else concurrency
    if not 0 < in_flight <= free_gpus:
        raise ValueError(f"concurrency must be between 1 and the {free_gpus} free GPUs, got {in_flight}")
    training = []
    for i, start in enumerate(range(0, training_nodes, gang_nodes)):
        training.append(BenchJob(f"train-{i:02d}", TRAINING_QUEUE, min(gang_nodes, training_nodes - start), per_node))
    return SweepPlan(tuple(training), trials, in_flight, runtime_s, per_node)


def trial_names(n: int) -> list[str]:
    return [f"trial-{i:04d}" for i in range(n)]


def _trial(name: str) -> BenchJob:
    return BenchJob(name, TRIALS_QUEUE, 1, 1)


def _runtime(runtime_s: float) -> str:
    return f"{runtime_s:g}s"  # a Go duration, as kwok's stage reads it


def trial_gpujob(name: str, namespace: str, runtime_s: float) -> dict[str, Any]:
    doc = gpujob_manifest(_trial(name), namespace)
    doc["spec"]["template"]["metadata"]["annotations"] = {FAKE_RUNTIME: _runtime(runtime_s)}
    return doc


def trial_pod(name: str, namespace: str, runtime_s: float) -> dict[str, Any]:
    """The trial's pod as a plain pod (named ``<trial>-0``, as the GPUJob's pod is)."""
    (doc,) = plain_pod_manifests(_trial(name), namespace)
    doc["metadata"]["annotations"] = {FAKE_RUNTIME: _runtime(runtime_s)}
    return doc


def training_gpujobs(p: SweepPlan, namespace: str) -> list[dict[str, Any]]:
    return [gpujob_manifest(j, namespace) for j in p.training]


def training_pods(p: SweepPlan, namespace: str) -> list[dict[str, Any]]:
    return [pod for j in p.training for pod in plain_pod_manifests(j, namespace)]


def queues(p: SweepPlan, flavor: str, namespace: str) -> list[dict[str, Any]]:
    """A root and two leaves whose nominal quotas are exactly what the trials and the gangs hold."""
    def leaf(name: str, gpus: int) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": name},
                "spec": {"parent": ROOT_QUEUE, "namespaces": [namespace],
                         "resources": [{"flavor": flavor, "nominal": gpus}]}}

    return [{"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": ROOT_QUEUE},
             "spec": {"resources": [{"flavor": flavor, "nominal": 0}]}},
            leaf(TRIALS_QUEUE, p.concurrency), leaf(TRAINING_QUEUE, p.training_gpus)]


def describe(p: SweepPlan, capacity_gpus: int, nodes: int) -> dict[str, Any]:
    return {
        "trials": p.trials, "concurrency": p.concurrency, "trial_runtime_s": p.runtime_s,
        "seed_trial_runtime_s": SEED_TRIAL_RUNTIME_S, "runtime_scale_factor": round(p.scale_factor, 2),
        "training_gangs": len(p.training), "training_pods": sum(j.pods for j in p.training),
        "training_gpus": p.training_gpus, "gpus": capacity_gpus, "nodes": nodes,
        "free_gpus": capacity_gpus - p.training_gpus,
        "training_gang_nodes": sorted({j.pods for j in p.training}),
    }


def names_of(docs: Sequence[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in docs]
