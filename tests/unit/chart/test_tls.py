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
