"""Issue 17: Kubernetes 1.36's own Workload/PodGroup (scheduling.k8s.io/v1alpha2) as kubegang gangs, on
the real control plane (hack/devcluster serves the API with the GenericWorkload gate).

A real Deployment (kube-controller-manager's ReplicaSet controller) makes pods whose template names a
PodGroup in ``spec.schedulingGroup``; the PodGroup's gang policy gives the size, its Workload's label the
queue. The group is held whole until kubegang admits it, then placed whole in one leaf; deleting it gives
everything back (and kube-controller-manager's PodGroup protection lets the PodGroup go).
"""

from __future__ import annotations

import json
from typing import Any

from .test_ray_gangs import _held_whole, _job, _leaves, _phase, _pods, _queue, _why

Cluster = Any
SCHEDULING = "scheduling.k8s.io/v1alpha2"


def test_a_native_podgroup_from_a_deployment_waits_whole_starts_whole_in_one_leaf_and_frees_everything(
        cluster: Cluster, kubegang: Any, namespace: str) -> None:
    served = cluster.kubectl("api-resources", f"--api-group={SCHEDULING.split('/')[0]}", "-o", "name").stdout
    assert "podgroups.scheduling.k8s.io" in served, (
        "the API server does not serve scheduling.k8s.io/v1alpha2: a cluster started before hack/devcluster "
        "enabled GenericWorkload; run hack/cluster down, then up")
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 24)
    workload = {"apiVersion": SCHEDULING, "kind": "Workload",
                "metadata": {"name": "trainer", "namespace": namespace, "labels": {"kubegang.io/queue": queue}},
                "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}
    podgroup = {"apiVersion": SCHEDULING, "kind": "PodGroup",
                "metadata": {"name": "workers", "namespace": namespace,
                             "annotations": {"kubegang.io/topology-required": "leaf"}},
                "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "trainer",
                                                              "podGroupTemplateName": "workers"}},
                         "schedulingPolicy": {"gang": {"minCount": 4}}}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "workers", "namespace": namespace},
                  "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "workers"}}, "template": {
                      "metadata": {"labels": {"app": "workers"}},
                      "spec": {"schedulingGroup": {"podGroupName": "workers"}, "terminationGracePeriodSeconds": 0,
                               "containers": [{"name": "main", "image": "trainer:1",
                                               "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    selector, job_name = "app=workers", "schedulinggroup-workers"
    try:
        cluster.apply([workload, podgroup, deployment])
        cluster.wait_for("the Deployment's 4 pods", lambda: len(_pods(cluster, namespace, selector)) == 4, timeout=60)
        assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in _pods(cluster, namespace, selector)} \
            == {"workers"}  # the API server kept the field: the gate is on
        cluster.wait_for("the group's GPUJob to wait for quota", lambda: _phase(
            cluster, namespace, job_name) == "Unschedulable", timeout=60)
        job = _job(cluster, namespace, job_name) or {}
        assert (job["spec"]["replicas"], job["spec"]["podSource"], job["spec"]["topology"]) == (
            4, {"kind": "SchedulingGroup", "name": "workers"}, {"required": "leaf"})
        owner = job["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == (SCHEDULING, "PodGroup", "workers")
        _held_whole(cluster, namespace, selector)  # 24 GPUs of quota for 32: none of the four binds
        message = json.dumps(cluster.get_json("events", "-n", namespace, "--field-selector",
                                              "involvedObject.kind=Pod")["items"])
        assert "waits for kubegang to admit its gang (SchedulingGroup workers)" in message
        assert "32" in _why(cluster, namespace, "schedulinggroup/workers")  # the PodGroup by its own name

        _queue(cluster, queue, namespace, 32)
        cluster.wait_for("all four bound and Running", lambda: len(pods := _pods(cluster, namespace, selector)) == 4
                         and all(p["status"].get("phase") == "Running" for p in pods), timeout=60)
        pods = _pods(cluster, namespace, selector)
        assert len(_leaves(cluster, pods)) == 1
        assert sorted(int(p["metadata"]["labels"]["kubegang.io/replica-index"]) for p in pods) == [0, 1, 2, 3]
        for p in pods:
            assert p["spec"]["nodeName"] == p["metadata"]["annotations"]["kubegang.io/node"]
        cluster.wait_for("the queue charged for all 32 GPUs", lambda: cluster.get_json(
            "gpuqueue", queue)["status"].get("usedGPUs") == 32, timeout=30)

        cluster.kubectl("delete", "deployment", "workers", "-n", namespace)
        cluster.kubectl("delete", "podgroup", "workers", "-n", namespace, "--wait=false")
        cluster.wait_for("the pods, the PodGroup and the GPUJob gone", lambda: (
            _pods(cluster, namespace, selector) == [] and _job(cluster, namespace, job_name) is None
            and cluster.kubectl("get", "podgroup", "workers", "-n", namespace, check=False).returncode != 0),
            timeout=60)
        cluster.wait_for("the queue's GPUs given back", lambda: cluster.get_json(
            "gpuqueue", queue)["status"].get("usedGPUs") == 0, timeout=30)
    finally:
        cluster.kubectl("delete", "deployment", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "podgroups,workloads", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)
