"""Fixtures for extender adapter tests: a throwaway PKI and a fake authority behind real listeners."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from kubegang.extender._authority import FilterVerdict
from kubegang.extender._http import RunningSite, build_extender_app, build_health_app, serve
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._pods import PodDemand
from kubegang.tls import KeyPair, PemPaths, make_leaf, server_ssl_context, write_pki


class FakeAuthority:
    """Decides by node name, so tests can predict every answer; ``boom`` simulates a bug."""

    def __init__(self) -> None:
        self.boom = False
        self.seen: list[PodDemand] = []

    def filter(self, pod: PodDemand, nodes: Sequence[str]) -> FilterVerdict:
        self._check(pod)
        passed, failed, unresolvable = [], {}, {}
        for node in nodes:
            if pod.pinned_node is not None and node != pod.pinned_node:
                unresolvable[node] = f"pod is planned on {pod.pinned_node}"
            elif node.startswith("full"):
                failed[node] = f"needs {pod.gpus} GPUs, 0 free"
            else:
                passed.append(node)
        return FilterVerdict(passed=passed, failed=failed, unresolvable=unresolvable)

    def prioritize(self, pod: PodDemand, nodes: Sequence[str]) -> list[tuple[str, int]]:
        self._check(pod)
        return [(node, len(node) % 11) for node in nodes]

    def preempt(self, pod: PodDemand, candidates: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        self._check(pod)
        return {node: list(uids) for node, uids in candidates.items() if not node.startswith("gang")}

    def snapshot(self) -> dict[str, Any]:
        return {"fake": True, "seen": len(self.seen)}

    def _check(self, pod: PodDemand) -> None:
        self.seen.append(pod)
        if self.boom:
            raise RuntimeError("simulated authority bug")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PemPaths:
    return write_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> PemPaths:
    """A second, unrelated CA: its client certificate must be refused."""
    return write_pki(tmp_path_factory.mktemp("other-pki"))


def _dated_client(pki: PemPaths, folder: Path, not_before: dt.datetime, validity: dt.timedelta) -> tuple[Path, Path]:
    ca = KeyPair(cert_pem=pki.ca_cert.read_bytes(), key_pem=pki.ca_key.read_bytes())
    leaf = make_leaf(ca, "kube-scheduler", client=True, not_before=not_before, validity=validity)
    (folder / "client.crt").write_bytes(leaf.cert_pem)
    (folder / "client.key").write_bytes(leaf.key_pem)
    return folder / "client.crt", folder / "client.key"


@pytest.fixture(scope="session")
def expired_client(pki: PemPaths, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A client certificate from the right CA that expired yesterday: (cert, key) files."""
    return _dated_client(pki, tmp_path_factory.mktemp("expired"),
                         dt.datetime.now(dt.UTC) - dt.timedelta(days=2), dt.timedelta(days=1))


@pytest.fixture(scope="session")
def unexpired_twin(pki: PemPaths, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Made exactly as :func:`expired_client` but valid until tomorrow: what tells expiry is the cause."""
    return _dated_client(pki, tmp_path_factory.mktemp("unexpired"),
                         dt.datetime.now(dt.UTC) - dt.timedelta(days=1), dt.timedelta(days=2))


@pytest.fixture
def authority() -> FakeAuthority:
    return FakeAuthority()


@pytest.fixture
def metrics() -> ExtenderMetrics:
    return ExtenderMetrics()


@pytest.fixture
async def https_site(pki: PemPaths, authority: FakeAuthority, metrics: ExtenderMetrics
                     ) -> AsyncIterator[RunningSite]:
    app = build_extender_app(authority, metrics, max_body_bytes=64 * 1024)
    ctx = server_ssl_context(pki.server_cert, pki.server_key, pki.ca_cert)
    site = await serve(app, "127.0.0.1", 0, ctx)
    yield site
    await site.close()


@pytest.fixture
async def health_site(metrics: ExtenderMetrics) -> AsyncIterator[RunningSite]:
    site = await serve(build_health_app(metrics, lambda: True), "127.0.0.1", 0)
    yield site
    await site.close()




class LoopThread:
    """An event loop in a background thread, so sync tests (hypothesis) can hit async servers."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def threaded_https(loop_thread: LoopThread, pki: PemPaths) -> Iterator[tuple[RunningSite, FakeAuthority]]:
    """The HTTPS app with a fake authority, served from a background loop."""
    fake = FakeAuthority()

    async def start() -> RunningSite:
        app = build_extender_app(fake, ExtenderMetrics(), max_body_bytes=64 * 1024)
        ctx = server_ssl_context(pki.server_cert, pki.server_key, pki.ca_cert)
        return await serve(app, "127.0.0.1", 0, ctx)

    site: RunningSite = loop_thread.run(start())
    yield site, fake
    loop_thread.run(site.close())
