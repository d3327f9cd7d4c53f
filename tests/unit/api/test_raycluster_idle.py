"""A RayCluster whose GPU worker group wants no pod now (``replicas: 0`` to autoscale from zero,
``numOfHosts: 0``, a suspended group) asks for GPUs all the same: the gang names that group, the field
that makes it want none and what to change, rather than saying no group asks for GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import desired_worker_pods, ray_cluster_gang
from kubegang.api._raycluster import why_no_worker_pods

WHERE = "spec.workerGroupSpecs[0]"


def _cluster(group: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray",
                                         "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    return {"metadata": {"name": "rc", "namespace": "team-a", "labels": {"kubegang.io/queue": "team-a"}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "x"}]}}},
                     "workerGroupSpecs": [{"groupName": "gpu", "template": template, **group}]}}


@pytest.mark.parametrize(("group", "says"), [
    ({}, "replicas: 0, minReplicas: 0; set replicas or minReplicas to at least 1"),  # CRD defaults
    ({"replicas": 0, "minReplicas": 0, "maxReplicas": 8}, "replicas: 0, minReplicas: 0"),
    ({"replicas": 2, "numOfHosts": 0}, "numOfHosts: 0; set it to at least 1"),
    ({"replicas": 2, "minReplicas": 2, "suspend": True}, "suspend: true; set it to false"),
    ({"replicas": 2, "minReplicas": 2, "maxReplicas": 0}, "maxReplicas: 0; set it to at least 1"),
])
def test_a_gpu_group_that_wants_no_pod_is_idle_and_says_which_field_makes_it_so(group: dict[str, Any],
                                                                               says: str) -> None:
    assert desired_worker_pods(group, WHERE) == 0
    reason = why_no_worker_pods(group, WHERE)
    assert reason is not None and reason.startswith(says)
    gang = ray_cluster_gang(_cluster(group))
    assert gang.gpu_groups == ()
    [idle] = gang.idle_gpu_groups
    assert (idle.name, idle.where, idle.idle) == ("gpu", WHERE, reason)
    assert gang.idle_message() == (f"{WHERE} ('gpu'): asks for 8 nvidia.com/gpu per pod but 0 pods are desired "
                                   f"({reason})")


@pytest.mark.parametrize("group", [{"replicas": 1}, {"minReplicas": 2}, {"replicas": 3, "numOfHosts": 2}])
def test_a_group_that_wants_pods_is_not_idle(group: dict[str, Any]) -> None:
    assert why_no_worker_pods(group, WHERE) is None
    gang = ray_cluster_gang(_cluster(group))
    assert gang.idle_gpu_groups == () and [g.name for g in gang.gpu_groups] == ["gpu"]
