"""A small cluster as API objects (what ``kubectl gang`` reads), built with the shapes' own node
manifests: 4 nodes x 8 H200 in one leaf, a tree org -> team-a / team-b of 16 GPUs each."""

from __future__ import annotations

from typing import Any

from kubegang.kubectl import ClusterObjects
from kubegang.shapes import find_shape, load_shape, node_manifest

H200 = "NVIDIA-H200"
CREATED = "2026-12-01T10:00:00Z"


def nodes(count: int = 4) -> list[dict[str, Any]]:
    group = next(g for _, g in load_shape(find_shape("demo-h200")).nodes())
    return [node_manifest(f"n{i}", group) for i in range(count)]


def queue(name: str, nominal: int, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"resources": [{"flavor": H200, "nominal": nominal}], **spec}
    if parent:
        body["parent"] = parent
    return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name}, "spec": body}


def job(name: str, namespace: str, q: str, replicas: int, gpus: int = 8, *, phase: str = "Queued",
        reason: str = "WaitingInQueue", message: str = "", on: list[str] | None = None, created: str = CREATED,
        **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    cond = {"Queued": "Queued", "Running": "Running", "Unschedulable": "Unschedulable"}[phase]
    status["conditions"] = [{"type": cond, "status": "True", "reason": reason, "message": message,
                             "lastTransitionTime": created}]
    if on:
        status |= {"admittedAt": created, "startedAt": created,
                   "placement": {"level": "leaf", "domain": "h200-leaves",
                                 "pods": [{"index": i, "node": n, "gpus": list(range(gpus))}
                                          for i, n in enumerate(on)]}}
    return {
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1,
                     "creationTimestamp": created},
        "spec": {"replicas": replicas, "queue": q, "gpuProduct": H200,
                 "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1",
                                                       "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}},
                 **spec},
        "status": status,
    }


def pods_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The bound, Running pods of a job placed ``on`` nodes (as the operator creates them)."""
    out = []
    meta = body["metadata"]
    gpus = body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    for p in body["status"]["placement"]["pods"]:
        out.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta['name']}-{p['index']}", "namespace": meta["namespace"],
                         "uid": f"pod-{meta['name']}-{p['index']}",
                         "labels": {"kubegang.io/job-uid": meta["uid"], "kubegang.io/job-name": meta["name"],
                                    "kubegang.io/replica-index": str(p["index"])},
                         "annotations": {"kubegang.io/node": p["node"],
                                         "kubegang.io/gpus": ",".join(map(str, p["gpus"]))}},
            "spec": {"nodeName": p["node"], "schedulerName": "kubegang",
                     "containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                   "requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"},
        })
    return out


def cluster(*jobs: dict[str, Any], queues: list[dict[str, Any]] | None = None, node_count: int = 4) -> ClusterObjects:
    qs = queues if queues is not None else [queue("org", 0), queue("team-a", 16, "org"), queue("team-b", 16, "org")]
    return ClusterObjects(jobs=list(jobs), queues=qs, nodes=nodes(node_count),
                          pods=[p for j in jobs if j["status"].get("placement") for p in pods_of(j)])
