"""No GPU pod bypasses the placement authority: the chart's MutatingAdmissionPolicy routes it to kubegang.

The session's kubegang stack applies the chart's own ``templates/gpu-routing.yaml`` (hack/localstack.py
renders it with helm), so what runs here is the policy a Helm install creates, evaluated by the real
API server: a pod that requests ``nvidia.com/gpu`` and names no scheduler gets ``schedulerName:
kubegang`` and is bound by that profile (so through the extender's GPU ledger). Opted-out namespaces
and pods, pods without GPU requests, and pods that name another scheduler are left as they are.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

Cluster = Any  # tests/e2e/conftest.py Cluster
Kubegang = Any  # tests/e2e/conftest.py Kubegang
ROUTING_LABEL = "kubegang.io/routing"
SCHEDULER = "kubegang"


def _pod(name: str, namespace: str, *, gpus: int = 1, init_gpus: int = 0, scheduler: str | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
    }
    if init_gpus:
        spec["initContainers"] = [{"name": "init", "image": "registry.k8s.io/pause:3.10",
                                   "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def _create(cluster: Cluster, pod: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Create the pod (or only admit it, --dry-run=server) and return it as the API server stored it."""
    args = ["create", "-f", "-", "-o", "json", *(["--dry-run=server"] if dry_run else [])]
    created: dict[str, Any] = json.loads(cluster.kubectl(*args, input=json.dumps(pod)).stdout)
    return created


def _bound_by(cluster: Cluster, namespace: str, name: str) -> str:
    """Wait for the pod to be bound; return the scheduler (profile) that reported binding it."""
    def scheduled() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = cluster.get_json(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={name},reason=Scheduled")["items"]
        return items

    cluster.wait_for(f"pod {namespace}/{name} bound", lambda: bool(
        cluster.get_json("pod", name, "-n", namespace)["spec"].get("nodeName")) and bool(scheduled()), timeout=60)
    return str(scheduled()[-1].get("reportingComponent") or scheduled()[-1]["source"].get("component"))


@pytest.fixture(autouse=True)
def _gpu_nodes(cluster: Cluster, kubegang: Kubegang) -> None:
    cluster.use_shape("superpod-h100")


def test_plain_gpu_pod_is_routed_to_kubegang_and_bound_by_it(cluster: Cluster, namespace: str) -> None:
    pod = _create(cluster, _pod("plain-gpu", namespace))
    assert pod["spec"]["schedulerName"] == SCHEDULER
    assert _bound_by(cluster, namespace, "plain-gpu") == SCHEDULER
    cluster.wait_for("plain-gpu Running", lambda: cluster.get_json(
        "pod", "plain-gpu", "-n", namespace)["status"].get("phase") == "Running", timeout=60)


def test_opted_out_namespace_keeps_the_default_scheduler(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, f"{ROUTING_LABEL}=disabled")
    # The API server matches namespaces from its informer: wait until it has seen the label.
    cluster.wait_for("the opt-out label to reach admission", lambda: _create(
        cluster, _pod("probe", namespace), dry_run=True)["spec"]["schedulerName"] == "default-scheduler",
        timeout=30)
    pod = _create(cluster, _pod("opted-out", namespace))
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert _bound_by(cluster, namespace, "opted-out") == "default-scheduler"


def test_pod_without_gpu_requests_is_untouched(cluster: Cluster, namespace: str) -> None:
    pod = _create(cluster, _pod("cpu-only", namespace, gpus=0))
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert _bound_by(cluster, namespace, "cpu-only") == "default-scheduler"


def test_pod_naming_another_scheduler_is_untouched(cluster: Cluster, namespace: str) -> None:
    pod = _create(cluster, _pod("elsewhere", namespace, scheduler="another-scheduler"))
    assert pod["spec"]["schedulerName"] == "another-scheduler"
    time.sleep(3)  # no scheduler of that name runs here: nobody binds it, kubegang included
    assert not cluster.get_json("pod", "elsewhere", "-n", namespace)["spec"].get("nodeName")


@pytest.mark.parametrize(("case", "pod_args", "scheduler"), [
    ("explicit default-scheduler", {"scheduler": "default-scheduler"}, SCHEDULER),
    ("GPUs in an init container only", {"gpus": 0, "init_gpus": 1}, SCHEDULER),
    ("pod opt-out label", {"labels": {ROUTING_LABEL: "disabled"}}, "default-scheduler"),
])
def test_admission_cases(cluster: Cluster, namespace: str, case: str, pod_args: dict[str, Any],
                         scheduler: str) -> None:
    pod = _create(cluster, _pod("case", namespace, **pod_args), dry_run=True)
    assert pod["spec"]["schedulerName"] == scheduler, case


def test_system_namespaces_are_not_routed(cluster: Cluster, kubegang: Kubegang) -> None:
    for ns in ("kube-system", kubegang.state["namespace"]):
        pod = _create(cluster, _pod("system-gpu", ns), dry_run=True)
        assert pod["spec"]["schedulerName"] == "default-scheduler", ns
