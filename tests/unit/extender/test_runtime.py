"""A whole extender in-process (scripted API server): ready after sync, both APIs answer from the ledger."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import httpx2
import pytest

from kubegang.authn import MetricsAuth
from kubegang.extender import ExtenderSettings, PlacementClient, run_extender
from kubegang.extender.__main__ import settings_from_args
from kubegang.placement import GangRequest, Placement
from kubegang.tls import PemPaths, client_ssl_context

from .test_watch import FakeApi  # type: ignore[import-not-found]


@pytest.mark.asyncio(loop_scope="session")
async def test_extender_serves_filter_and_plan_from_the_watched_cluster(pki: PemPaths) -> None:
    api = FakeApi()
    api.streams = []
    settings = ExtenderSettings(tls_cert=pki.server_cert, tls_key=pki.server_key, client_ca=pki.ca_cert,
                                https_address="127.0.0.1", https_port=0, grpc_address="127.0.0.1",
                                grpc_port=0, health_address="127.0.0.1", health_port=0,
                                housekeeping_seconds=0.05)
    reviews: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        # The reviews go through the extender's own API client, with the API server's answers.
        if request.url.path.endswith("/tokenreviews"):
            reviews.append("token")
            ok = json.loads(request.content)["spec"]["token"] == "prom"
            return httpx2.Response(201, json={"status": {"authenticated": ok, "user": {"username": "prom"}}})
        if request.url.path.endswith("/subjectaccessreviews"):
            spec = json.loads(request.content)["spec"]
            path = spec["nonResourceAttributes"]["path"]
            reviews.append(path)
            return httpx2.Response(201, json={"status": {"allowed": path == "/metrics"}})
        return api.handler(request)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api")
    async with run_extender(settings, client) as ext:
        for _ in range(100):
            if ext.ledger.synced:
                break
            await asyncio.sleep(0.02)
        async with aiohttp.ClientSession() as s:
            # --metrics-auth is on by default: HTTPS (self-signed here), health open, /metrics checked.
            async with s.get(f"https://127.0.0.1:{ext.health.port}/readyz", ssl=False) as resp:
                assert resp.status == 200
            async with s.get(f"https://127.0.0.1:{ext.health.port}/metrics", ssl=False) as resp:
                assert resp.status == 401
            prom = {"Authorization": "Bearer prom"}
            async with s.get(f"https://127.0.0.1:{ext.health.port}/metrics", ssl=False, headers=prom) as resp:
                assert resp.status == 200
                assert "kubegang_extender_gpus" in await resp.text()
            mtls = client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
            async with s.get(f"https://127.0.0.1:{ext.https.port}/debug/snapshot", ssl=mtls) as resp:
                assert resp.status == 401  # a client certificate alone no longer reads the ledger
            async with s.get(f"https://127.0.0.1:{ext.https.port}/debug/snapshot", ssl=mtls, headers=prom) as resp:
                assert resp.status == 403  # RBAC allows this user /metrics only
            assert reviews == ["token", "/metrics", "token", "/debug/snapshot"]
            body = {"Pod": {"metadata": {"uid": "q"}, "spec": {"containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}, "NodeNames": ["n0"]}
            ctx = client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
            async with s.post(f"https://127.0.0.1:{ext.https.port}/filter", json=body, ssl=ctx) as resp:
                result = await resp.json()
        assert result["NodeNames"] == []
        assert "n0" in result["FailedNodes"]  # the listed pod holds all 8 GPUs of n0
        async with PlacementClient.from_files(f"127.0.0.1:{ext.grpc.port}", pki.ca_cert, pki.client_cert,
                                              pki.client_key) as placement:
            out = await placement.plan(GangRequest(id="j", pods=1, gpus_per_pod=8))
        assert not isinstance(out, Placement)
        assert "8" in out.reason


def test_settings_from_the_command_line() -> None:
    s = settings_from_args(["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--https-port", "1"])
    assert (s.https_port, s.grpc_port, str(s.client_ca)) == (1, 9443, "ca")


def test_metrics_flags_from_the_command_line(tmp_path: Path) -> None:
    base = ["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"]
    assert settings_from_args(base).serving.auth is MetricsAuth.ON
    assert settings_from_args([*base, "--metrics-auth=off"]).serving.scheme == "http"
    with pytest.raises(ValueError, match="give both"):
        settings_from_args([*base, "--metrics-tls-cert", str(tmp_path)]).serving  # noqa: B018


@pytest.mark.asyncio(loop_scope="session")
async def test_a_background_task_that_dies_is_reported_so_the_process_exits(pki: PemPaths,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from kubegang.extender._watch import ClusterFeed

    async def broken(self: ClusterFeed) -> None:
        raise RuntimeError("a bug no retry mends")

    monkeypatch.setattr(ClusterFeed, "run", broken)
    settings = ExtenderSettings(tls_cert=pki.server_cert, tls_key=pki.server_key, client_ca=pki.ca_cert,
                                https_address="127.0.0.1", https_port=0, grpc_address="127.0.0.1",
                                grpc_port=0, health_address="127.0.0.1", health_port=0)
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda r: httpx2.Response(404)), base_url="https://api")
    async with run_extender(settings, client) as ext:
        await asyncio.wait_for(ext.failed.wait(), timeout=5)
        assert not ext.ledger.synced
