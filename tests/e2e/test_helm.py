"""The Helm chart installs into the real control plane, runs, and uninstalls cleanly.

Everything the chart renders is accepted by the API server (CEL, admission, RBAC escalation checks);
every workload pod is placed by the default scheduler on a kwok node and turns Running; the agent's
ValidatingAdmissionPolicy really refuses writes to other nodes; the GPU routing policy really routes
GPU pods to kubegang; `helm uninstall` leaves nothing but the kept CRDs. The chart's version check
sees the cluster through discovery (the kinds it lists), never through Helm's offline guess.
ServiceMonitor, PrometheusRule and cert-manager objects need CRDs this cluster does not have, so those
toggles are checked in template mode (tests/unit/chart) and with promtool instead.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubegang"
RELEASE = "kg-e2e"
CRDS = ("gpujobs.kubegang.io", "gpuqueues.kubegang.io", "gpunodes.kubegang.io")
POLICY = "kubegang-agent-own-node-only"
MIG = "nvidia.com/mig-1g.10gb"


def _adopt(cluster: Cluster, kind: str, name: str, namespace: str) -> None:
    """Let this release own a cluster-scoped object an earlier test created (Helm's adoption metadata)."""
    if cluster.kubectl("get", kind, name, check=False).returncode != 0:
        return
    cluster.kubectl("label", "--overwrite", kind, name, "app.kubernetes.io/managed-by=Helm")
    cluster.kubectl("annotate", "--overwrite", kind, name, f"meta.helm.sh/release-name={RELEASE}",
                    f"meta.helm.sh/release-namespace={namespace}")


def _manifest(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    out = cluster.helm("get", "manifest", RELEASE, "-n", namespace).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _ref(obj: dict[str, Any], namespace: str) -> list[str]:
    kind = obj["kind"]
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    resource = f"{kind.lower()}.{group}" if group else kind.lower()
    ns = obj["metadata"].get("namespace")
    return [resource, obj["metadata"]["name"], *(["-n", ns] if ns else [])]


def _impersonating_agent(cluster: Cluster, tmp_path: Path, namespace: str, node: str) -> Path:
    """A kubeconfig acting as the agent's service account with a token bound to ``node``."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for user in config["users"]:
        user["user"]["as"] = f"system:serviceaccount:{namespace}:kubegang-agent"
        user["user"]["as-user-extra"] = {"authentication.kubernetes.io/node-name": [node]}
    path = tmp_path / "agent.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _as_agent(cluster: Cluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = cluster.kubectl("--kubeconfig", str(kubeconfig), *args, check=False)
    return result


def test_install_run_and_uninstall(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    cluster.use_shape("superpod-h100")
    gpu_nodes = cluster.kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name").stdout.split()
    assert gpu_nodes
    for crd in CRDS:
        _adopt(cluster, "crd", crd, namespace)
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        _adopt(cluster, kind, POLICY, namespace)

    cluster.helm("install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "5m", timeout=400)
    try:
        objects = _manifest(cluster, namespace)
        kinds = {o["kind"] for o in objects}
        assert {"CustomResourceDefinition", "Deployment", "DaemonSet", "ValidatingAdmissionPolicy",
                "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds
        for obj in objects:  # every object the chart rendered exists as the API server stored it
            cluster.kubectl("get", *_ref(obj, namespace))

        pods = cluster.get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        by_component: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            by_component.setdefault(pod["metadata"]["labels"]["app.kubernetes.io/component"], []).append(pod)
        assert {k: len(v) for k, v in by_component.items()} == {
            "operator": 2, "extender": 1, "scheduler": 2, "agent": len(gpu_nodes)}
        kwok_nodes = set(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").stdout.split())
        for pod in pods:
            assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
            assert f"node/{pod['spec']['nodeName']}" in kwok_nodes
        agent_nodes = {f"node/{p['spec']['nodeName']}" for p in by_component["agent"]}
        assert agent_nodes == set(gpu_nodes), "one agent on every GPU node"

        config = cluster.get_json("configmap", f"{RELEASE}-kubegang-scheduler", "-n", namespace)
        scheduler = yaml.safe_load(config["data"]["config.yaml"])
        assert scheduler["extenders"][0]["urlPrefix"] == (
            f"https://{RELEASE}-kubegang-extender.{namespace}.svc:8443")

        _check_agent_policy(cluster, tmp_path, namespace, gpu_nodes[0].removeprefix("node/"),
                            gpu_nodes[1].removeprefix("node/"))
        _check_upgrade_keeps_certificates(cluster, namespace)
        _check_gpu_routing(cluster, namespace)
        _check_user_roles(cluster, namespace)
        _check_priorities(cluster, namespace)
        _check_network_policies_are_valid(cluster, namespace)
    except BaseException:
        cluster.helm("uninstall", RELEASE, "-n", namespace, check=False)
        raise

    cluster.helm("uninstall", RELEASE, "-n", namespace, "--wait", "--timeout", "3m", timeout=240)
    leftovers = []
    for obj in objects:
        if obj["kind"] == "CustomResourceDefinition":
            continue
        if cluster.kubectl("get", *_ref(obj, namespace), check=False).returncode == 0:
            leftovers.append(f"{obj['kind']}/{obj['metadata']['name']}")
    assert not leftovers, f"left behind by helm uninstall: {leftovers}"
    cluster.wait_for("the release's pods to go", lambda: not cluster.get_json(
        "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"], timeout=120)
    for crd in CRDS:  # kept on purpose: deleting them would delete every GPUJob and GPUQueue
        cluster.kubectl("get", "crd", crd)


def _check_agent_policy(cluster: Cluster, tmp_path: Path, namespace: str, own: str, other: str) -> None:
    agent = _impersonating_agent(cluster, tmp_path, namespace, own)

    def gpunode(name: str) -> str:
        return json.dumps({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUNode", "metadata": {"name": name}})

    def create(name: str) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = cluster.kubectl(
            "--kubeconfig", str(agent), "create", "--dry-run=server", "-f", "-", input=gpunode(name), check=False)
        return result

    denied = create(other)
    assert denied.returncode != 0 and f"may write only its own gpunodes, not {other}" in denied.stderr, denied.stderr
    mine = create(own)
    assert "may write only its own" not in mine.stderr, mine.stderr
    assert mine.returncode == 0 or "AlreadyExists" in mine.stderr, mine.stderr

    ok = _as_agent(cluster, agent, "label", "node", own, "nvidia.com/gpu.e2e=1", "--dry-run=server")
    assert ok.returncode == 0, ok.stderr
    foreign = _as_agent(cluster, agent, "label", "node", other, "nvidia.com/gpu.e2e=1", "--dry-run=server")
    assert foreign.returncode != 0 and "may write only its own nodes" in foreign.stderr, foreign.stderr
    other_label = _as_agent(cluster, agent, "label", "node", own, "team=research", "--dry-run=server")
    assert other_label.returncode != 0 and "may change only labels" in other_label.stderr, other_label.stderr
    taint = _as_agent(cluster, agent, "taint", "node", own, "gpu=bad:NoSchedule", "--dry-run=server")
    assert taint.returncode != 0, taint.stderr


def _check_upgrade_keeps_certificates(cluster: Cluster, namespace: str) -> None:
    def secret() -> dict[str, str]:
        data: dict[str, str] = cluster.get_json("secret", f"{RELEASE}-kubegang-extender-tls", "-n", namespace)["data"]
        return data

    before = secret()
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values",
                 "--set", "operator.logLevel=DEBUG", "--wait", "--timeout", "5m", timeout=400)
    assert secret() == before, "helm upgrade must keep the CA and certificates (lookup)"


def _scheduler_for(cluster: Cluster, namespace: str, resource: str) -> str:
    """The schedulerName admission gives a pod that limits ``resource`` (created with --dry-run=server)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "routing-probe", "namespace": namespace},
           "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {resource: "1"}}}]}}
    proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", "-o", "jsonpath={.spec.schedulerName}",
                           input=json.dumps(pod))
    return str(proc.stdout)


