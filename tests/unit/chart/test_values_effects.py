"""Values of the README's reference that change a rendered field: each is rendered with a value other than
its default, and the test finds that value where the chart must put it (and the default no longer there)."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
import yaml
from cryptography import x509

Render = Any  # conftest.Render: render(*set_args) -> Rendered
Rendered = Any  # conftest.Rendered

ANNOTATION = "kubegang.test/owner"
ANNOTATION_SET_KEY = ANNOTATION.replace(".", "\\.")  # --set splits keys at unescaped dots
COMPONENTS = ("operator", "extender", "scheduler", "agent")
# One render with a non-default value for each value below (and the toggles that make their objects exist).
CUSTOM = (
    "operator.apiQps=35",
    "operator.apiBurst=75",
    "operator.watchNamespaces={team-a,team-b}",
    "agent.pollIntervalSeconds=42",
    "scheduler.verbosity=7",
    "serviceMonitor.enabled=true",
    "serviceMonitor.interval=45s",
    "serviceMonitor.scrapeTimeout=7s",
    "serviceMonitor.labels.release=kube-prom",
    "prometheusRule.enabled=true",
    "prometheusRule.labels.release=kube-prom-rules",
    "dashboard.enabled=true",
    "dashboard.annotations.grafana_folder=GPUs",
    "agent.infinibandHostPath=/run/host/sys/class/infiniband",
    "extender.httpsPort=18443",
    "extender.grpcPort=19443",
    "networkPolicy.enabled=true",
    *(f"{c}.podAnnotations.{ANNOTATION_SET_KEY}={c}-team" for c in COMPONENTS),
)


@pytest.fixture(scope="module")
def defaults(render: Render) -> Rendered:
    return render()


@pytest.fixture(scope="module")
def custom(render: Render) -> Rendered:
    return render(*CUSTOM)


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, workload["metadata"]["name"]
    return containers[0]


def _args(objects: Rendered, kind: str, suffix: str) -> list[str]:
    container = _container(objects.one(kind, suffix))
    args: list[str] = container.get("args", container.get("command"))
    return args


def _operator_settings(objects: Rendered) -> Any:
    from kubegang.operator.__main__ import parser, settings_from_args

    args = [a.replace("$(POD_NAME)", "pod-0") for a in _args(objects, "Deployment", "-operator")]
    return settings_from_args(parser().parse_args(args))


def test_operator_api_rate_limit_follows_values(defaults: Rendered, custom: Rendered) -> None:
    args = _args(custom, "Deployment", "-operator")
    assert "--api-qps=35" in args and "--api-burst=75" in args
    assert "--api-qps=200" in _args(defaults, "Deployment", "-operator")
    assert "--api-burst=400" in _args(defaults, "Deployment", "-operator")
    settings = _operator_settings(custom)
    assert (settings.api_qps, settings.api_burst) == (35.0, 75)


def test_operator_watches_one_namespace_per_entry_and_all_when_empty(defaults: Rendered, custom: Rendered) -> None:
    args = _args(custom, "Deployment", "-operator")
    assert [a for a in args if a.startswith("--watch-namespace")] == ["--watch-namespace=team-a",
                                                                       "--watch-namespace=team-b"]
    assert _operator_settings(custom).watch_namespaces == ("team-a", "team-b")
    assert not [a for a in _args(defaults, "Deployment", "-operator") if a.startswith("--watch-namespace")]
    assert _operator_settings(defaults).watch_namespaces == ()


def test_agent_poll_interval_follows_values(defaults: Rendered, custom: Rendered) -> None:
    from kubegang.agent.__main__ import _parser

    args = _args(custom, "DaemonSet", "-agent")
    assert "--poll-interval=42" in args
    assert "--poll-interval=10" in _args(defaults, "DaemonSet", "-agent")
    assert _parser().parse_args(args).poll_interval == 42.0


def test_scheduler_verbosity_follows_values(defaults: Rendered, custom: Rendered) -> None:
    assert [a for a in _args(custom, "Deployment", "-scheduler") if a.startswith("--v=")] == ["--v=7"]
    assert [a for a in _args(defaults, "Deployment", "-scheduler") if a.startswith("--v=")] == ["--v=2"]


def test_agent_reads_infiniband_from_the_host_path_in_values(defaults: Rendered, custom: Rendered) -> None:
    for objects, path in ((custom, "/run/host/sys/class/infiniband"), (defaults, "/sys/class/infiniband")):
        agent = objects.one("DaemonSet", "-agent")
        volumes = {v["name"]: v for v in agent["spec"]["template"]["spec"]["volumes"]}
        assert volumes["infiniband"]["hostPath"]["path"] == path
        container = _container(agent)
        mount = next(m for m in container["volumeMounts"] if m["name"] == "infiniband")
        assert mount["readOnly"] is True
        assert f"--infiniband-root={mount['mountPath']}" in container["args"], "the agent reads what is mounted"


def test_extender_ports_reach_every_place_that_names_them(custom: Rendered) -> None:
    extender = custom.one("Deployment", "-extender")
    container = _container(extender)
    assert "--https-port=18443" in container["args"] and "--grpc-port=19443" in container["args"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}.items() >= {"https": 18443,
                                                                                  "grpc": 19443}.items()
    service = custom.one("Service", "-extender")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}.items() >= {"https": 18443,
                                                                               "grpc": 19443}.items()
    host = "kg-kubegang-extender.kubegang-system.svc"
    config = yaml.safe_load(custom.one("ConfigMap", "-scheduler")["data"]["config.yaml"])
    assert [e["urlPrefix"] for e in config["extenders"]] == [f"https://{host}:18443"]
    assert f"--extender-address={host}:19443" in _args(custom, "Deployment", "-operator")
    policy = custom.one("NetworkPolicy", "-extender")
    by_port = {r["ports"][0]["port"]: r for r in policy["spec"]["ingress"]}
    assert set(by_port) == {18443, 19443, 8080}, "the old ports are gone, the new ones open"
    labels = {c: custom.one("Deployment", f"-{c}")["spec"]["template"]["metadata"]["labels"]
              for c in ("scheduler", "operator")}
    assert by_port[18443]["from"][0]["podSelector"]["matchLabels"].items() <= labels["scheduler"].items()
    assert by_port[19443]["from"][0]["podSelector"]["matchLabels"].items() <= labels["operator"].items()


def test_service_monitor_interval_timeout_and_labels_follow_values(custom: Rendered, render: Render) -> None:
    monitor = custom.one("ServiceMonitor", "kg-kubegang")
    assert monitor["metadata"]["labels"]["release"] == "kube-prom"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "kg", "added to the chart's labels"
    assert [(e["interval"], e["scrapeTimeout"]) for e in monitor["spec"]["endpoints"]] == [("45s", "7s")]
    default = render("serviceMonitor.enabled=true").one("ServiceMonitor", "kg-kubegang")
    assert [(e["interval"], e["scrapeTimeout"]) for e in default["spec"]["endpoints"]] == [("30s", "10s")]
    assert "release" not in default["metadata"]["labels"]


def test_prometheus_rule_labels_follow_values(custom: Rendered) -> None:
    labels = custom.one("PrometheusRule", "kg-kubegang")["metadata"]["labels"]
    assert labels["release"] == "kube-prom-rules"
    assert labels["app.kubernetes.io/instance"] == "kg"
    assert custom.one("ServiceMonitor", "kg-kubegang")["metadata"]["labels"]["release"] == "kube-prom", "each its own"


def test_dashboard_annotations_follow_values(custom: Rendered, render: Render) -> None:
    assert custom.one("ConfigMap", "-dashboard")["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert "annotations" not in render("dashboard.enabled=true").one("ConfigMap", "-dashboard")["metadata"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_pod_annotations_follow_values(defaults: Rendered, custom: Rendered, component: str) -> None:
    kind = "DaemonSet" if component == "agent" else "Deployment"
    annotations = custom.one(kind, f"-{component}")["spec"]["template"]["metadata"]["annotations"]
    assert annotations[ANNOTATION] == f"{component}-team"
    assert [k for k in annotations if k.startswith("kubegang.test/")] == [ANNOTATION], "only its own"
    default = defaults.one(kind, f"-{component}")["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.keys() - {ANNOTATION} == default.keys(), "the chart's own (checksums) stay"


def test_agent_admission_policy_can_be_turned_off(defaults: Rendered, render: Render) -> None:
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert all(len(defaults.kind(k)) == 1 for k in kinds)
    objects = render("agent.admissionPolicy.enabled=false")
    assert not [o for k in kinds for o in objects.kind(k)]
    assert objects.one("DaemonSet", "-agent"), "only the policy goes, not the agent"


@pytest.mark.parametrize("component", ("operator", "extender", "scheduler"))
def test_each_pdb_can_be_turned_off(defaults: Rendered, render: Render, component: str) -> None:
    names = {p["metadata"]["name"] for p in defaults.kind("PodDisruptionBudget")}
    assert f"kg-kubegang-{component}" in names
    objects = render(f"{component}.pdb.enabled=false")
    assert {p["metadata"]["name"] for p in objects.kind("PodDisruptionBudget")} == names - {f"kg-kubegang-{component}"}
    assert objects.one("Deployment", f"-{component}"), "only the PDB goes, not the workload"


@pytest.mark.parametrize(("sets", "days"), [(("tls.validityDays=30",), 30), ((), 3650)])
def test_generated_certificates_last_validity_days(render: Render, sets: tuple[str, ...], days: int) -> None:
    secrets = [s for s in render(*sets).kind("Secret") if s.get("type") == "kubernetes.io/tls"]
    names = sorted(s["metadata"]["name"] for s in secrets)
    assert names == ["kg-kubegang-client-tls", "kg-kubegang-extender-tls", "kg-kubegang-metrics-tls"]
    for secret in secrets:
        for key in ("ca.crt", "tls.crt"):
            cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))
            lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
            assert lifetime == datetime.timedelta(days=days), (secret["metadata"]["name"], key, lifetime)


def test_decimal_numbers_come_through_set_json_not_set(run_helm: Any, chart_dir: Any) -> None:
    """The README's values reference: ``--set`` passes ``37.5`` as a string, which the schema refuses
    naming the value; ``--set-json`` passes the number, which reaches the operator's flag."""
    base = ["template", "kg", str(chart_dir), "--namespace", "kubegang-system"]
    refused = run_helm(*base, "--set", "operator.apiQps=37.5", check=False)
    assert refused.returncode != 0 and "apiQps" in refused.stderr, refused.stderr[-2000:]

    out = run_helm(*base, "--set-json", "operator.apiQps=37.5", "--set-json", "agent.pollIntervalSeconds=2.5").stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    args = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0].get("args", [])
            for d in objects if d["kind"] in ("Deployment", "DaemonSet")}
    assert "--api-qps=37.5" in args["kg-kubegang-operator"], args["kg-kubegang-operator"]
    assert "--poll-interval=2.5" in args["kg-kubegang-agent"], args["kg-kubegang-agent"]
