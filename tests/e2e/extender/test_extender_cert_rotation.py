"""The running extender's certificate renewed in place, as cert-manager and kubelet would: no restart, the
real kube-scheduler keeps scheduling GPU pods through it the whole time, and new connections get the new
certificate.

The files are rewritten one after the other, not atomically, so the extender also meets the half-renewed
state (a new certificate with the old key) and must keep the old pair until both files match.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from cryptography import x509

from kubegang.tls import DEFAULT_SERVER_NAMES, KeyPair, client_ssl_context, make_ca, make_leaf

from .. import processes

PODS = 20


def _serial(port: int, tls_dir: Path) -> int:
    """Serial number of the certificate a new connection to the extender's verbs port gets."""
    ctx = client_ssl_context(tls_dir / "ca.crt", tls_dir / "client.crt", tls_dir / "client.key")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _reloads(port: int, outcome: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(f'kubegang_extender_tls_reloads_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_renewed_certificate_is_served_without_restart_while_pods_keep_scheduling(
    extender: Any, namespace: str
) -> None:
    ports, tls_dir = extender.kubegang.ports, extender.kubegang.tls_dir
    pid = extender.kubegang.pid("kubegang-extender")
    old = _serial(ports["extender_https"], tls_dir)
    reloaded, refused = (_reloads(ports["extender_metrics"], o) for o in ("reloaded", "refused"))
    created: list[str] = []
    failures: list[BaseException] = []

    def keep_creating() -> None:  # kube-scheduler calls filter/prioritize over mTLS for each
        for i in range(PODS):
            try:
                extender.create_all([extender.gpu_pod(f"rot-{i}", namespace, 1)])
                created.append(f"rot-{i}")
            except BaseException as exc:
                failures.append(exc)
            time.sleep(1.0)

    creator = threading.Thread(target=keep_creating)
    creator.start()
    try:
        time.sleep(2.0)
        ca = KeyPair(cert_pem=(tls_dir / "ca.crt").read_bytes(), key_pem=(tls_dir / "ca.key").read_bytes())
        renewed = make_leaf(ca, "kubegang-extender", server_names=DEFAULT_SERVER_NAMES)
        _write(tls_dir / "server.crt", renewed.cert_pem)
        # Longer than the extender's look interval (10 s): it sees a certificate without its key, refuses
        # it and keeps serving the old pair.
        time.sleep(11)
        assert _serial(ports["extender_https"], tls_dir) == old
        _write(tls_dir / "server.key", renewed.key_pem)
        new = x509.load_pem_x509_certificate(renewed.cert_pem).serial_number
        extender.cluster.wait_for("the extender to serve the renewed certificate",
                                  lambda: _serial(ports["extender_https"], tls_dir) == new, timeout=40)
    finally:
        creator.join(60)
    assert not failures, failures
    assert old != new
    assert _reloads(ports["extender_metrics"], "reloaded") >= reloaded + 1
    assert _reloads(ports["extender_metrics"], "refused") >= refused + 1, "the half-renewed files were loaded"
    assert extender.kubegang.pid("kubegang-extender") == pid, "renewed without a restart"

    def bound() -> set[str]:
        return {p["metadata"]["name"] for p in extender.pods(namespace) if p["spec"].get("nodeName")}

    extender.cluster.wait_for(f"all {PODS} GPU pods bound through the extender",
                              lambda: bound() == set(created), timeout=90, interval=1)
    assert len(created) == PODS


def _handshake_ok(port: int, ca: Path, cert: Path, key: Path) -> bool:
    """A full mTLS exchange with the verbs listener (the server's verdict on the client arrives after the
    handshake under TLS 1.3, so a request is sent and its answer read)."""
    ctx = client_ssl_context(ca, cert, key)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"GET /debug/snapshot HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            return tls.recv(12).startswith(b"HTTP/1.1 200")
    except (OSError, ssl.SSLError):
        return False


def test_kube_scheduler_presents_its_renewed_client_certificate_without_a_restart(
    extender: Any, namespace: str, tmp_path: Path
) -> None:
    """docs/install.md: kube-scheduler's client-go re-reads the extender client certificate and key for new
    connections. Proven by making its old certificate useless: the extender is told to trust only a new CA
    (--client-ca), which signed the scheduler's renewed certificate; the server certificate stays, since
    kube-scheduler keeps the CA it loaded at start. The extender is restarted to close the scheduler's
    open connection; kube-scheduler itself is not."""
    ports, tls_dir, cluster_dir = extender.kubegang.ports, extender.kubegang.tls_dir, extender.cluster_dir
    scheduler_pid = processes.pid_of(cluster_dir, "kube-scheduler")
    saved = {name: (tls_dir / name).read_bytes() for name in ("ca.crt", "client.crt", "client.key")}
    old_ca, old_client, old_key = tmp_path / "old-ca.crt", tmp_path / "old-client.crt", tmp_path / "old-client.key"
    for path, name in ((old_ca, "ca.crt"), (old_client, "client.crt"), (old_key, "client.key")):
        path.write_bytes(saved[name])
    new_ca = make_ca("kubegang-client-ca-2")
    renewed = make_leaf(new_ca, "kube-scheduler", client=True)
    new_client, new_key = tmp_path / "new-client.crt", tmp_path / "new-client.key"
    new_client.write_bytes(renewed.cert_pem)
    new_key.write_bytes(renewed.key_pem)
    https = ports["extender_https"]
    try:
        _write(tls_dir / "client.crt", renewed.cert_pem)
        _write(tls_dir / "client.key", renewed.key_pem)
        _write(tls_dir / "ca.crt", new_ca.cert_pem)
        extender.cluster.wait_for("the extender to trust only the new client CA",
                                  lambda: _handshake_ok(https, old_ca, new_client, new_key), timeout=40)
        assert not _handshake_ok(https, old_ca, old_client, old_key), "the old client certificate still passes"
        extender.start(extender.kill())  # closes kube-scheduler's open connection to the extender
        extender.create_all([extender.gpu_pod(f"renewed-{i}", namespace, 1) for i in range(3)])
        extender.cluster.wait_for(
            "kube-scheduler to reach the extender with its renewed certificate",
            lambda: sum(1 for p in extender.pods(namespace) if p["spec"].get("nodeName")) == 3,
            timeout=90, interval=1)
        assert processes.pid_of(cluster_dir, "kube-scheduler") == scheduler_pid, "kube-scheduler was restarted"
    finally:
        for name, data in saved.items():
            _write(tls_dir / name, data)
        extender.cluster.wait_for("the extender to trust the session's CA again",
                                  lambda: _handshake_ok(https, old_ca, old_client, old_key), timeout=40)
