"""The chart renders the project's single sources unchanged: CRDs, the scheduler configuration, the
agent's admission policy, and the enums it shares with the code. A drift here means a cluster
installed with Helm would behave differently from the one the e2e suite tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kubegang.extender.scheduler_config import SchedulerConfigValues, render_scheduler_config
from kubegang.topology import PRESETS

Render = Any  # conftest.Render
REPO = Path(__file__).resolve().parents[3]
CHART_ANNOTATIONS = {"helm.sh/resource-policy", "kubegang.io/chart-version"}


def _without_chart_annotations(crd: dict[str, Any]) -> dict[str, Any]:
    meta = dict(crd["metadata"])
    annotations = {k: v for k, v in meta.pop("annotations", {}).items() if k not in CHART_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    return {**crd, "metadata": meta}


def test_chart_crds_equal_the_generated_crds(render: Render) -> None:
    rendered = {c["metadata"]["name"]: c for c in render().kind("CustomResourceDefinition")}
    generated = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        generated[crd["metadata"]["name"]] = crd
    assert set(rendered) == set(generated)
    for name, crd in generated.items():
        assert _without_chart_annotations(rendered[name]) == crd, f"{name} differs from crds/"


def test_crds_can_be_released_without_keep(render: Render) -> None:
    crds = render("crds.keep=false").kind("CustomResourceDefinition")
    assert crds and all("helm.sh/resource-policy" not in c["metadata"]["annotations"] for c in crds)


def test_scheduler_config_is_the_python_rendering(render: Render) -> None:
    """Same template, same values: the chart's ConfigMap and render_scheduler_config agree exactly."""
    config_map = render(namespace="gpu-system", release="prod").one("ConfigMap", "-scheduler")
    chart = yaml.safe_load(config_map["data"]["config.yaml"])
    python = yaml.safe_load(render_scheduler_config(SchedulerConfigValues(
        extender_url="https://prod-kubegang-extender.gpu-system.svc:8443",
        ca_file="/etc/kubegang/tls/ca.crt",
        cert_file="/etc/kubegang/tls/tls.crt",
        key_file="/etc/kubegang/tls/tls.key",
        kubeconfig="",
        leader_elect=True,
        lease_namespace="gpu-system",
    )))
    assert chart == python
    # kube-scheduler's own gang plugin stays out of kubegang's profile (one gang authority).
    assert chart["profiles"] == [{"schedulerName": "kubegang",
                                  "plugins": {"multiPoint": {"disabled": [{"name": "GangScheduling"}]}}}]


def test_scheduler_config_follows_leader_election_value(render: Render) -> None:
    config_map = render("scheduler.leaderElection=false", "scheduler.replicas=1").one("ConfigMap", "-scheduler")
    assert yaml.safe_load(config_map["data"]["config.yaml"])["leaderElection"]["leaderElect"] is False


def test_scheduler_mounts_the_files_its_config_names(render: Render) -> None:
    objects = render()
    config = yaml.safe_load(objects.one("ConfigMap", "-scheduler")["data"]["config.yaml"])
    tls = config["extenders"][0]["tlsConfig"]
    scheduler = objects.one("Deployment", "-scheduler")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in scheduler["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in scheduler["volumes"]}
    tls_volume = next(name for name, path in mounts.items() if tls["caFile"].startswith(path + "/"))
    assert volumes[tls_volume]["secret"]["secretName"].endswith("-client-tls")
    for key in ("caFile", "certFile", "keyFile"):
        assert tls[key].startswith(mounts[tls_volume] + "/")
    service = objects.one("Service", "-extender")
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    https = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "https")
    assert config["extenders"][0]["urlPrefix"] == f"https://{host}:{https}"
    assert tls["serverName"] == host


def test_agent_policy_is_the_agents_own(render: Render) -> None:
    objects = render()
    shipped = list(yaml.safe_load_all((REPO / "agent" / "policy" / "own-node-only.yaml").read_text()))
    rendered = objects.kind("ValidatingAdmissionPolicy") + objects.kind("ValidatingAdmissionPolicyBinding")
    assert rendered == shipped
    match = shipped[0]["spec"]["matchConditions"][0]["expression"]
    agent_sa = objects.one("DaemonSet", "-agent")["spec"]["template"]["spec"]["serviceAccountName"]
    assert f":{agent_sa}'" in match, "the policy must match the agent's service account"


def test_topology_presets_in_the_schema_are_the_codes(chart_dir: Path) -> None:
    schema = json.loads((chart_dir / "values.schema.json").read_text())
    enum = schema["properties"]["extender"]["properties"]["topologyPreset"]["enum"]
    assert sorted(enum) == sorted(PRESETS)


def test_chart_links_point_into_the_repository(chart_dir: Path) -> None:
    """files/ holds links, not copies, so there is nothing to keep in sync by hand."""
    files = chart_dir / "files"
    for name in ("crds", "kubegang-scheduler.yaml", "agent-own-node-only.yaml"):
        link = files / name
        assert link.is_symlink(), f"{link} must link to the repository's source"
        assert link.resolve().is_relative_to(REPO), link
