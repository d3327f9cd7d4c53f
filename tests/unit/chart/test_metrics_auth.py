"""The chart puts every /metrics behind HTTPS and the token check by default (metricsAuth.enabled): the flags,
the serving certificate each process mounts, the RBAC for the reviews and for scrapers, HTTPS probes, and a
ServiceMonitor that scrapes with a token and verifies the certificate; metricsAuth.enabled=false undoes it."""

from __future__ import annotations

import base64
from typing import Any

from cryptography import x509

Render = Any  # conftest.Render
COMPONENTS = ("operator", "extender", "agent")


def _container(objects: Any, component: str) -> dict[str, Any]:
    kind = "DaemonSet" if component == "agent" else "Deployment"
    workload = objects.one(kind, f"-{component}")
    spec = workload["spec"]["template"]["spec"]
    container: dict[str, Any] = spec["containers"][0]
    container["_volumes"] = {v["name"]: v for v in spec["volumes"]}
    return container


def test_every_process_serves_metrics_with_auth_on_and_the_chart_certificate(render: Render) -> None:
    objects = render()
    secret = objects.one("Secret", "-metrics-tls")
    for component in COMPONENTS:
        container = _container(objects, component)
        args = container["args"]
        assert "--metrics-auth=on" in args, component
        assert "--metrics-tls-cert=/etc/kubegang/metrics-tls/tls.crt" in args, component
        assert "--metrics-tls-key=/etc/kubegang/metrics-tls/tls.key" in args, component
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["metrics-tls"]["readOnly"] is True
        assert container["_volumes"]["metrics-tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    # The certificate names the one server name the ServiceMonitor verifies, and chains to its ca.crt.
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["kg-kubegang-metrics"]
    cert.verify_directly_issued_by(ca)
    # Not the extender's mTLS CA: a metrics key on a GPU node cannot pose as the placement authority.
    extender_ca = base64.b64decode(objects.one("Secret", "-extender-tls")["data"]["ca.crt"])
    assert extender_ca != base64.b64decode(secret["data"]["ca.crt"])


def test_probes_speak_https_and_need_no_token(render: Render) -> None:
    objects = render()
    for component in ("extender", "agent"):
        container = _container(objects, component)
        for probe in ("livenessProbe", "readinessProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["scheme"] == "HTTPS", (component, probe)
                assert "httpHeaders" not in container[probe]["httpGet"]


def test_rbac_lets_the_processes_review_and_scrapers_read_metrics_only(render: Render) -> None:
    objects = render("serviceMonitor.enabled=true", "metricsAuth.readers[0].kind=ServiceAccount",
                     "metricsAuth.readers[0].name=prometheus", "metricsAuth.readers[0].namespace=monitoring")
    auth = objects.one("ClusterRole", "-metrics-auth")
    assert sorted((r["apiGroups"][0], r["resources"][0], r["verbs"][0]) for r in auth["rules"]) == [
        ("authentication.k8s.io", "tokenreviews", "create"), ("authorization.k8s.io", "subjectaccessreviews", "create")]
    bound = {s["name"] for s in objects.one("ClusterRoleBinding", "-metrics-auth")["subjects"]}
    accounts = {sa["metadata"]["name"] for sa in objects.kind("ServiceAccount")}
    assert bound == {a for a in accounts if a.endswith(("-operator", "-extender")) or a == "kubegang-agent"}
    reader = objects.one("ClusterRole", "-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]  # not /debug/snapshot
    binding = objects.one("ClusterRoleBinding", "-metrics-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    endpoint = objects.one("ServiceMonitor", "kg-kubegang")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {"serverName": "kg-kubegang-metrics",
                                     "ca": {"secret": {"name": "kg-kubegang-metrics-tls", "key": "ca.crt"}}}
    assert "insecureSkipVerify" not in endpoint["tlsConfig"]


def test_without_readers_no_binding_is_made(render: Render) -> None:
    assert not [b for b in render().kind("ClusterRoleBinding") if b["metadata"]["name"].endswith("-metrics-reader")]


def test_cert_manager_issues_the_metrics_certificate(render: Render) -> None:
    objects = render("tls.certManager.enabled=true")
    cert = objects.one("Certificate", "-metrics-tls")
    assert cert["spec"]["dnsNames"] == ["kg-kubegang-metrics"]
    assert cert["spec"]["issuerRef"]["name"] == "kg-kubegang-ca"
    assert not [s for s in objects.kind("Secret") if s["metadata"]["name"].endswith("-metrics-tls")]


def test_auth_off_is_plain_http_as_before(render: Render) -> None:
    objects = render("metricsAuth.enabled=false", "serviceMonitor.enabled=true")
    for component in COMPONENTS:
        container = _container(objects, component)
        assert "--metrics-auth=off" in container["args"]
        assert "metrics-tls" not in container["_volumes"]
    gone = ("-metrics-tls", "-metrics-auth", "-metrics-reader")
    assert not [o for o in objects if o["metadata"]["name"].endswith(gone)]
    endpoint = objects.one("ServiceMonitor", "kg-kubegang")["spec"]["endpoints"][0]
    assert "scheme" not in endpoint and "tlsConfig" not in endpoint
    assert "scheme" not in _container(objects, "extender")["readinessProbe"]["httpGet"]


def test_the_by_hand_scrape_in_docs_metrics_names_the_objects_of_the_documented_release(render: Render) -> None:
    """docs/metrics.md's "By hand" commands are copied by users as they stand: the Secret they read and
    the server name they resolve must be the ones the chart makes for docs/install.md's release
    (``kubegang`` in ``kubegang-system``). They said ``kubegang-kubegang-...``, which no release has."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    secret_cmd = re.search(r"kubectl get secret -n (\S+) (\S+) ", doc)
    resolve = re.search(r"--resolve ([^:\s]+):(\d+):\$POD_IP", doc)
    url = re.search(r"https://([^:/\s]+):(\d+)/metrics", doc)
    assert secret_cmd and resolve and url, "docs/metrics.md no longer has the by-hand commands this test reads"
    namespace, secret_name = secret_cmd.groups()
    objects = render(namespace=namespace, release="kubegang")
    secret = objects.one("Secret", "-metrics-tls")
    assert secret["metadata"]["name"] == secret_name
    assert secret["metadata"]["namespace"] == namespace
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert resolve.group(1) == url.group(1) and resolve.group(1) in names
    ports = {p["containerPort"] for component in COMPONENTS for p in _container(objects, component).get("ports", [])
             if p.get("name") == "metrics"}
    assert int(resolve.group(2)) == int(url.group(2)) and int(url.group(2)) in ports, ports
