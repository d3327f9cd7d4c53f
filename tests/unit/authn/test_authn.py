"""kubegang.authn: who may read /metrics and /debug/snapshot (TokenReview + SubjectAccessReview, cached).

The API server is a fake here (an in-memory ReviewApi that answers like kube-apiserver); the e2e test
tests/e2e/test_prometheus.py asks a real one.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from kubegang.authn import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    MetricsAuth,
    RequestAuthorizer,
    SecureServing,
    ThreadedSite,
    Verdict,
    add_serving_flags,
    checking_middleware,
    metrics_handler,
    serving_from_args,
)
from kubegang.testing import free_port
from kubegang.tls import make_ca, make_leaf


class FakeApiServer:
    """Tokens map to users; ``allowed`` holds the (user, path) pairs RBAC allows ``get`` on."""

    def __init__(self) -> None:
        self.users = {"prom-token": "system:serviceaccount:monitoring:prometheus",
                      "other-token": "system:serviceaccount:default:nobody"}
        self.allowed = {("system:serviceaccount:monitoring:prometheus", "/metrics")}
        self.calls: list[str] = []
        self.down = False

    async def create_review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(path)
        if self.down:
            raise ConnectionError("connection refused")
        spec = body["spec"]
        if path == TOKEN_REVIEWS:
            user = self.users.get(spec["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": ["system:authenticated"]}}}
        assert path == ACCESS_REVIEWS
        attrs = spec["nonResourceAttributes"]
        assert attrs["verb"] == "get"
        return {"status": {"allowed": (spec["user"], attrs["path"]) in self.allowed}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_no_token_is_unauthenticated_without_asking_the_api_server() -> None:
    api = FakeApiServer()
    decision = await RequestAuthorizer(api).check(None, "/metrics")
    assert decision.verdict is Verdict.UNAUTHENTICATED
    assert "bearer token" in decision.reason
    assert api.calls == []


async def test_unknown_token_unauthenticated_known_user_without_rbac_forbidden_with_rbac_allowed() -> None:
    api = FakeApiServer()
    auth = RequestAuthorizer(api)
    assert (await auth.check("garbage", "/metrics")).verdict is Verdict.UNAUTHENTICATED
    refused = await auth.check("other-token", "/metrics")
    assert refused.verdict is Verdict.FORBIDDEN
    assert refused.user == "system:serviceaccount:default:nobody"
    assert "/metrics" in refused.reason
    allowed = await auth.check("prom-token", "/metrics")
    assert allowed.verdict is Verdict.ALLOWED
    # The same user is reviewed per path: /metrics does not open /debug/snapshot.
    assert (await auth.check("prom-token", "/debug/snapshot")).verdict is Verdict.FORBIDDEN


async def test_allowed_answers_are_cached_for_the_ttl_so_scrapes_cost_one_review_pair_per_ttl() -> None:
    api, clock = FakeApiServer(), Clock()
    auth = RequestAuthorizer(api, allowed_ttl=30, denied_ttl=5, clock=clock)
    for _ in range(4):  # a minute of 15 s scrapes
        assert (await auth.check("prom-token", "/metrics")).verdict is Verdict.ALLOWED
        clock.now += 15
    assert auth.reviews == 2
    assert api.calls == [TOKEN_REVIEWS, ACCESS_REVIEWS] * 2


async def test_a_revoked_binding_stops_working_once_the_answer_expires() -> None:
    api, clock = FakeApiServer(), Clock()
    auth = RequestAuthorizer(api, allowed_ttl=30, clock=clock)
    assert (await auth.check("prom-token", "/metrics")).verdict is Verdict.ALLOWED
    api.allowed.clear()
    clock.now += 10
    assert (await auth.check("prom-token", "/metrics")).verdict is Verdict.ALLOWED
    clock.now += 21
    assert (await auth.check("prom-token", "/metrics")).verdict is Verdict.FORBIDDEN


async def test_refusals_are_cached_briefly_and_a_new_binding_works_after_that() -> None:
    api, clock = FakeApiServer(), Clock()
    auth = RequestAuthorizer(api, denied_ttl=5, clock=clock)
    for _ in range(10):
        assert (await auth.check("other-token", "/metrics")).verdict is Verdict.FORBIDDEN
    assert auth.reviews == 1
    api.allowed.add(("system:serviceaccount:default:nobody", "/metrics"))
    clock.now += 6
    assert (await auth.check("other-token", "/metrics")).verdict is Verdict.ALLOWED


async def test_api_server_down_fails_closed_and_is_not_cached() -> None:
    api = FakeApiServer()
    auth = RequestAuthorizer(api)
    api.down = True
    decision = await auth.check("prom-token", "/metrics")
    assert decision.verdict is Verdict.UNAVAILABLE
    assert "connection refused" in decision.reason
    api.down = False
    assert (await auth.check("prom-token", "/metrics")).verdict is Verdict.ALLOWED


async def test_the_cache_is_bounded() -> None:
    api = FakeApiServer()
    auth = RequestAuthorizer(api, cache_size=3)
    for i in range(10):
        await auth.check(f"random-{i}", "/metrics")
    assert len(auth._cache) == 3


def test_bad_settings_are_refused_with_the_name() -> None:
    with pytest.raises(ValueError, match="allowed_ttl"):
        RequestAuthorizer(FakeApiServer(), allowed_ttl=-1)


# ---- the HTTP side ---------------------------------------------------------------------------


def _app(api: FakeApiServer, registry: CollectorRegistry) -> web.Application:
    app = web.Application(middlewares=[checking_middleware(RequestAuthorizer(api), ["/metrics"])])
    app.router.add_get("/metrics", metrics_handler(registry))

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n")

    app.router.add_get("/healthz", healthz)
    return app


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("kubegang_test_scrapes", "a test counter", registry=registry).inc()
    return registry


async def test_the_middleware_answers_401_403_503_and_serves_the_allowed(registry: CollectorRegistry) -> None:
    api = FakeApiServer()
    runner = web.AppRunner(_app(api, registry))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/metrics") as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert "kubegang_test" not in await resp.text()
            async with s.get(f"{base}/metrics", headers={"Authorization": "Basic cHJvbTpwcm9t"}) as resp:
                assert resp.status == 401
            async with s.get(f"{base}/metrics", headers={"Authorization": "Bearer other-token"}) as resp:
                assert resp.status == 403
                assert "may not get /metrics" in await resp.text()
            async with s.get(f"{base}/metrics", headers={"Authorization": "Bearer prom-token"}) as resp:
                assert resp.status == 200
                text = await resp.text()
                assert "kubegang_test_scrapes_total 1.0" in text
                assert "_created" not in text  # no second series per counter that nothing reads
            async with s.get(f"{base}/healthz") as resp:  # kubelet probes carry no token
                assert resp.status == 200
            api.down = True
            async with s.get(f"{base}/metrics", headers={"Authorization": "Bearer fresh-token"}) as resp:
                assert resp.status == 503
    finally:
        await runner.cleanup()


def _flags(argv: list[str]) -> SecureServing:
    parser = argparse.ArgumentParser()
    add_serving_flags(parser)
    return serving_from_args(parser.parse_args(argv))


def test_flags_default_to_auth_on_and_https() -> None:
    serving = _flags([])
    assert serving.auth is MetricsAuth.ON
    assert serving.scheme == "https"
    assert _flags(["--metrics-auth=off"]).scheme == "http"
    assert _flags(["--metrics-auth=off"]).ssl_context() is None


def test_bad_flags_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _flags(["--metrics-auth=maybe"])
    assert "--metrics-auth: expected on or off, got 'maybe'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="give both"):
        _flags([f"--metrics-tls-cert={tmp_path / 'x'}"])
    with pytest.raises(ValueError, match="does not exist"):
        _flags([f"--metrics-tls-cert={tmp_path / 'x'}", f"--metrics-tls-key={tmp_path / 'y'}"])


def _threaded(registry: CollectorRegistry, serving: SecureServing) -> ThreadedSite:
    def build() -> web.Application:
        app = web.Application(middlewares=[checking_middleware(RequestAuthorizer(FakeApiServer()), ["/metrics"])])
        app.router.add_get("/metrics", metrics_handler(registry))
        return app

    return ThreadedSite(build, "127.0.0.1", 0, serving.ssl_context()).start()


async def test_https_with_the_given_certificate_verifies_against_its_ca(
        tmp_path: Path, registry: CollectorRegistry) -> None:
    ca = make_ca()
    leaf = make_leaf(ca, "kubegang-metrics", server_names=["kubegang-metrics", "127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    site = _threaded(registry, SecureServing(cert=tmp_path / "tls.crt", key=tmp_path / "tls.key"))
    trust = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://127.0.0.1:{site.port}/metrics", ssl=trust) as resp:
            assert resp.status == 401  # TLS verified without a client certificate; the token is what counts
        async with s.get(f"https://127.0.0.1:{site.port}/metrics", ssl=trust,
                         headers={"Authorization": "Bearer prom-token"}) as resp:
            assert resp.status == 200


async def test_without_a_certificate_a_self_signed_one_is_served(registry: CollectorRegistry) -> None:
    site = _threaded(registry, SecureServing())
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await s.get(f"https://127.0.0.1:{site.port}/metrics")
        async with s.get(f"https://127.0.0.1:{site.port}/metrics", ssl=False,
                         headers={"Authorization": "Bearer prom-token"}) as resp:
            assert resp.status == 200


def test_a_port_in_use_is_reported_by_start(registry: CollectorRegistry) -> None:
    first = _threaded(registry, SecureServing(auth=MetricsAuth.OFF))
    with pytest.raises(OSError):
        ThreadedSite(web.Application, "127.0.0.1", first.port, None).start()


def test_a_renewed_certificate_is_served_to_new_connections_without_a_restart(tmp_path: Path) -> None:
    from kubegang.authn._serve import ReloadingCertificate

    ca = make_ca()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def issue() -> bytes:
        leaf = make_leaf(ca, "kubegang-metrics", server_names=["127.0.0.1"])
        cert.write_bytes(leaf.cert_pem)
        key.write_bytes(leaf.key_pem)
        return leaf.cert_pem

    first = issue()
    reloading = ReloadingCertificate(cert, key, check_seconds=0)
    site = ThreadedSite(web.Application, "127.0.0.1", 0, reloading.listening_context()).start()

    def served() -> bytes:
        return ssl.get_server_certificate(("127.0.0.1", site.port)).encode()

    assert _der(served()) == _der(first)
    second = issue()  # cert-manager renewed the Secret; kubelet rewrote the files
    assert _der(served()) == _der(second)
    assert reloading.reloads == 1
    # Half written: a new certificate beside the old key does not load; the last good one stays.
    cert.write_bytes(make_leaf(ca, "kubegang-metrics", server_names=["127.0.0.1"]).cert_pem)
    assert _der(served()) == _der(second)
    assert reloading.reloads == 1


def _der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())
