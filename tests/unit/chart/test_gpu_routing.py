"""The GPU routing policy the chart renders (templates/gpu-routing.yaml): on by default, scoped by a
namespace selector and an opt-out label, routing to the scheduler profile the chart's scheduler runs.

The CEL itself is evaluated by a real API server in tests/e2e/test_gpu_routing.py (the local stack
applies this template) and tests/e2e/test_helm.py (the chart installed with Helm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

Render = Any  # conftest.Render
HelmRun = Any  # conftest.HelmRun
OPT_OUT = {"key": "kubegang.io/routing", "operator": "NotIn", "values": ["disabled"]}


def _routing(objects: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return (objects.one("MutatingAdmissionPolicy", "-gpu-routing"),
            objects.one("MutatingAdmissionPolicyBinding", "-gpu-routing"))


def _condition(policy: dict[str, Any], name: str) -> str:
    expression: str = next(c["expression"] for c in policy["spec"]["matchConditions"] if c["name"] == name)
    return expression


def _excluded(binding: dict[str, Any]) -> list[str]:
    expressions = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    names: list[str] = next(e["values"] for e in expressions if e["key"] == "kubernetes.io/metadata.name")
    return names


def test_on_by_default_for_pod_create_only(render: Render) -> None:
    policy, binding = _routing(render(namespace="gpu-system", release="prod"))
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == "prod-kubegang-gpu-routing"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["reinvocationPolicy"] == "IfNeeded"
    assert "paramKind" not in spec
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]
    assert [m["patchType"] for m in spec["mutations"]] == ["ApplyConfiguration"]


def test_routes_to_the_profile_the_chart_scheduler_runs(render: Render) -> None:
    objects = render()
    policy, _ = _routing(objects)
    config = yaml.safe_load(objects.one("ConfigMap", "-scheduler")["data"]["config.yaml"])
    profile = config["profiles"][0]["schedulerName"]
    assert policy["spec"]["mutations"][0]["applyConfiguration"]["expression"] == (
        f'Object{{spec: Object.spec{{schedulerName: "{profile}"}}}}')


def test_only_pods_for_the_default_scheduler(render: Render) -> None:
    condition = _condition(_routing(render())[0], "default-scheduler")
    assert "object.spec.schedulerName == 'default-scheduler'" in condition
    assert "object.spec.schedulerName == ''" in condition
    assert "!has(object.spec.schedulerName)" in condition


def test_gpu_requests_in_containers_and_init_containers(render: Render) -> None:
    condition = _condition(_routing(render())[0], "requests-gpus")
    for where in ("object.spec.containers.exists(c,", "object.spec.initContainers.exists(c,"):
        assert where in condition
    for field in ("c.resources.limits.exists(r, r in", "c.resources.requests.exists(r, r in"):
        assert condition.count(field) == 2, field  # once for containers, once for init containers
    assert condition.count('["nvidia.com/gpu"]') == 4


def test_resource_names_are_a_list(render: Render) -> None:
    names = "{nvidia.com/gpu,nvidia.com/mig-1g.10gb,nvidia.com/gpu.shared}"
    condition = _condition(_routing(render(f"gpuRouting.resourceNames={names}"))[0], "requests-gpus")
    assert condition.count('["nvidia.com/gpu","nvidia.com/mig-1g.10gb","nvidia.com/gpu.shared"]') == 4


def test_excludes_kube_system_and_the_release_namespace(render: Render) -> None:
    _, binding = _routing(render(namespace="gpu-system"))
    assert _excluded(binding) == ["kube-system", "gpu-system"]
    match = binding["spec"]["matchResources"]
    assert OPT_OUT in match["namespaceSelector"]["matchExpressions"], "namespace opt-out label"
    assert match["objectSelector"] == {"matchExpressions": [OPT_OUT]}, "pod opt-out label"
    assert "matchLabels" not in match["namespaceSelector"]


def test_more_excluded_namespaces_and_a_namespace_selector(render: Render) -> None:
    _, binding = _routing(render("gpuRouting.excludeNamespaces={kube-system,monitoring}",
                                 "gpuRouting.namespaceSelector.matchLabels.gpu=allowed",
                                 "gpuRouting.namespaceSelector.matchExpressions[0].key=tier",
                                 "gpuRouting.namespaceSelector.matchExpressions[0].operator=Exists",
                                 namespace="kubegang-system"))
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert _excluded(binding) == ["kube-system", "monitoring", "kubegang-system"]
    assert selector["matchLabels"] == {"gpu": "allowed"}
    assert {"key": "tier", "operator": "Exists"} in selector["matchExpressions"]
    assert OPT_OUT in selector["matchExpressions"], "the opt-out label always applies"
    # The RayCluster hold: the queue label is the opt-in, so only the exclusions scope it (charts README).
    objects_ray = render("gpuRouting.excludeNamespaces={kube-system,monitoring}",
                               "gpuRouting.namespaceSelector.matchLabels.gpu=allowed", namespace="kubegang-system")
    ray = objects_ray.one("MutatingAdmissionPolicyBinding", "-gpu-routing-rayclusters")
    assert ray["spec"]["matchResources"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "monitoring", "kubegang-system"]}]}


def test_can_be_turned_off(render: Render) -> None:
    objects = render("gpuRouting.enabled=false")
    assert not objects.kind("MutatingAdmissionPolicy") and not objects.kind("MutatingAdmissionPolicyBinding")


def test_localstack_renders_the_same_template(run_helm: HelmRun, chart_dir: Path) -> None:
    """hack/localstack.py applies --show-only templates/gpu-routing.yaml: exactly these objects."""
    out = run_helm("template", "kubegang", str(chart_dir), "--namespace", "kubegang-system",
                   "--show-only", "templates/gpu-routing.yaml").stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("MutatingAdmissionPolicy", "kubegang-gpu-routing"),
        ("MutatingAdmissionPolicy", "kubegang-gpu-routing-rayclusters"),
        ("MutatingAdmissionPolicyBinding", "kubegang-gpu-routing"),
        ("MutatingAdmissionPolicyBinding", "kubegang-gpu-routing-rayclusters")]


def test_a_queued_raycluster_is_suspended_on_creation_unless_turned_off(run_helm: HelmRun, chart_dir: Path) -> None:
    def policies(*flags: str) -> dict[str, Any]:
        out = run_helm("template", "kubegang", str(chart_dir), "--namespace", "kubegang-system",
                       "--show-only", "templates/gpu-routing.yaml", *flags).stdout
        return {o["metadata"]["name"]: o for o in yaml.safe_load_all(out)
                if o and o["kind"] == "MutatingAdmissionPolicy"}

    ray = policies()["kubegang-gpu-routing-rayclusters"]["spec"]
    assert ray["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["ray.io"], "apiVersions": ["v1"], "resources": ["rayclusters"], "operations": ["CREATE"]}]
    assert "'kubegang.io/queue' in object.metadata.labels" in ray["matchConditions"][0]["expression"]
    patch = ray["mutations"][0]["jsonPatch"]["expression"]
    assert patch == '[JSONPatch{op: "add", path: "/spec/suspend", value: true}]'
    assert set(policies("--set", "gpuRouting.rayClusters=false")) == {"kubegang-gpu-routing"}


@pytest.mark.parametrize(("flag", "setting", "path"), [
    ("--set", "gpuRouting.resourceNames=null", "at '/gpuRouting': missing property 'resourceNames'"),
    ("--set-json", "gpuRouting.resourceNames=[]", "at '/gpuRouting/resourceNames'"),
    ("--set", "gpuRouting.resourceNames={nvidia.com/gpu,nvidia.com/gpu}", "at '/gpuRouting/resourceNames'"),
    ("--set", "gpuRouting.resourceNames={nvidia.com/gpu\"}", "at '/gpuRouting/resourceNames/0'"),
    ("--set", "gpuRouting.excludeNamespaces={Kube_System}", "at '/gpuRouting/excludeNamespaces/0'"),
    ("--set", "gpuRouting.namespaceSelector.matchExpressions[0].operator=Maybe",
     "at '/gpuRouting/namespaceSelector/matchExpressions/0"),
    ("--set", "gpuRouting.failurePolicy=Ignore", "at '/gpuRouting': additional properties 'failurePolicy'"),
])
def test_schema_refuses_bad_routing_values(run_helm: HelmRun, chart_dir: Path, flag: str, setting: str,
                                           path: str) -> None:
    proc = run_helm("template", "kg", str(chart_dir), flag, setting, check=False)
    assert proc.returncode != 0
    assert path in proc.stderr, proc.stderr


def test_the_raycluster_hold_is_rendered_only_with_gpu_routing(render: Render, chart_dir: Path) -> None:
    """gpuRouting.rayClusters lives in templates/gpu-routing.yaml: gpuRouting.enabled=false drops the hold too,
    and every place that documents the value says so."""
    def policies(*sets: str) -> set[str]:
        return {o["metadata"]["name"] for o in render(*sets, release="kubegang")
                if o["kind"] in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")}

    assert "kubegang-gpu-routing-rayclusters" in policies()
    assert policies("gpuRouting.enabled=false", "gpuRouting.rayClusters=true") == set()
    assert policies("gpuRouting.rayClusters=false") == {"kubegang-gpu-routing"}
    docs = chart_dir.parents[1] / "docs"
    values = (chart_dir / "values.yaml").read_text()
    comment = values[values.index("\n  # -- Hold a RayCluster"):values.index("\n  rayClusters:")]
    readme = next(line for line in (chart_dir / "README.md").read_text().splitlines()
                  if line.startswith("| `gpuRouting.rayClusters` |"))
    install = (docs / "install.md").read_text()
    ray = (docs / "ray-and-pod-groups.md").read_text()
    for where, text in (("values.yaml", comment), ("README.md", readme), ("install.md", install),
                        ("ray-and-pod-groups.md", ray)):
        assert "gpuRouting.enabled=false removes" in text.replace("`", ""), f"{where}: the hold's dependency"
    assert "`gpuRouting.enabled=false` removes it with the pod" in ray
    assert "`gpuRouting.enabled=false` removes the policy, and with it the RayCluster hold" in install
    assert "`kubegang-gpu-routing-rayclusters`" in install
