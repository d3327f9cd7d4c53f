"""The chart lints, renders with its defaults and with every toggle, and refuses unknown values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

Render = Any  # conftest.Render: render(*set_args) -> Rendered
HelmRun = Any  # conftest.HelmRun

TOGGLES = (
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "dashboard.enabled=true",
    "tls.certManager.enabled=true",
    "crds.install=false",
)


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_helm_lint_strict(run_helm: HelmRun, chart_dir: Path) -> None:
    proc = run_helm("lint", str(chart_dir), "--strict", "--kube-version", "1.36.3")
    assert "0 chart(s) failed" in proc.stdout


def test_defaults_render_every_component(render: Render) -> None:
    objects = render()
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "Deployment", "DaemonSet", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding", "PodDisruptionBudget", "Secret", "ServiceAccount"} <= kinds
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}, "toggles default to off"
    assert sorted(d["metadata"]["name"] for d in objects.kind("Deployment")) == [
        "kg-kubegang-extender", "kg-kubegang-operator", "kg-kubegang-scheduler"]
    operator = objects.one("Deployment", "-operator")
    assert operator["spec"]["replicas"] == 2
    assert "--leader-election=on" in _containers(operator)[0]["args"]
    scheduler = objects.one("Deployment", "-scheduler")
    assert _containers(scheduler)[0]["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"
    agent = objects.one("DaemonSet", "-agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert "runtimeClassName" not in pod
    crds = objects.kind("CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in crds} == {"gpujobs.kubegang.io", "gpuqueues.kubegang.io",
                                                     "gpunodes.kubegang.io"}
    assert all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in crds)


def test_every_toggle_on(render: Render) -> None:
    objects = render(*TOGGLES)
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"} <= kinds
    assert "CustomResourceDefinition" not in kinds
    assert not objects.kind("Secret"), "cert-manager writes the TLS Secrets, the chart must not"
    certs = {c["spec"]["secretName"] for c in objects.kind("Certificate")}
    mounted = {v["secret"]["secretName"] for w in objects.workloads()
               for v in w["spec"]["template"]["spec"].get("volumes", []) if "secret" in v}
    assert mounted <= certs, f"workloads mount Secrets no Certificate writes: {mounted - certs}"
    dashboard = objects.one("ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    monitor = objects.one("ServiceMonitor", "kg-kubegang")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    services = [s for s in objects.kind("Service")
                if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    components = {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in services}
    assert components == {"operator", "extender", "agent"}


def test_cert_manager_with_an_existing_issuer(render: Render) -> None:
    objects = render("tls.certManager.enabled=true", "tls.certManager.issuerRef.name=corp-ca",
                     "tls.certManager.issuerRef.kind=ClusterIssuer")
    assert not objects.kind("Issuer")
    assert {c["spec"]["issuerRef"]["name"] for c in objects.kind("Certificate")} == {"corp-ca"}


def test_components_can_be_turned_off(render: Render) -> None:
    objects = render("scheduler.enabled=false", "agent.enabled=false")
    assert not objects.kind("DaemonSet")
    assert not objects.kind("ValidatingAdmissionPolicy")
    assert {d["metadata"]["name"] for d in objects.kind("Deployment")} == {"kg-kubegang-extender",
                                                                           "kg-kubegang-operator"}
    assert not [o for o in objects if "scheduler" in o["metadata"]["name"]]


def test_operator_backfill_thresholds_follow_values(render: Render) -> None:
    defaults = _containers(render().one("Deployment", "-operator"))[0]["args"]
    assert "--backfill-reserve-after=172800" in defaults and "--backfill-planned-reserve-after=0" in defaults
    operator = render("operator.backfillReserveAfterSeconds=3600",
                      "operator.backfillPlannedReserveAfterSeconds=-1").one("Deployment", "-operator")
    args = _containers(operator)[0]["args"]
    assert "--backfill-reserve-after=3600" in args and "--backfill-planned-reserve-after=-1" in args


def test_operator_creation_concurrency_and_shared_gpu_resource_follow_values(render: Render) -> None:
    """docs/sharing.md options 1 and 2 need --shared-gpu-resource; empty (the default) passes no flag."""
    defaults = _containers(render().one("Deployment", "-operator"))[0]["args"]
    assert "--creation-concurrency=32" in defaults
    assert not [a for a in defaults if a.startswith("--shared-gpu-resource")]
    operator = render("operator.creationConcurrency=8",
                      "operator.sharedGpuResource=nvidia.com/gpu.shared").one("Deployment", "-operator")
    args = _containers(operator)[0]["args"]
    assert "--creation-concurrency=8" in args and "--creation-concurrency=32" not in args
    assert "--shared-gpu-resource=nvidia.com/gpu.shared" in args


@pytest.mark.parametrize(("sets", "expected"), [
    ((), {"backfill_reserve_after_seconds": 172800, "backfill_planned_reserve_after_seconds": 0,
          "creation_concurrency": 32, "shared_gpu_resource": None}),
    (("operator.creationConcurrency=8", "operator.sharedGpuResource=nvidia.com/gpu.shared"),
     {"creation_concurrency": 8, "shared_gpu_resource": "nvidia.com/gpu.shared"}),
])
def test_the_operator_accepts_every_flag_the_chart_passes(render: Render, sets: tuple[str, ...],
                                                          expected: dict[str, Any]) -> None:
    from kubegang.operator.__main__ import parser, settings_from_args

    args = _containers(render(*sets).one("Deployment", "-operator"))[0]["args"]
    settings = settings_from_args(parser().parse_args([a.replace("$(POD_NAME)", "pod-0") for a in args]))
    assert {name: getattr(settings, name) for name in expected} == expected


def test_operator_value_defaults_are_the_operators_own(chart_dir: Path) -> None:
    """An install that leaves the values alone runs the operator as its command line defaults it."""
    from kubegang.operator.__main__ import parser

    values = yaml.safe_load((chart_dir / "values.yaml").read_text())["operator"]
    flags = parser().parse_args(["--extender-address", "x:1"])
    assert values["creationConcurrency"] == flags.creation_concurrency
    assert values["sharedGpuResource"] == flags.shared_gpu_resource == ""


def test_agent_runtime_class_and_labels_switch(render: Render) -> None:
    agent = render("agent.runtimeClassName=nvidia", "agent.nvidiaLabels=false").one("DaemonSet", "-agent")
    assert agent["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "--no-nvidia-labels" in _containers(agent)[0]["args"]


@pytest.mark.parametrize(("setting", "path"), [
    ("foo=1", "at '': additional properties 'foo'"),
    ("operator.foo=1", "at '/operator': additional properties 'foo'"),
    ("agent.admissionPolicy.strict=true", "at '/agent/admissionPolicy': additional properties 'strict'"),
    ("operator.resources.limit.cpu=1", "at '/operator/resources': additional properties 'limit'"),
    ("extender.replicas=2", "at '/extender/replicas'"),
    ("operator.backfillReserveAfterSeconds=soon", "at '/operator/backfillReserveAfterSeconds'"),
    ("extender.topologyPreset=azure", "at '/extender/topologyPreset'"),
    ("operator.creationConcurrency=0", "at '/operator/creationConcurrency'"),
    ("operator.sharedGpuResource=gpu-shared", "at '/operator/sharedGpuResource'"),
])
def test_schema_refuses_bad_values(run_helm: HelmRun, chart_dir: Path, setting: str, path: str) -> None:
    proc = run_helm("template", "kg", str(chart_dir), "--kube-version", "1.36.3", "--set", setting, check=False)
    assert proc.returncode != 0
    assert path in proc.stderr, proc.stderr


def test_security_defaults_on_every_container(render: Render) -> None:
    for workload in render().workloads():
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not pod.get("hostNetwork") and not pod.get("hostPID"), name
        for c in _containers(workload):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert not sc.get("privileged"), (name, c["name"])
            assert "limits" in c["resources"] and "requests" in c["resources"], (name, c["name"])


def test_agent_exception_is_device_access_only(render: Render) -> None:
    """The agent's one exception: it sees every GPU (for NVML) and reads sysfs, without requesting GPUs."""
    agent = render().one("DaemonSet", "-agent")
    container = _containers(agent)[0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert not any("nvidia.com/gpu" in r for r in container["resources"].values())
    host_paths = [v for v in agent["spec"]["template"]["spec"]["volumes"] if "hostPath" in v]
    assert [v["hostPath"]["path"] for v in host_paths] == ["/sys/class/infiniband"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all(mounts[v["name"]]["readOnly"] for v in host_paths)


def test_rbac_is_least_privilege(render: Render) -> None:
    objects = render()
    roles = objects.kind("ClusterRole") + objects.kind("Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            where = f"{role['kind']} {role['metadata']['name']}: {rule}"
            resources = rule.get("resources", [])  # a nonResourceURLs rule (metrics-reader) has none
            assert "*" not in rule["verbs"] and "*" not in resources + rule.get("nonResourceURLs", []), where
            assert not {"secrets", "clusterroles", "roles", "rolebindings"} & set(resources), where
            if resources == ["leases"] and set(rule["verbs"]) & {"update", "patch"}:
                assert rule.get("resourceNames"), f"lease updates must name the lease: {where}"
    agent = objects.one("ClusterRole", "-agent")
    # The agent reads, creates and patches; it never deletes anything (its own GPUNode is recreated,
    # never removed, and the admission policy pins every write to its own node).
    assert all(set(r["verbs"]) <= {"get", "list", "watch", "create", "patch", "update"} for r in agent["rules"])
    bindings = objects.kind("ClusterRoleBinding") + objects.kind("RoleBinding")
    accounts = {o["metadata"]["name"] for o in objects.kind("ServiceAccount")}
    for binding in bindings:
        for subject in binding["subjects"]:
            assert subject["name"] in accounts, f"{binding['metadata']['name']} binds unknown {subject['name']}"


def test_pod_disruption_budgets_match_their_pods(render: Render) -> None:
    objects = render()
    deployments = {d["metadata"]["name"]: d for d in objects.kind("Deployment")}
    pdbs = objects.kind("PodDisruptionBudget")
    assert {p["metadata"]["name"] for p in pdbs} == set(deployments)
    for pdb in pdbs:
        selector = pdb["spec"]["selector"]["matchLabels"]
        labels = deployments[pdb["metadata"]["name"]]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
        replicas = deployments[pdb["metadata"]["name"]]["spec"]["replicas"]
        assert pdb["spec"].get("minAvailable", 0) < replicas, "a PDB must not block every voluntary eviction"


def test_images_follow_values(render: Render) -> None:
    objects = render("image.repository=registry.example/kg", "image.tag=1.2.3")
    images = {c["image"] for w in objects.workloads() for c in _containers(w)}
    assert images == {"registry.example/kg:1.2.3", "registry.k8s.io/kube-scheduler:v1.36.3"}


def test_image_pull_secrets_reach_every_workload_the_chart_runs(render: Render) -> None:
    """README: "Secrets for pulling the images" — the scheduler's mirrored image too."""
    objects = render("imagePullSecrets={regcred}")
    workloads = [*objects.kind("Deployment"), *objects.kind("DaemonSet")]
    assert len(workloads) == 4
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod.get("imagePullSecrets") == [{"name": "regcred"}], workload["metadata"]["name"]


@pytest.mark.parametrize(("sets", "named"), [
    (("operator.leaderElection=false",), "operator.leaderElection=false with operator.replicas=2"),
    (("scheduler.leaderElection=false",), "scheduler.leaderElection=false with scheduler.replicas=2"),
    (("agent.maxUnavailable=0",), "agent.maxUnavailable must be at least 1"),
])
def test_values_that_would_render_a_broken_install_are_refused_by_name(
        run_helm: Any, chart_dir: Any, sets: tuple[str, ...], named: str) -> None:
    args = [arg for s in sets for arg in ("--set", s)]
    proc = run_helm("template", "kg", str(chart_dir), *args, check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr


def test_one_replica_without_leader_election_renders(render: Render) -> None:
    objects = render("operator.leaderElection=false", "operator.replicas=1")
    operator = objects.one("Deployment", "-operator")
    assert operator["spec"]["replicas"] == 1 and "--leader-election=off" in _containers(operator)[0]["args"]


# What docs/install.md names, for the release `kubegang` it installs: (kind, name).
INSTALL_MD_NAMES = [
    ("Deployment", "kubegang-operator"),
    ("ClusterRole", "kubegang-metrics-reader"),
    ("ClusterRole", "kubegang-metrics-auth"),
    ("Secret", "kubegang-metrics-tls"),
    ("MutatingAdmissionPolicy", "kubegang-gpu-routing"),
    ("MutatingAdmissionPolicyBinding", "kubegang-gpu-routing"),
    ("PriorityClass", "kubegang-critical"),
    ("PriorityClass", "kubegang-node-critical"),
    ("ClusterRole", "kubegang-edit"),
    ("ClusterRole", "kubegang-view"),
]


def test_the_object_names_install_md_gives_are_the_ones_its_release_gets(render: Render, chart_dir: Path) -> None:
    """kubegang.fullname drops the duplicate: release `kubegang` names its objects kubegang-*."""
    doc = (chart_dir.parents[1] / "docs" / "install.md").read_text()
    assert "<release>-kubegang-" not in doc, "install.md names objects by a rule the chart does not follow"
    rendered = {(o["kind"], o["metadata"]["name"]) for o in render(release="kubegang")}
    for kind, name in INSTALL_MD_NAMES:
        assert f"`{name}`" in doc, f"install.md no longer names {name}: update INSTALL_MD_NAMES"
        assert (kind, name) in rendered, f"install.md names {kind} {name}, which release kubegang does not have"


@pytest.mark.parametrize(("release", "sets", "fullname"), [
    ("kubegang", (), "kubegang"),
    ("my-kubegang", (), "my-kubegang"),
    ("prod", (), "prod-kubegang"),
    ("prod", ("fullnameOverride=gpu",), "gpu"),
])
def test_the_full_name_rule_install_md_states(render: Render, release: str, sets: tuple[str, ...],
                                              fullname: str) -> None:
    """The release name when it contains "kubegang", else <release>-kubegang; fullnameOverride replaces it."""
    names = {o["metadata"]["name"] for o in render(*sets, release=release).kind("ClusterRole")}
    assert f"{fullname}-metrics-reader" in names, names
