"""Certificates rotate without a restart: both mTLS listeners pick up renewed files for new connections,
no request fails while they do, and files that do not load never replace the last good ones.

The files are published the way kubelet updates a mounted Secret (a new timestamped folder, then one
rename of the ``..data`` link), and the reloader runs on its own timer, as in the extender process.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._grpc import SERVICE_NAME, GrpcSite, reloading_server_credentials, serve_grpc
from kubegang.extender._http import RunningSite, build_extender_app, serve
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._runtime import _count_reload
from kubegang.extender.client import PlacementClient, channel_credentials
from kubegang.tls import KeyPair, ReloadingServerTLS, ReloadOutcome, client_ssl_context, make_ca, make_leaf

from .conftest import FakeAuthority, LoopThread  # type: ignore[import-not-found]
from .test_grpc import FakePlacement  # type: ignore[import-not-found]

NAMES = ["localhost", "127.0.0.1"]


def _publish(folder: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` as kubelet's atomic writer does: a fresh folder, then an atomic ``..data`` swap."""
    stamp = folder / f"..{time.time_ns()}"
    stamp.mkdir()
    for name, data in files.items():
        (stamp / name).write_bytes(data)
    tmp = folder / "..data_tmp"
    tmp.symlink_to(stamp.name)
    os.replace(tmp, folder / "..data")
    for name in files:
        link = folder / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def _server_files(ca: KeyPair, server: KeyPair) -> dict[str, bytes]:
    return {"ca.crt": ca.cert_pem, "tls.crt": server.cert_pem, "tls.key": server.key_pem}


@dataclass
class Client:
    """What a client of the extender holds: a CA to trust and a client certificate from it."""

    folder: Path
    ca: KeyPair
    leaf: KeyPair = field(init=False)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.leaf = make_leaf(self.ca, "kube-scheduler", client=True)
        for name, data in (("ca.crt", self.ca.cert_pem), ("tls.crt", self.leaf.cert_pem),
                           ("tls.key", self.leaf.key_pem)):
            (self.folder / name).write_bytes(data)

    def ssl(self) -> ssl.SSLContext:
        return client_ssl_context(self.folder / "ca.crt", self.folder / "tls.crt", self.folder / "tls.key")

    def grpc(self) -> grpc.ChannelCredentials:
        return channel_credentials(self.folder / "ca.crt", self.folder / "tls.crt", self.folder / "tls.key")


@dataclass
class Extender:
    tls: ReloadingServerTLS
    metrics: ExtenderMetrics
    https: RunningSite
    grpc: GrpcSite


@pytest.fixture
def served(tmp_path: Path, loop_thread: LoopThread) -> Iterator[tuple[Extender, Path, KeyPair]]:
    """Both listeners over one reloading TLS, files in a kubelet-style folder, the reloader on a timer."""
    ca = make_ca()
    folder = tmp_path / "tls"
    folder.mkdir()
    _publish(folder, _server_files(ca, make_leaf(ca, "kubegang-extender", server_names=NAMES)))

    async def start() -> tuple[Extender, Any]:
        tls = ReloadingServerTLS(folder / "tls.crt", folder / "tls.key", folder / "ca.crt")
        metrics = ExtenderMetrics()
        https = await serve(build_extender_app(FakeAuthority(), metrics), "127.0.0.1", 0,
                            tls.listening_context())
        site = await serve_grpc(FakePlacement(), metrics, "127.0.0.1:0", reloading_server_credentials(tls))
        watcher = asyncio.create_task(tls.watch(0.05, lambda outcome: _count_reload(metrics, outcome)))
        return Extender(tls, metrics, https, site), watcher

    extender, watcher = loop_thread.run(start())
    yield extender, folder, ca

    async def stop() -> None:
        watcher.cancel()
        await extender.grpc.close(0)
        await extender.https.close()

    loop_thread.run(stop())