def _check_gpu_routing(cluster: Cluster, namespace: str) -> None:
    """The chart's routing policy as the API server runs it, with a resource list from the values.

    The session's kubegang stack may run its own copy of the policy (hack/localstack.py applies the
    same template), which lists nvidia.com/gpu only: a MIG resource that only this release lists tells
    the two apart.
    """
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values",
                 "--set", f"gpuRouting.resourceNames={{nvidia.com/gpu,{MIG}}}", timeout=300)
    policy = cluster.get_json("mutatingadmissionpolicy", f"{RELEASE}-kubegang-gpu-routing")
    assert policy["spec"]["failurePolicy"] == "Fail"
    cluster.wait_for("the release's policy to route a MIG pod",
                     lambda: _scheduler_for(cluster, "default", MIG) == "kubegang", timeout=30)
    assert _scheduler_for(cluster, namespace, MIG) == "default-scheduler", "the release namespace is never routed"


def _can(cluster: Cluster, user: str, verb: str, resource: str, namespace: str, *extra: str) -> bool:
    proc = cluster.kubectl("auth", "can-i", verb, resource, "--as", user, "-n", namespace, *extra, check=False)
    return str(proc.stdout).strip() == "yes"


def _check_user_roles(cluster: Cluster, namespace: str) -> None:
    """The chart's user roles, aggregated by the controller-manager into edit and view, as the API server
    authorises them: a researcher bound to `edit` in a namespace submits GPUJobs there, `view` only reads."""
    team = "e2e-team-roles"
    cluster.kubectl("create", "namespace", team, check=False)
    try:
        cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", team)
        cluster.kubectl("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", team)
        cluster.wait_for("edit to aggregate the GPUJob rules",
                         lambda: _can(cluster, "alice", "create", "gpujobs.kubegang.io", team), timeout=60)
        assert _can(cluster, "alice", "delete", "gpujobs.kubegang.io", team)
        assert not _can(cluster, "alice", "patch", "gpujobs.kubegang.io", team, "--subresource=status"), \
            "status is the operator's"
        assert not _can(cluster, "alice", "create", "gpujobs.kubegang.io", "default"), "edit is per namespace"
        cluster.wait_for("view to aggregate the GPUJob rules",
                         lambda: _can(cluster, "bob", "list", "gpujobs.kubegang.io", team), timeout=60)
        assert not _can(cluster, "bob", "create", "gpujobs.kubegang.io", team)
    finally:
        cluster.kubectl("delete", "namespace", team, "--wait=false", check=False)


