"""Issue 17: gangs whose pods another controller makes, on the real control plane.

A RayCluster labelled ``kubegang.io/queue`` and run by the real KubeRay operator v1.5 (hack/addons.py),
and a pod group made by a real Deployment (kube-controller-manager's ReplicaSet controller), are held
whole until kubegang admits them, then placed whole in one leaf by the extender onto the slots of the
admission, matched by their labels. Nothing here creates the pods but their own controllers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import tool

Cluster = Any
H100 = "NVIDIA-H100-80GB-HBM3"
LEAF = "kubegang.io/leaf"
NODE = "kubegang.io/node"
"""The annotation that pins a pod to the node of its slot (docs/ray-and-pod-groups.md)."""
REPO = Path(__file__).resolve().parents[2]


def _queue(cluster: Cluster, name: str, namespace: str, gpus: int) -> None:
    cluster.apply({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
                   "spec": {"namespaces": [namespace], "resources": [{"flavor": H100, "nominal": gpus}]}})


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "gpujob", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    job = _job(cluster, namespace, name)
    return ((job or {}).get("status") or {}).get("phase")


def _leaves(cluster: Cluster, pods: list[dict[str, Any]]) -> set[str]:
    nodes = {n["metadata"]["name"]: n for n in cluster.get_json("nodes")["items"]}
    return {nodes[p["spec"]["nodeName"]]["metadata"]["labels"].get(LEAF, "") for p in pods}


def _why(cluster: Cluster, namespace: str, job: str) -> str:
    env = {**cluster.env, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([tool("kubectl"), "gang", "why", job, "-n", namespace], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ray_state(cluster: Cluster, namespace: str, job: str) -> str:
    """What a Ray cluster that does not start is stuck on: each pod's pin, node and PodScheduled message,
    the GPUJob's status, and what kube-scheduler and the extender logged about the unbound pods."""
    lines = [f"GPUJob {job}: {json.dumps((_job(cluster, namespace, job) or {}).get('status') or {})[:1500]}"]
    for pod in cluster.get_json("pods", "-n", namespace)["items"]:
        meta, name = pod["metadata"], pod["metadata"]["name"]
        scheduled: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") == "PodScheduled"), {})
        lines.append(f"pod {name}: node={pod['spec'].get('nodeName')} pin={meta.get('annotations', {}).get(NODE)} "
                     f"deleting={bool(meta.get('deletionTimestamp'))} phase={(pod.get('status') or {}).get('phase')} "
                     f"PodScheduled={scheduled.get('status')} {scheduled.get('reason')} "
                     f"since {scheduled.get('lastTransitionTime')}: {scheduled.get('message')}")
        if not pod["spec"].get("nodeName"):
            for process in ("kube-scheduler", "kubegang-extender"):
                lines += [f"  {process}: {line[:400]}" for line in cluster.log_lines(process, name, limit=8)]
    return "\n".join(lines)


def _held_whole(cluster: Cluster, namespace: str, selector: str, seconds: float = 6) -> None:
    """For ``seconds``, no pod of the selector is bound (checked every half second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not [p["metadata"]["name"] for p in _pods(cluster, namespace, selector) if p["spec"].get("nodeName")]
        time.sleep(0.5)


def _container(name: str, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    return {"name": name, "image": "rayproject/ray:2.46.0", "resources": resources}


def _ray_cluster(namespace: str, queue: str, workers: int, *, min_workers: int, max_workers: int,
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """RayCluster ``rc`` queued in ``queue``: a CPU head and one group of 8-GPU workers."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": namespace, "labels": {"kubegang.io/queue": queue},
                         **({"annotations": annotations} if annotations else {})},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                         "containers": [_container("ray-head", 0)]}}},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": min_workers,
                                           "maxReplicas": max_workers, "rayStartParams": {}, "template": {"spec": {
                                               "containers": [_container("ray-worker", 8)]}}}]}}


def _used(cluster: Cluster, queue: str) -> Any:
    """The queue's ``status.usedGPUs`` (written coalesced, a moment after the admissions it sums)."""
    return cluster.get_json("gpuqueue", queue)["status"].get("usedGPUs")