def _https_call(port: int, client: Client) -> bytes:
    """One request on a new connection; returns the server certificate it was answered with (DER)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=client.ssl(), timeout=10)
    try:
        conn.request("POST", "/filter", body=json.dumps({"Pod": {}, "NodeNames": ["a"]}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()
        assert conn.sock is not None
        der = conn.sock.getpeercert(binary_form=True)
        assert der is not None
        return der
    finally:
        conn.close()


def _grpc_call(port: int, client: Client) -> None:
    with grpc.secure_channel(f"127.0.0.1:{port}", client.grpc()) as channel:
        raw = channel.unary_unary(f"/{SERVICE_NAME}/Release")(
            pb.ReleaseRequest(job_uid="x").SerializeToString(), timeout=10)
        assert pb.ReleaseResponse.FromString(raw).released is False


def _grpc_server_cert(port: int, client: Client) -> bytes:
    """The certificate the gRPC listener presents to a new connection (a TLS handshake with ALPN h2)."""
    ctx = client.ssl()
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _serial(pem_or_der: bytes) -> int:
    if pem_or_der.startswith(b"-----"):
        return x509.load_pem_x509_certificate(pem_or_der).serial_number
    return x509.load_der_x509_certificate(pem_or_der).serial_number


def _wait_for(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _reloads(extender: Extender, outcome: str) -> float:
    value = extender.metrics.registry.get_sample_value("kubegang_extender_tls_reloads_total",
                                                       {"outcome": outcome})
    return value or 0.0


def test_a_renewed_certificate_is_served_under_load_and_no_request_fails(
    served: tuple[Extender, Path, KeyPair], tmp_path: Path
) -> None:
    extender, folder, ca = served
    client = Client(tmp_path / "client", ca)
    old = _serial(_https_call(extender.https.port, client))
    failures: list[BaseException] = []
    seen: list[int] = []
    grpc_calls = [0]
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                seen.append(_serial(_https_call(extender.https.port, client)))
                _grpc_call(extender.grpc.port, client)
                grpc_calls[0] += 1
            except BaseException as exc:  # every failure is the test's finding
                failures.append(exc)

    workers = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        _wait_for(lambda: len(seen) >= 10, "requests before the rotation")
        renewed = make_leaf(ca, "kubegang-extender", server_names=NAMES)
        _publish(folder, _server_files(ca, renewed))
        new = _serial(renewed.cert_pem)
        before = len(seen)
        _wait_for(lambda: new in seen[before:], "a request answered with the renewed certificate")
        after = len(seen)
        _wait_for(lambda: len(seen) >= after + 10, "requests after the rotation")
    finally:
        stop.set()
        for worker in workers:
            worker.join(20)
    assert not failures, f"{len(failures)} requests failed during the rotation: {failures[:3]}"
    assert old != new
    first_new = seen.index(new)
    assert set(seen[first_new + 3 * len(workers):]) == {new}, "new connections must all get the new certificate"
    assert grpc_calls[0] > 10
    assert _serial(_grpc_server_cert(extender.grpc.port, client)) == new
    assert extender.tls.current.generation == 2
    assert _reloads(extender, "reloaded") == 1


def test_a_new_ca_is_trusted_for_new_connections_and_the_old_one_no_longer(
    served: tuple[Extender, Path, KeyPair], tmp_path: Path
) -> None:
    extender, folder, ca = served
    old_client = Client(tmp_path / "old", ca)
    _https_call(extender.https.port, old_client)
    _grpc_call(extender.grpc.port, old_client)
    new_ca = make_ca("kubegang-ca-2")
    new_client = Client(tmp_path / "new", new_ca)
    _publish(folder, _server_files(new_ca, make_leaf(new_ca, "kubegang-extender", server_names=NAMES)))
    _wait_for(lambda: extender.tls.current.generation == 2, "the reload")
    _https_call(extender.https.port, new_client)
    _grpc_call(extender.grpc.port, new_client)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _https_call(extender.https.port, old_client)
    with pytest.raises(grpc.RpcError) as info:
        _grpc_call(extender.grpc.port, old_client)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_files_that_do_not_load_leave_the_last_good_certificate_in_use(
    served: tuple[Extender, Path, KeyPair], tmp_path: Path
) -> None:
    extender, folder, ca = served
    client = Client(tmp_path / "client", ca)
    good = _serial(_https_call(extender.https.port, client))
    renewed = make_leaf(ca, "kubegang-extender", server_names=NAMES)
    other = make_leaf(ca, "kubegang-extender", server_names=NAMES)
    # The certificate renewed but the key is another one: caught half-way, it must not be loaded.
    _publish(folder, {"ca.crt": ca.cert_pem, "tls.crt": renewed.cert_pem, "tls.key": other.key_pem})
    _wait_for(lambda: _reloads(extender, "refused") >= 1, "the refusal")
    assert extender.tls.current.generation == 1
    assert _serial(_https_call(extender.https.port, client)) == good
    _grpc_call(extender.grpc.port, client)
    assert _serial(_grpc_server_cert(extender.grpc.port, client)) == good
    _publish(folder, _server_files(ca, renewed))
    _wait_for(lambda: extender.tls.current.generation == 2, "the completed rotation")
    assert _serial(_https_call(extender.https.port, client)) == _serial(renewed.cert_pem)
    assert _serial(_grpc_server_cert(extender.grpc.port, client)) == _serial(renewed.cert_pem)


def test_unchanged_files_are_not_reloaded(tmp_path: Path) -> None:
    ca = make_ca()
    folder = tmp_path / "tls"
    folder.mkdir()
    _publish(folder, _server_files(ca, make_leaf(ca, "kubegang-extender", server_names=NAMES)))
    tls = ReloadingServerTLS(folder / "tls.crt", folder / "tls.key", folder / "ca.crt")
    assert [tls.check() for _ in range(3)] == [ReloadOutcome.UNCHANGED] * 3
    assert tls.current.generation == 1
    (folder / "..data").unlink()  # the files vanish (a Secret deleted): refused, the old ones stay
    assert tls.check() is ReloadOutcome.REFUSED
    assert tls.check() is ReloadOutcome.UNCHANGED, "one refusal per state of the files, not per look"
    assert tls.current.generation == 1
    renewed = make_leaf(ca, "kubegang-extender", server_names=NAMES)
    _publish(folder, {"ca.crt": ca.cert_pem, "tls.crt": renewed.cert_pem, "tls.key": ca.key_pem})  # wrong key
    assert [tls.check(), tls.check()] == [ReloadOutcome.REFUSED, ReloadOutcome.UNCHANGED]
    _publish(folder, _server_files(ca, renewed))
    assert tls.check() is ReloadOutcome.RELOADED and tls.current.generation == 2


@pytest.mark.asyncio(loop_scope="session")
async def test_the_operators_client_follows_its_renewed_certificate_files(tmp_path: Path) -> None:
    """The CA moves on, for the server and the client's mounted files alike; the listener restarts, so the
    old connection is gone: a client that kept its first channel would dial with the old CA and fail."""
    old_ca, new_ca = make_ca(), make_ca("kubegang-ca-2")
    server_dir, client_dir = tmp_path / "server", tmp_path / "client"
    for folder in (server_dir, client_dir):
        folder.mkdir()
    _publish(server_dir, _server_files(old_ca, make_leaf(old_ca, "kubegang-extender", server_names=NAMES)))
    old_leaf = make_leaf(old_ca, "kubegang-operator", client=True)
    _publish(client_dir, {"ca.crt": old_ca.cert_pem, "tls.crt": old_leaf.cert_pem, "tls.key": old_leaf.key_pem})
    tls = ReloadingServerTLS(server_dir / "tls.crt", server_dir / "tls.key", server_dir / "ca.crt")
    site = await serve_grpc(FakePlacement(), ExtenderMetrics(), "127.0.0.1:0", reloading_server_credentials(tls))
    port = site.port
    client = PlacementClient.from_files(f"127.0.0.1:{port}", client_dir / "ca.crt", client_dir / "tls.crt",
                                        client_dir / "tls.key", server_name="localhost", reload_seconds=0.05)
    try:
        assert await client.release("nobody") == 0
        _publish(server_dir, _server_files(new_ca, make_leaf(new_ca, "kubegang-extender", server_names=NAMES)))
        new_leaf = make_leaf(new_ca, "kubegang-operator", client=True)
        _publish(client_dir, {"ca.crt": new_ca.cert_pem, "tls.crt": new_leaf.cert_pem,
                              "tls.key": new_leaf.key_pem})
        assert tls.check() is ReloadOutcome.RELOADED
        await site.close(0)
        site = await serve_grpc(FakePlacement(), ExtenderMetrics(), f"127.0.0.1:{port}",
                                reloading_server_credentials(tls))
        await asyncio.sleep(0.1)
        assert await client.release("nobody", deadline_s=5) == 0
        _write_all(tmp_path, old_ca, old_leaf)
        stale = PlacementClient.from_files(f"127.0.0.1:{port}", tmp_path / "old-ca.crt", tmp_path / "old.crt",
                                           tmp_path / "old.key", server_name="localhost")
        async with stale:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stale.release("nobody", deadline_s=2)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, "the old CA's client must now be refused"
    finally:
        await client.close()
        await site.close(0)


def _write_all(folder: Path, ca: KeyPair, leaf: KeyPair) -> None:
    (folder / "old-ca.crt").write_bytes(ca.cert_pem)
    (folder / "old.crt").write_bytes(leaf.cert_pem)
    (folder / "old.key").write_bytes(leaf.key_pem)


def test_a_reload_interval_that_is_not_positive_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from kubegang.extender.__main__ import main

    assert main(["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--tls-reload-seconds", "0"]) == 2
    assert "--tls-reload-seconds must be > 0, got 0.0" in capsys.readouterr().err


async def test_the_watch_survives_a_look_that_fails_unexpectedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = make_ca()
    folder = tmp_path / "tls"
    folder.mkdir()
    _publish(folder, _server_files(ca, make_leaf(ca, "kubegang-extender", server_names=NAMES)))
    tls = ReloadingServerTLS(folder / "tls.crt", folder / "tls.key", folder / "ca.crt")
    looks: list[int] = []

    def flaky() -> ReloadOutcome:
        looks.append(1)
        if len(looks) == 1:
            raise RuntimeError("unexpected")
        return ReloadOutcome.UNCHANGED

    monkeypatch.setattr(tls, "check", flaky)
    seen: list[ReloadOutcome] = []
    task = asyncio.create_task(tls.watch(0.01, seen.append))
    for _ in range(200):
        if seen:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(looks) >= 2 and seen[0] is ReloadOutcome.UNCHANGED
