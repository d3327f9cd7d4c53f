"""The certificates the chart generates work for kubegang's mTLS: one CA, a server certificate for the
extender's Service name, a client certificate kube-scheduler and the operator present, and a real
handshake through the same ssl contexts the extender and its clients use."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from kubegang.tls import client_ssl_context, server_ssl_context

Render = Any  # conftest.Render


def _secret_files(secret: dict[str, Any], folder: Path) -> dict[str, Path]:
    folder.mkdir()
    paths = {}
    for key, value in secret["data"].items():
        paths[key] = folder / key
        paths[key].write_bytes(base64.b64decode(value))
    return paths


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_generated_certificates_form_one_pki(render: Render, tmp_path: Path) -> None:
    objects = render(namespace="gpu-system", release="prod")
    server = _secret_files(objects.one("Secret", "-extender-tls"), tmp_path / "server")
    client = _secret_files(objects.one("Secret", "-client-tls"), tmp_path / "client")
    assert set(server) == set(client) == {"ca.crt", "tls.crt", "tls.key"}
    assert server["ca.crt"].read_bytes() == client["ca.crt"].read_bytes()
    ca = _cert(server["ca.crt"])
    for leaf in (_cert(server["tls.crt"]), _cert(client["tls.crt"])):
        leaf.verify_directly_issued_by(ca)
    names = _cert(server["tls.crt"]).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "prod-kubegang-extender.gpu-system.svc" in names.get_values_for_type(x509.DNSName)
    usages = _cert(client["tls.crt"]).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages


def test_generated_certificates_complete_an_mtls_handshake(render: Render, tmp_path: Path) -> None:
    objects = render(namespace="gpu-system", release="prod")
    server = _secret_files(objects.one("Secret", "-extender-tls"), tmp_path / "server")
    client = _secret_files(objects.one("Secret", "-client-tls"), tmp_path / "client")
    server_ctx = server_ssl_context(server["tls.crt"], server["tls.key"], server["ca.crt"])
    client_ctx = client_ssl_context(client["ca.crt"], client["tls.crt"], client["tls.key"])
    seen: dict[str, Any] = {}

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, client_ctx.wrap_socket(
                raw, server_hostname="prod-kubegang-extender.gpu-system.svc") as tls:
            assert tls.recv(2) == b"ok"
        thread.join(10)
    subject = dict(item[0] for item in seen["peer"]["subject"])
    assert subject["commonName"] == "prod-kubegang-client"


def test_a_client_without_the_charts_certificate_is_refused(render: Render, tmp_path: Path) -> None:
    server = _secret_files(render().one("Secret", "-extender-tls"), tmp_path / "server")
    other = _secret_files(render().one("Secret", "-client-tls"), tmp_path / "other")  # a second, unrelated CA
    server_ctx = server_ssl_context(server["tls.crt"], server["tls.key"], server["ca.crt"])
    client_ctx = client_ssl_context(server["ca.crt"], other["tls.crt"], other["tls.key"])
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True):
                    pass
            except ssl.SSLError as exc:
                errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            try:
                with client_ctx.wrap_socket(raw, server_hostname="kg-kubegang-extender.kubegang-system.svc") as tls:
                    tls.recv(1)
            except (ssl.SSLError, ConnectionError):
                pass
        thread.join(10)
    assert errors, "the server accepted a client certificate from another CA"


def _mounted_tls(objects: Any) -> dict[str, set[str]]:
    """Secret name → the workloads that mount it."""
    out: dict[str, set[str]] = {}
    for workload in objects.workloads():
        for volume in workload["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in volume and volume["secret"]["secretName"].endswith("-tls"):
                out.setdefault(volume["secret"]["secretName"], set()).add(workload["metadata"]["name"])
    return out


def test_certificate_mounts_are_whole_secret_volumes_so_renewals_reach_the_running_pods(render: Render) -> None:
    """kubelet rewrites a mounted Secret in place, except under subPath; the processes reload what it writes."""
    for objects in (render(), render("tls.certManager.enabled=true")):
        for workload in objects.workloads():
            spec = workload["spec"]["template"]["spec"]
            tls_volumes = {v["name"] for v in spec.get("volumes", [])
                           if "secret" in v and v["secret"]["secretName"].endswith("-tls")}
            for container in spec["containers"]:
                for mount in container.get("volumeMounts", []):
                    if mount["name"] in tls_volumes:
                        assert "subPath" not in mount, f"{workload['metadata']['name']}: subPath mounts never update"
        assert set(_mounted_tls(objects)) == {"kg-kubegang-extender-tls", "kg-kubegang-client-tls",
                                              "kg-kubegang-metrics-tls"}


def test_helm_template_makes_a_new_ca_on_every_render_unless_told_not_to_generate(render: Render) -> None:
    """Why GitOps installs set tls.generate=false: `lookup` sees no cluster under `helm template`."""
    first, second = render(), render()
    ca = [r.one("Secret", "-extender-tls")["data"]["ca.crt"] for r in (first, second)]
    assert ca[0] != ca[1]
    gitops = render("tls.generate=false")
    assert gitops == render("tls.generate=false"), "a GitOps render must be the same every time"
    assert not [s for s in gitops.kind("Secret") if s["metadata"]["name"].endswith("-tls")]
    assert not gitops.kind("Certificate")
    assert _mounted_tls(gitops) == _mounted_tls(first), "the workloads mount the Secrets created once by hand"


def test_the_secrets_for_a_gitops_install_come_from_the_charts_own_template(run_helm: Any, chart_dir: Path,
                                                                           tmp_path: Path) -> None:
    """docs/install.md: render templates/tls.yaml once with the release's name and namespace and apply it."""
    import yaml

    out = run_helm("template", "kubegang", str(chart_dir), "--namespace", "kubegang-system",
                   "--show-only", "templates/tls.yaml").stdout
    secrets = [d for d in yaml.safe_load_all(out) if d]
    assert {s["metadata"]["name"] for s in secrets} == {"kubegang-extender-tls", "kubegang-client-tls"}
    server = _secret_files(next(s for s in secrets if s["metadata"]["name"] == "kubegang-extender-tls"),
                           tmp_path / "server")
    names = _cert(server["tls.crt"]).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubegang-extender.kubegang-system.svc" in names.get_values_for_type(x509.DNSName)