def test_a_ray_cluster_waits_whole_for_quota_then_starts_whole_in_one_leaf_and_frees_everything_on_delete(
        cluster: Cluster, kubegang: Any, kuberay: dict[str, Any], namespace: str) -> None:
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 24)
    rc = _ray_cluster(namespace, queue, 4, min_workers=4, max_workers=4,
                      annotations={"kubegang.io/topology-required": "leaf"})
    try:
        created = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(rc)).stdout)
        # The chart's policy suspended it on the way in: KubeRay makes no pod before kubegang admits it.
        assert created["spec"]["suspend"] is True
        cluster.wait_for("the GPUJob representing the RayCluster to wait for quota", lambda: _phase(
            cluster, namespace, "raycluster-rc") == "Unschedulable", timeout=60)
        job = _job(cluster, namespace, "raycluster-rc") or {}
        assert (job["spec"]["replicas"], job["spec"]["podSource"]) == (4, {"kind": "RayCluster", "name": "rc"})
        assert job["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
        assert "can never hold 32" in job["status"]["reason"] + json.dumps(job["status"]["conditions"])
        _held_whole(cluster, namespace, "ray.io/cluster=rc")
        assert _pods(cluster, namespace, "ray.io/cluster=rc") == []  # not even the head
        assert "32" in _why(cluster, namespace, "raycluster/rc")  # the RayCluster by its own name

        _queue(cluster, queue, namespace, 32)
        cluster.wait_for("the Ray cluster Running whole", lambda: _phase(
            cluster, namespace, "raycluster-rc") == "Running", timeout=120)
        pods = _pods(cluster, namespace, "ray.io/cluster=rc")
        workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        assert len(pods) == 5 and len(workers) == 4
        assert all(p["status"].get("phase") == "Running" for p in pods)
        # Each worker went to the slot it was pinned to, all four under one leaf switch.
        for p in workers:
            assert p["spec"]["nodeName"] == p["metadata"]["annotations"]["kubegang.io/node"]
        assert len(_leaves(cluster, workers)) == 1
        placement = (_job(cluster, namespace, "raycluster-rc") or {})["status"]["placement"]
        assert placement["level"] in ("node", "nvlink", "leaf") and len(placement["pods"]) == 4
        cluster.wait_for("the queue to count all 32 GPUs", lambda: _used(cluster, queue) == 32, timeout=30)

        cluster.kubectl("delete", "raycluster", "rc", "-n", namespace)
        cluster.wait_for("every pod gone and the GPUJob collected with the RayCluster", lambda: (
            _pods(cluster, namespace, "ray.io/cluster=rc") == [] and _job(cluster, namespace, "raycluster-rc") is None),
            timeout=90)
        cluster.wait_for("the queue's GPUs given back", lambda: _used(cluster, queue) == 0, timeout=30)
    finally:
        cluster.kubectl("delete", "raycluster", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


def test_a_pod_group_from_a_deployment_binds_all_or_none(cluster: Cluster, kubegang: Any, namespace: str) -> None:
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 24)
    labels = {"app": "workers", "kubegang.io/pod-group": "workers", "kubegang.io/group-size": "4",
              "kubegang.io/queue": queue}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "workers", "namespace": namespace},
                  "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "workers"}}, "template": {
                      "metadata": {"labels": labels, "annotations": {"kubegang.io/topology-required": "leaf"}},
                      "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                          "name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    selector = "kubegang.io/pod-group=workers"
    try:
        cluster.apply(deployment)
        cluster.wait_for("the Deployment's 4 pods", lambda: len(_pods(cluster, namespace, selector)) == 4, timeout=60)
        cluster.wait_for("the group's GPUJob to wait for quota", lambda: _phase(
            cluster, namespace, "podgroup-workers") == "Unschedulable", timeout=60)
        _held_whole(cluster, namespace, selector)  # 24 GPUs of quota for 32: none of the four binds
        message = json.dumps(cluster.get_json("events", "-n", namespace, "--field-selector",
                                              "involvedObject.kind=Pod")["items"])
        assert "waits for kubegang to admit its gang (PodGroup workers)" in message

        _queue(cluster, queue, namespace, 32)
        cluster.wait_for("all four bound and Running", lambda: len(pods := _pods(cluster, namespace, selector)) == 4
                         and all(p["status"].get("phase") == "Running" for p in pods), timeout=120)
        pods = _pods(cluster, namespace, selector)
        assert len(_leaves(cluster, pods)) == 1
        assert sorted(int(p["metadata"]["labels"]["kubegang.io/replica-index"]) for p in pods) == [0, 1, 2, 3]
        cluster.wait_for("the group's GPUJob Running", lambda: _phase(
            cluster, namespace, "podgroup-workers") == "Running", timeout=60)
        job = _job(cluster, namespace, "podgroup-workers")
        assert job is not None  # docs/api.md: podSource names the label's value; the group is charged whole
        assert (job["spec"]["replicas"], job["spec"]["podSource"]) == (4, {"kind": "PodGroup", "name": "workers"})
        assert job["status"]["totalGPUs"] == 32, job["status"]

        cluster.kubectl("delete", "deployment", "workers", "-n", namespace)
        cluster.wait_for("the group's pods and then its GPUJob gone", lambda: (
            _pods(cluster, namespace, selector) == [] and _job(cluster, namespace, "podgroup-workers") is None),
            timeout=90)
    finally:
        cluster.kubectl("delete", "deployment", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


def test_a_statefulset_and_an_indexed_job_are_pod_groups_each_admitted_whole_in_turn(
        cluster: Cluster, kubegang: Any, namespace: str) -> None:
    """The same three labels make a StatefulSet's pods (``podManagementPolicy: Parallel``) and an indexed
    batch Job's pods (what JobSet and the Kubeflow operators create) gangs: with room for one group, the
    other has no pod bound until the first goes; the Job's group then runs to its end and is given back."""
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 32)

    def template(group: str, **annotations: str) -> dict[str, Any]:
        return {"metadata": {"labels": {"app": group, "kubegang.io/pod-group": group, "kubegang.io/group-size": "4",
                                        "kubegang.io/queue": queue},
                             "annotations": {"kubegang.io/topology-required": "leaf", **annotations}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}

    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": namespace},
           "spec": {"replicas": 4, "serviceName": "db", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}}
    job_template = template("train", **{"kubegang.io/fake-runtime": "5s"})
    job_template["spec"]["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": namespace},
           "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed", "backoffLimit": 0,
                    "template": job_template}}
    try:
        cluster.apply(sts)
        cluster.wait_for("the StatefulSet's group Running whole", lambda: (
            _phase(cluster, namespace, "podgroup-db") == "Running"
            and len(_pods(cluster, namespace, "kubegang.io/pod-group=db")) == 4), timeout=120)
        assert len(_leaves(cluster, _pods(cluster, namespace, "kubegang.io/pod-group=db"))) == 1

        cluster.apply(job)
        cluster.wait_for("the Job's 4 pods, its group waiting for quota", lambda: (
            len(_pods(cluster, namespace, "kubegang.io/pod-group=train")) == 4
            and _phase(cluster, namespace, "podgroup-train") in ("Queued", "Unschedulable")), timeout=90)
        _held_whole(cluster, namespace, "kubegang.io/pod-group=train")

        cluster.kubectl("delete", "statefulset", "db", "-n", namespace)
        cluster.wait_for("the Job to complete: its group ran whole once the StatefulSet's was given back", lambda: (
            any(c["type"] == "Complete" and c["status"] == "True" for c in
                (cluster.get_json("job", "train", "-n", namespace).get("status") or {}).get("conditions") or [])),
            timeout=150)
        done = cluster.get_json("pods", "-n", namespace, "-l", "kubegang.io/pod-group=train")["items"]
        assert len(done) == 4 and all(p["status"]["phase"] == "Succeeded" for p in done)
        assert len(_leaves(cluster, done)) == 1
        cluster.wait_for("the quota given back", lambda: _used(cluster, queue) == 0, timeout=90)
    finally:
        cluster.kubectl("delete", "statefulset,job", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


def test_a_ray_cluster_scaled_past_its_admission_grows_only_when_quota_allows_without_restarting(
        cluster: Cluster, kubegang: Any, kuberay: dict[str, Any], namespace: str) -> None:
    """Scaling a worker group of a running Ray cluster up: the added pod waits for quota as a growth slice
    (``raycluster-rc.grow-1``) while the running workers go on untouched; once the queue has room it is
    placed, and deleting the RayCluster gives everything back."""
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 16)
    rc = _ray_cluster(namespace, queue, 2, min_workers=0, max_workers=4)
    workers = "ray.io/cluster=rc,ray.io/node-type=worker"
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps(rc))
        cluster.wait_for("the Ray cluster Running at 2 workers", lambda: _phase(
            cluster, namespace, "raycluster-rc") == "Running", timeout=120)
        first = {p["metadata"]["uid"] for p in _pods(cluster, namespace, workers)}
        assert len(first) == 2

        cluster.kubectl("patch", "raycluster", "rc", "-n", namespace, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 3}]))
        cluster.wait_for("the added worker to wait for quota as a growth slice", lambda: (
            len(_pods(cluster, namespace, workers)) == 3
            and _phase(cluster, namespace, "raycluster-rc.grow-1") in ("Queued", "Unschedulable")), timeout=90)
        grown = _job(cluster, namespace, "raycluster-rc.grow-1") or {}
        assert (grown["spec"]["replicas"], grown["spec"]["podSource"]) == (1, {"kind": "RayCluster", "name": "rc"})
        _held_whole(cluster, namespace, workers + ",!kubegang.io/job-uid")  # the added one stays unbound
        assert {p["metadata"]["uid"] for p in _pods(cluster, namespace, workers)} >= first
        assert _phase(cluster, namespace, "raycluster-rc") == "Running"  # the admitted part runs on
        cluster.wait_for("the queue to count the base's GPUs only", lambda: _used(cluster, queue) == 16, timeout=30)
        assert "quota" in _why(cluster, namespace, "raycluster-rc.grow-1").lower()  # the slice explains itself

        _queue(cluster, queue, namespace, 24)
        cluster.wait_for("the growth slice Running", lambda: _phase(
            cluster, namespace, "raycluster-rc.grow-1") == "Running", timeout=120,
            detail=lambda: _ray_state(cluster, namespace, "raycluster-rc.grow-1"))
        pods = _pods(cluster, namespace, workers)
        assert len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods)
        assert first <= {p["metadata"]["uid"] for p in pods}  # nothing restarted to grow
        for p in pods:
            assert p["spec"]["nodeName"] == p["metadata"]["annotations"]["kubegang.io/node"]
        # The queue's status is written a moment after the admissions it sums (coalesced).
        cluster.wait_for("the queue to count the slice's GPUs", lambda: _used(cluster, queue) == 24, timeout=30)

        cluster.kubectl("delete", "raycluster", "rc", "-n", namespace)
        cluster.wait_for("every pod, both GPUJobs and the quota given back", lambda: (
            _pods(cluster, namespace, "ray.io/cluster=rc") == []
            and _job(cluster, namespace, "raycluster-rc") is None
            and _job(cluster, namespace, "raycluster-rc.grow-1") is None
            and _used(cluster, queue) == 0), timeout=120)
    finally:
        cluster.kubectl("delete", "raycluster", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


def test_a_higher_priority_gang_preempts_a_ray_cluster_whole_and_it_runs_again_afterwards(
        cluster: Cluster, kubegang: Any, kuberay: dict[str, Any], namespace: str) -> None:
    """Preemption evicts the whole Ray cluster: its GPUJob is requeued with the reason, the RayCluster is
    suspended (KubeRay deletes every pod, the CPU head too), and it runs again once the GPUs are free."""
    cluster.use_shape("superpod-h100")
    queue = namespace
    cluster.apply({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": queue},
                   "spec": {"namespaces": [namespace], "resources": [{"flavor": H100, "nominal": 16}],
                            "preemption": {"withinQueue": "LowerPriority"}}})
    rc = _ray_cluster(namespace, queue, 2, min_workers=2, max_workers=2)
    high = {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
            "metadata": {"name": "high", "namespace": namespace},
            "spec": {"replicas": 2, "queue": queue, "priority": 100, "template": {"spec": {"containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps(rc))
        cluster.wait_for("the Ray cluster Running", lambda: _phase(cluster, namespace, "raycluster-rc") == "Running",
                         timeout=120, detail=lambda: _ray_state(cluster, namespace, "raycluster-rc"))
        assert len(_pods(cluster, namespace, "ray.io/cluster=rc")) == 3

        cluster.apply(high)
        cluster.wait_for("the higher-priority GPUJob Running", lambda: _phase(cluster, namespace, "high") == "Running",
                         timeout=120)
        job = _job(cluster, namespace, "raycluster-rc") or {}
        preempted = next(c for c in job["status"]["conditions"] if c["type"] == "Preempted")
        assert preempted["status"] == "True" and f"{namespace}/high" in preempted["message"]
        assert job["status"]["phase"] in ("Queued", "Unschedulable")
        assert cluster.get_json("raycluster", "rc", "-n", namespace)["spec"]["suspend"] is True
        cluster.wait_for("every pod of the Ray cluster gone, the head too", lambda: _pods(
            cluster, namespace, "ray.io/cluster=rc") == [], timeout=60)

        cluster.kubectl("delete", "gpujob", "high", "-n", namespace)
        cluster.wait_for("the Ray cluster Running again, whole", lambda: (
            _phase(cluster, namespace, "raycluster-rc") == "Running"
            and len(_pods(cluster, namespace, "ray.io/cluster=rc,ray.io/node-type=worker")) == 2), timeout=120)
        assert cluster.get_json("raycluster", "rc", "-n", namespace)["spec"]["suspend"] is False
    finally:
        cluster.kubectl("delete", "raycluster,gpujob", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


@pytest.mark.parametrize("mode", ["HTTPMode", "K8sJobMode"])
def test_a_ray_job_is_admitted_as_the_gang_of_its_ray_cluster_runs_to_completion_and_gives_everything_back(
        cluster: Cluster, kubegang: Any, kuberay: dict[str, Any], namespace: str, mode: str) -> None:
    """KubeRay copies a RayJob's labels to the RayCluster it makes, so a queued RayJob's cluster is held,
    admitted and placed as one gang like any queued RayCluster; the entrypoint is submitted to the
    cluster's head (by KubeRay in ``HTTPMode``, by its submitter pod in ``K8sJobMode``; on fake nodes the
    head is hack/rayheads.py), KubeRay follows it to SUCCEEDED, marks the RayJob Complete and deletes its
    cluster (``shutdownAfterJobFinishes``), and the GPUJob, quota and GPUs go with it."""
    cluster.use_shape("superpod-h100")
    queue = namespace
    _queue(cluster, queue, namespace, 8)
    rj = {"apiVersion": "ray.io/v1", "kind": "RayJob",
          "metadata": {"name": "rj", "namespace": namespace, "labels": {"kubegang.io/queue": queue},
                       "annotations": {"kubegang.io/topology-required": "leaf"}},
          "spec": {"entrypoint": "python train.py", "submissionMode": mode,
                   "metadata": {"kubegang.io/fake-runtime": "3s"}, "shutdownAfterJobFinishes": True,
                   # K8sJobMode's submitter follows the job to its end: on kwok it runs as long.
                   **({"submitterPodTemplate": {"metadata": {"annotations": {"kubegang.io/fake-runtime": "3s"}},
                                                "spec": {"restartPolicy": "Never", "containers": [
                                                    {"name": "ray-job-submitter", "image": "rayproject/ray:2.46.0"}]}}}
                      if mode == "K8sJobMode" else {}),
                   "rayClusterSpec": {"rayVersion": "2.46.0",  # K8sJobMode's submitter command needs it
                                      "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                                          "containers": [_container("ray-head", 0)]}}},
                                      "workerGroupSpecs": [{
                                          "groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                          "rayStartParams": {},
                                          "template": {"spec": {"containers": [_container("ray-worker", 8)]}}}]}}}
    selector = "ray.io/originated-from-cr-name=rj"

    def ray_cluster() -> str | None:
        items = cluster.get_json("rayclusters", "-n", namespace, "-l", selector)["items"]
        return items[0]["metadata"]["name"] if items else None

    try:
        cluster.apply(rj)
        cluster.wait_for("KubeRay to make the RayJob's RayCluster", lambda: ray_cluster() is not None, timeout=60)
        name = ray_cluster()
        assert name is not None
        rc = cluster.get_json("raycluster", name, "-n", namespace)
        assert rc["spec"]["suspend"] is True and rc["metadata"]["labels"]["kubegang.io/queue"] == queue
        cluster.wait_for("its GPUJob to wait for quota", lambda: _phase(
            cluster, namespace, f"raycluster-{name}") == "Unschedulable", timeout=60)
        _held_whole(cluster, namespace, f"ray.io/cluster={name}")
        assert _pods(cluster, namespace, f"ray.io/cluster={name}") == []

        _queue(cluster, queue, namespace, 16)
        cluster.wait_for("the RayJob's cluster Running whole", lambda: _phase(
            cluster, namespace, f"raycluster-{name}") == "Running", timeout=120)
        workers = _pods(cluster, namespace, f"ray.io/cluster={name},ray.io/node-type=worker")
        assert len(workers) == 2 and len(_leaves(cluster, workers)) == 1
        def job_status() -> dict[str, Any]:
            return dict(cluster.get_json("rayjob", "rj", "-n", namespace).get("status") or {})

        cluster.wait_for("KubeRay to submit the job to the head", lambda: job_status().get("jobStatus") in (
            "RUNNING", "SUCCEEDED"), timeout=90)
        # The end: the job succeeds, KubeRay marks the RayJob Complete and deletes its cluster; kubegang
        # gives everything back.
        cluster.wait_for("the RayJob to end", lambda: job_status().get("jobDeploymentStatus") in (
            "Complete", "Failed"), timeout=90)
        status = job_status()
        assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED"), status
        cluster.wait_for("its cluster, GPUJob and quota to be gone", lambda: (
            ray_cluster() is None and _job(cluster, namespace, f"raycluster-{name}") is None
            and _used(cluster, queue) == 0), timeout=120)
    finally:
        cluster.kubectl("delete", "rayjob", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "gpuqueue", queue, "--ignore-not-found", "--wait=false", check=False)


def test_a_ray_cluster_kubegang_cannot_represent_is_told_why_on_itself_naming_its_own_field(
        cluster: Cluster, kubegang: Any, kuberay: dict[str, Any], namespace: str) -> None:
    """docs/ray-and-pod-groups.md, "Limits": a queue label that is no GPUQueue name, or GPU worker groups
    that want no pod yet, get no GPUJob and a Warning Event ``NotAdmissible`` on the RayCluster naming
    the label or the group's field (before, the first made a refused GPUJob create every step, seen
    only in the operator's log, and the second was told to drop the queue label)."""
    cluster.use_shape("superpod-h100")
    bad_label = _ray_cluster(namespace, "ML_Team", 1, min_workers=1, max_workers=1)
    idle = _ray_cluster(namespace, namespace, 0, min_workers=0, max_workers=2)
    idle["metadata"]["name"] = "idle"

    def warnings(name: str) -> list[str]:
        events = cluster.get_json("events", "-n", namespace, "--field-selector",
                                  f"involvedObject.kind=RayCluster,involvedObject.name={name}")["items"]
        return [e["message"] for e in events if e["reason"] == "NotAdmissible" and e["type"] == "Warning"]

    try:
        for rc in (bad_label, idle):
            cluster.kubectl("create", "-f", "-", input=json.dumps(rc))
        cluster.wait_for("a NotAdmissible Event naming the queue label", lambda: any(
            "metadata.labels[kubegang.io/queue]" in m and "'ML_Team'" in m for m in warnings("rc")), timeout=60)
        cluster.wait_for("a NotAdmissible Event naming the idle group", lambda: any(
            "spec.workerGroupSpecs[0]" in m and "0 pods are desired" in m for m in warnings("idle")), timeout=60)
        assert _job(cluster, namespace, "raycluster-rc") is None and _job(cluster, namespace, "raycluster-idle") is None
        assert _pods(cluster, namespace, "ray.io/node-type=worker") == []
    finally:
        cluster.kubectl("delete", "raycluster", "--all", "-n", namespace, "--wait=false", check=False)
