"""kubegang.api.ray_cluster_gang: a labelled RayCluster counted as one gang, as KubeRay will create it."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import (
    RAY_QUEUE_LABEL,
    RAY_TOPOLOGY_PREFERRED_ANNOTATION,
    RAY_TOPOLOGY_REQUIRED_ANNOTATION,
    RayGangError,
    RayNodeType,
    desired_worker_pods,
    ray_cluster_gang,
)


def _template(gpus: int = 0, cpu: str = "1") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "2Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray", "resources": resources}]}}


def _cluster(workers: list[dict[str, Any]], *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "team-a",
                         "labels": {RAY_QUEUE_LABEL: "team-a"} if labels is None else labels,
                         "annotations": annotations or {}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": _template(cpu="2")},
                     "workerGroupSpecs": workers}}


def test_a_cpu_head_and_four_eight_gpu_workers_are_one_gang_of_five_pods_and_32_gpus() -> None:
    gang = ray_cluster_gang(_cluster([{"groupName": "gpu", "replicas": 4, "minReplicas": 4, "maxReplicas": 4,
                                       "template": _template(gpus=8)}]))
    assert (gang.namespace, gang.name, gang.queue) == ("team-a", "rc", "team-a")
    assert gang.pods == 5 and gang.gpus == 32
    head, workers = gang.groups
    assert (head.node_type, head.pods, head.requests.gpus, head.requests.cpu_milli) == (RayNodeType.HEAD, 1, 0, 2000)
    assert (workers.node_type, workers.pods, workers.requests.gpus) == (RayNodeType.WORKER, 4, 8)
    assert gang.gpu_groups == (workers,)
    # The labels KubeRay v1.5 puts on the pods (seen on the real operator's pods in the e2e test).
    assert workers.pod_labels("rc") == {"ray.io/cluster": "rc", "ray.io/group": "gpu", "ray.io/node-type": "worker"}
    assert head.pod_labels("rc")["ray.io/group"] == "headgroup"


@pytest.mark.parametrize(("group", "pods"), [
    ({}, 0),                                                              # CRD defaults: replicas 0
    ({"replicas": 3}, 3),
    ({"replicas": 1, "minReplicas": 2, "maxReplicas": 5}, 2),             # raised to min
    ({"replicas": 9, "minReplicas": 2, "maxReplicas": 5}, 5),             # cut to max
    ({"replicas": 3, "minReplicas": 6, "maxReplicas": 4}, 4),             # min above max: max
    ({"replicas": 2, "numOfHosts": 4}, 8),                                # multi-host replicas
    ({"replicas": 4, "minReplicas": 4, "suspend": True}, 0),              # a suspended group has none
])
def test_worker_pods_follow_kuberays_desired_replicas(group: dict[str, Any], pods: int) -> None:
    assert desired_worker_pods(group, "spec.workerGroupSpecs[0]") == pods


def test_topology_comes_from_annotations() -> None:
    gang = ray_cluster_gang(_cluster([], annotations={RAY_TOPOLOGY_REQUIRED_ANNOTATION: "leaf",
                                                      RAY_TOPOLOGY_PREFERRED_ANNOTATION: "nvlink"}))
    assert (gang.topology.required, gang.topology.preferred) == ("leaf", "nvlink")
    assert ray_cluster_gang(_cluster([])).topology.required is None


@pytest.mark.parametrize(("cluster", "message"), [
    (_cluster([], labels={}), r"metadata.labels\[kubegang.io/queue\]: required"),
    (_cluster([], annotations={RAY_TOPOLOGY_REQUIRED_ANNOTATION: "rack"}),
     r"metadata.annotations\[kubegang.io/topology-required\]"),
    (_cluster([], annotations={RAY_TOPOLOGY_REQUIRED_ANNOTATION: "nvlink", RAY_TOPOLOGY_PREFERRED_ANNOTATION: "leaf"}),
     r"metadata.annotations\[.*\]: .*wider than required"),
    (_cluster([{"groupName": "gpu", "replicas": -1, "template": _template()}]),
     r"spec.workerGroupSpecs\[0\].replicas: must be an integer from 0"),
    (_cluster([{"groupName": "gpu", "replicas": "4", "template": _template()}]),
     r"spec.workerGroupSpecs\[0\].replicas: must be an integer"),
    (_cluster([{"replicas": 1, "template": _template()}]), r"spec.workerGroupSpecs\[0\].groupName: required"),
    (_cluster([{"groupName": "a", "template": _template()}, {"groupName": "a", "template": _template()}]),
     r"spec.workerGroupSpecs\[1\].groupName: 'a' is used twice"),
    (_cluster([{"groupName": "a", "template": {"spec": {}}}]),
     r"spec.workerGroupSpecs\[0\].template.spec.containers: required"),
    (_cluster([{"groupName": "a", "template": _template(gpus="lots")}]),  # type: ignore[arg-type]
     r"spec.workerGroupSpecs\[0\].template.spec.containers\[0\].resources.limits.nvidia.com/gpu"),
    ({"metadata": {"labels": {RAY_QUEUE_LABEL: "q"}}, "spec": {}}, r"spec.headGroupSpec: required"),
])
def test_what_cannot_be_counted_is_refused_naming_the_field(cluster: dict[str, Any], message: str) -> None:
    with pytest.raises(RayGangError, match=message):
        ray_cluster_gang(cluster)
