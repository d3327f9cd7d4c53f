"""Issue 17: real neighbours on the local control plane — Kueue v0.17 and the KubeRay operator v1.5.

Both are the real binaries, built from the Go module proxy by hack/build-addons.sh and started by
``hack/cluster addon NAME up`` (the ``kueue`` and ``kuberay`` fixtures, one start per module): if
either cannot be built or started, these tests fail, never skip. What they prove is that the
neighbours really work here, so the side-by-side benchmark and the Ray gangs of issue 17 measure and
drive the real thing: Kueue queues a batch Job by quota (its webhook suspends it, its controller unsuspends it when
admitted) while kubegang's GPUJobs in another namespace keep running untouched, a stopped Kueue
blocks only what is labelled for it, its ``down`` leaves nothing that could block a namespace, and
KubeRay turns a RayCluster into a head and a GPU worker pod on the fake nodes and honours
``suspend`` for the whole cluster.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubegang.api import RAY_QUEUE_LABEL, ray_cluster_gang

from .conftest import _hack

Cluster = Any  # tests/e2e/conftest.py Cluster
H100 = "NVIDIA-H100-80GB-HBM3"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KWOK_NODE = ("type", "kwok")


@pytest.fixture(autouse=True)
def _gpu_nodes(cluster: Cluster) -> None:
    cluster.use_shape("superpod-h100")


# --- helpers ------------------------------------------------------------------------------------

def _kueue_queues(cluster: Cluster, namespace: str, cpu: int) -> str:
    """ResourceFlavor, ClusterQueue (only this namespace, ``cpu`` CPUs) and LocalQueue; returns the
    LocalQueue's name. Cluster-scoped names carry the namespace: the cluster is the session's."""
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    cluster.apply([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": f"{4 * cpu}Gi"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": namespace}, "spec": {"clusterQueue": cq}},
    ])
    return "lq"


def _delete_kueue_queues(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("delete", "clusterqueue", f"{namespace}-cq", "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavor", f"{namespace}-flavor", "--ignore-not-found", "--wait=false",
                    check=False)


def _job(name: str, namespace: str, queue: str | None, pods: int, runtime: str) -> dict[str, Any]:
    """A plain batch Job of CPU pods that end after ``runtime`` (kwok's fake runtime). No ``suspend``:
    setting it is Kueue's webhook's job."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue} if queue else {}},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": {"kubegang.io/fake-runtime": runtime}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
    }


def _create(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """Create and return the object as the API server stored it (after every admission webhook)."""
    created: dict[str, Any] = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json",
                                                         input=json.dumps(obj)).stdout)
    return created


def _workload(cluster: Cluster, namespace: str, job: str) -> dict[str, Any] | None:
    for wl in cluster.get_json("workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return dict(wl)
    return None


def _condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), None)


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _running_on_kwok(cluster: Cluster, pods: list[dict[str, Any]]) -> bool:
    fake = set(cluster.kubectl("get", "nodes", "-l", "=".join(KWOK_NODE), "-o", "name").stdout.split())
    return bool(pods) and all(p["status"].get("phase") == "Running"
                              and f"node/{p['spec'].get('nodeName')}" in fake for p in pods)