def test_cert_manager_ca_keeps_its_key_and_outlives_the_leaves(render: Render) -> None:
    """kube-scheduler loads its CA once: a renewed CA must keep its key (docs/install.md)."""
    certs = {c["metadata"]["name"]: c["spec"] for c in render("tls.certManager.enabled=true").kind("Certificate")}
    ca = certs["kg-kubegang-ca"]
    assert ca["isCA"] is True
    assert ca["privateKey"]["rotationPolicy"] == "Never"
    assert ca["duration"] == "87600h"
    leaves = [spec for name, spec in certs.items() if name != "kg-kubegang-ca"]
    assert len(leaves) == 3 and all(spec["duration"] == "2160h" for spec in leaves)  # extender, client, metrics


def _tls_checksums(objects: Any) -> dict[str, str]:
    """Deployment name → its pod template's checksum/tls (KeyError for one without it)."""
    return {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]["checksum/tls"]
            for d in objects.kind("Deployment")}


def test_every_workload_that_mounts_the_mtls_secrets_rolls_when_they_change(render: Render) -> None:
    """docs/install.md: regenerated certificates change `checksum/tls` and the workloads roll; kube-scheduler
    reads its CA only at start, so it must roll too. Two renders under `helm template` make two CAs."""
    first, second = render(), render()
    cas = [r.one("Secret", "-client-tls")["data"]["ca.crt"] for r in (first, second)]
    assert cas[0] != cas[1]
    before, after = _tls_checksums(first), _tls_checksums(second)
    assert set(before) == {"kg-kubegang-extender", "kg-kubegang-operator", "kg-kubegang-scheduler"}
    mtls = _mounted_tls(first)
    assert mtls["kg-kubegang-extender-tls"] | mtls["kg-kubegang-client-tls"] == set(before)
    for name in before:
        assert before[name] != after[name], f"{name} keeps its pods when the certificates change"
    # Where the material renders the same every time, the three hash the same input and nothing rolls.
    for sets in (("tls.generate=false",), ("tls.certManager.enabled=true",)):
        stable = _tls_checksums(render(*sets))
        assert set(stable) == set(before) and len(set(stable.values())) == 1, (sets, stable)
        assert stable == _tls_checksums(render(*sets)), f"{sets}: unchanged TLS material must not roll anything"