def _check_priorities(cluster: Cluster, namespace: str) -> None:
    """The running extender, scheduler and agent pods carry the chart's PriorityClasses' values."""
    pods = cluster.get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    seen = {(p["metadata"]["labels"]["app.kubernetes.io/component"], p["spec"].get("priorityClassName"),
             p["spec"].get("priority")) for p in pods}
    assert ("extender", f"{RELEASE}-kubegang-critical", 1_000_000_000) in seen
    assert ("scheduler", f"{RELEASE}-kubegang-critical", 1_000_000_000) in seen
    assert ("agent", f"{RELEASE}-kubegang-node-critical", 1_000_000_000) in seen


def _check_network_policies_are_valid(cluster: Cluster, namespace: str) -> None:
    """The optional NetworkPolicies (off by default) as the API server validates them (server-side dry run)."""
    rendered = cluster.helm("template", RELEASE, str(CHART), "-n", namespace, "--set", "networkPolicy.enabled=true",
                            "--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
                            "--show-only", "templates/network-policy.yaml").stdout
    policies = [d for d in yaml.safe_load_all(rendered) if d]
    assert len(policies) == 4
    proc = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered)
    assert proc.stdout.count("networkpolicy.networking.k8s.io/") == 4, proc.stdout


def test_version_check_sees_the_clusters_discovery(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """templates/kube-version.yaml checks only when .Capabilities list kinds: real discovery does."""
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (chart / "templates" / "caps.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caps}\ndata:\n"
        '  kinds: {{ .Capabilities.APIVersions.Has "v1/Namespace" | quote }}\n'
        '  map: {{ .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" | quote }}\n'
        "  version: {{ .Capabilities.KubeVersion.Version | quote }}\n")
    rendered = yaml.safe_load(cluster.helm("template", "probe", str(chart), "-n", namespace, "--validate").stdout)
    # So `helm install` above ran the chart's checks, against v1.36 with the routing API: they passed.
    assert rendered["data"] == {"kinds": "true", "map": "true", "version": cluster.versions["KUBERNETES_VERSION"]}


@pytest.fixture(autouse=True)
def _no_leftover_release(cluster: Cluster) -> None:
    """A release left by an interrupted run would clash on the cluster-scoped names."""
    for release in json.loads(cluster.helm("list", "-A", "-o", "json").stdout or "[]"):
        if release["name"] == RELEASE:
            cluster.helm("uninstall", RELEASE, "-n", release["namespace"], "--wait", check=False, timeout=240)