def _job_done(cluster: Cluster, namespace: str, name: str) -> bool:
    job = cluster.get_json("job", name, "-n", namespace)
    return any(c["type"] == "Complete" and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


@pytest.fixture
def other_namespace(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A second namespace for kubegang's GPUJobs, beside the test's own (deleted afterwards)."""
    name = f"{namespace[:50]}-kg"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for("default service account", lambda: cluster.kubectl(
        "get", "serviceaccount", "default", "-n", name, check=False).returncode == 0)
    yield name
    cluster.kubectl("delete", "gpujobs", "--all", "-n", name, "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "gpuqueue", name, "--ignore-not-found", "--wait=false", check=False)


# --- Kueue ------------------------------------------------------------------------------------

def test_real_kueue_queues_a_job_by_quota_while_kubegang_gpujobs_run_beside_it(
        cluster: Cluster, kubegang: Any, kueue: dict[str, Any], namespace: str, other_namespace: str) -> None:
    assert kueue["version"] == cluster.versions["KUEUE_VERSION"]
    queue = _kueue_queues(cluster, namespace, cpu=2)
    # kubegang's side, at the same time: a GPUQueue and a 2 x 8-GPU GPUJob in the other namespace.
    cluster.apply([
        {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": other_namespace},
         "spec": {"resources": [{"flavor": H100, "nominal": 16}]}},
        {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
         "metadata": {"name": "train", "namespace": other_namespace},
         "spec": {"replicas": 2, "queue": other_namespace, "template": {"spec": {"containers": [{
             "name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}},
    ])
    try:
        first = _create(cluster, _job("first", namespace, queue, pods=2, runtime="10s"))
        # Kueue's mutating webhook suspended it on the way in: nothing runs before Kueue admits it.
        assert first["spec"]["suspend"] is True
        cluster.wait_for("Kueue to admit 'first' and its 2 pods to run on fake nodes", lambda: (
            (_condition(_workload(cluster, namespace, "first"), "Admitted") or {}).get("status") == "True"
            and len(pods := _pods(cluster, namespace, "job-name=first")) == 2 and _running_on_kwok(cluster, pods)),
            timeout=60)
        assert cluster.get_json("job", "first", "-n", namespace)["spec"]["suspend"] is False

        # The ClusterQueue's 2 CPUs are in use: a second 1-CPU Job waits suspended, with no pod.
        second = _create(cluster, _job("second", namespace, queue, pods=1, runtime="1s"))
        assert second["spec"]["suspend"] is True
        cluster.wait_for("Kueue to leave 'second' pending for quota", lambda: (
            (_condition(_workload(cluster, namespace, "second"), "QuotaReserved") or {}).get("status") == "False"),
            timeout=30)
        assert (_condition(_workload(cluster, namespace, "first"), "Finished") or {}).get("status") != "True"
        assert cluster.get_json("job", "second", "-n", namespace)["spec"]["suspend"] is True
        assert _pods(cluster, namespace, "job-name=second") == []

        # kubegang's gang ran whole beside it, and Kueue never saw it (no Workload there).
        cluster.wait_for("GPUJob train Running", lambda: (cluster.get_json(
            "gpujob", "train", "-n", other_namespace).get("status") or {}).get("phase") == "Running", timeout=90)
        gang = _pods(cluster, other_namespace, "kubegang.io/job-name=train")
        assert len(gang) == 2 and _running_on_kwok(cluster, gang)
        assert cluster.get_json("workloads.kueue.x-k8s.io", "-n", other_namespace)["items"] == []
        assert not any(p["spec"].get("schedulingGates") for p in gang)

        # When 'first' ends, its quota goes to 'second', which Kueue unsuspends and which completes.
        cluster.wait_for("'first' and then 'second' to complete", lambda: _job_done(cluster, namespace, "first")
                         and _job_done(cluster, namespace, "second"), timeout=90)
        assert (_condition(_workload(cluster, namespace, "second"), "Admitted") or {}).get("status") == "True"
    finally:
        cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false", check=False)
        _delete_kueue_queues(cluster, namespace)


def test_a_stopped_kueue_blocks_only_objects_labelled_for_it(
        cluster: Cluster, kueue: dict[str, Any], namespace: str) -> None:
    queue = _kueue_queues(cluster, namespace, cpu=2)
    os.kill(kueue["pid"], signal.SIGSTOP)  # hung, its webhook configurations still registered
    try:
        t0 = time.monotonic()
        plain = _create(cluster, _job("plain", namespace, None, pods=1, runtime="1s"))
        # Never sent to Kueue's webhook: created at once, not suspended, and it runs.
        assert time.monotonic() - t0 < 5 and not plain["spec"].get("suspend")
        cluster.wait_for("the unlabelled Job to complete", lambda: _job_done(cluster, namespace, "plain"), timeout=60)
        refused = cluster.kubectl("create", "-f", "-", input=json.dumps(_job("queued", namespace, queue, 1, "1s")),
                                  check=False)
        # A labelled Job must pass Kueue's webhook (failurePolicy Fail), so it is refused, not let through.
        assert refused.returncode != 0 and "mjob.kb.io" in refused.stderr, refused.stderr
    finally:
        os.kill(kueue["pid"], signal.SIGCONT)
        cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false", check=False)
        _delete_kueue_queues(cluster, namespace)


# --- KubeRay ----------------------------------------------------------------------------------

def _ray_container(name: str, gpus: int) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    return {"name": name, "image": "rayproject/ray:2.46.0", "resources": resources}


def test_real_kuberay_turns_a_raycluster_into_a_head_and_a_gpu_worker_pod(
        cluster: Cluster, kuberay: dict[str, Any], namespace: str) -> None:
    assert kuberay["version"] == cluster.versions["KUBERAY_VERSION"]
    cluster.apply({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc", "namespace": namespace},
                   "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                                "containers": [_ray_container("ray-head", 0)]}}},
                            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                                                  "rayStartParams": {}, "template": {"spec": {
                                                      "containers": [_ray_container("ray-worker", 1)]}}}]}})
    selector = "ray.io/cluster=rc"
    cluster.wait_for("the operator's head and worker pods Running on fake nodes", lambda: len(
        pods := _pods(cluster, namespace, selector)) == 2 and _running_on_kwok(cluster, pods), timeout=90)
    pods = {p["metadata"]["labels"]["ray.io/node-type"]: p for p in _pods(cluster, namespace, selector)}
    assert set(pods) == {"head", "worker"}
    assert pods["worker"]["metadata"]["labels"]["ray.io/group"] == "gpu"
    limits = {t: p["spec"]["containers"][0]["resources"].get("limits", {}) for t, p in pods.items()}
    assert limits["worker"].get("nvidia.com/gpu") == "1" and "nvidia.com/gpu" not in limits["head"]
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "RayCluster" for p in pods.values())
    cluster.wait_for("RayCluster rc ready", lambda: (cluster.get_json("raycluster", "rc", "-n", namespace)
                                                     .get("status") or {}).get("state") == "ready", timeout=60)
    cluster.kubectl("delete", "raycluster", "rc", "-n", namespace)
    cluster.wait_for("the RayCluster's pods to be gone", lambda: _pods(cluster, namespace, selector) == [], timeout=60)


def test_real_kuberay_honours_suspend_for_the_whole_cluster_the_way_kubegang_counts_it(
        cluster: Cluster, kuberay: dict[str, Any], namespace: str) -> None:
    """What docs/decisions.md's Ray gangs rest on: a suspended RayCluster has no pod; unsuspended, the
    operator creates exactly the pods ray_cluster_gang counts, with the labels it names; suspended
    again, every pod goes and the object stays (how a preempted gang leaves)."""
    rc: dict[str, Any] = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        # Not labelled for kubegang (which would hold it until admitted, tests/e2e/test_ray_gangs.py):
        # this test suspends and unsuspends it by hand to see what KubeRay itself does.
        "metadata": {"name": "held", "namespace": namespace},
        "spec": {"suspend": True, "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                     "containers": [_ray_container("ray-head", 0)]}}},
                 "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 4,
                                       "rayStartParams": {}, "template": {"spec": {
                                           "containers": [_ray_container("ray-worker", 1)]}}}]}}
    cluster.apply(rc)
    selector = "ray.io/cluster=held"

    def suspended() -> bool:
        status = cluster.get_json("raycluster", "held", "-n", namespace).get("status") or {}
        return (_condition({"status": status}, "RayClusterSuspended") or {}).get("status") == "True"

    cluster.wait_for("KubeRay to report the cluster suspended", suspended, timeout=60)
    for _ in range(3):
        assert _pods(cluster, namespace, selector) == []
        time.sleep(1)

    stored = cluster.get_json("raycluster", "held", "-n", namespace)
    gang = ray_cluster_gang({**stored, "metadata": {**stored["metadata"], "labels": {RAY_QUEUE_LABEL: "team-a"}}})
    assert (gang.pods, gang.gpus) == (3, 2)
    cluster.kubectl("patch", "raycluster", "held", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    cluster.wait_for("all of the cluster's pods Running", lambda: len(
        pods := _pods(cluster, namespace, selector)) == gang.pods and _running_on_kwok(cluster, pods), timeout=90)
    for group in gang.groups:
        labels = ",".join(f"{k}={v}" for k, v in group.pod_labels("held").items())
        assert len(_pods(cluster, namespace, labels)) == group.pods, group

    cluster.kubectl("patch", "raycluster", "held", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    cluster.wait_for("every pod gone on suspend", lambda: _pods(cluster, namespace, selector) == [], timeout=60)
    assert cluster.kubectl("get", "raycluster", "held", "-n", namespace, check=False).returncode == 0
    cluster.kubectl("delete", "raycluster", "held", "-n", namespace)


# --- Kueue's down (last: it stops and restarts the module's Kueue) ----------------------------

def test_kueue_down_leaves_nothing_that_could_block_a_namespace(cluster: Cluster, kueue: dict[str, Any]) -> None:
    namespace = f"t-kueue-down-{os.getpid()}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.wait_for("default service account", lambda: cluster.kubectl(
        "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0)
    queue = _kueue_queues(cluster, namespace, cpu=2)
    _create(cluster, _job("held", namespace, queue, pods=1, runtime="600s"))
    cluster.wait_for("'held' admitted (its Workload carries Kueue's finalizer)", lambda: (
        _condition(_workload(cluster, namespace, "held"), "Admitted") or {}).get("status") == "True", timeout=60)
    assert (_workload(cluster, namespace, "held") or {})["metadata"].get("finalizers")
    assert cluster.cluster_dir is not None
    _hack("addon", "kueue", "down", cluster_dir=cluster.cluster_dir)
    try:
        crds = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
        assert not [c for c in crds if c.endswith(".kueue.x-k8s.io")]
        hooks = cluster.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations",
                                "-o", "name").stdout
        assert "kueue" not in hooks
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        cluster.wait_for(f"namespace {namespace} deleted without Kueue", lambda: cluster.kubectl(
            "get", "namespace", namespace, check=False).returncode != 0, timeout=90)
    finally:
        # This module's Kueue again, for whoever comes next (its fixture stops it at the end).
        _hack("addon", "kueue", "up", cluster_dir=cluster.cluster_dir)
        kueue.update(json.loads((cluster.cluster_dir / "kueue.json").read_text()))
