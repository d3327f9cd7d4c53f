"""``RestClient`` and ``KubeApi`` over it, against a loopback HTTP server that answers as the API server
does: the paths and content types each write sends, AlreadyExists / NotFound as success, a Status
error as ``ApiStatusError`` with its code, and a 401 answered by asking the auth flow again, once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Generator
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from aiohttp import web

from kubegang.operator._job import JobView
from kubegang.operator._kube import KubeApi, RateLimiter, object_path
from kubegang.restclient import ApiStatusError, RestClient


class Server:
    """Records each request; answers from ``answers`` (path -> (status, body)) or 200 with the body sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str | None, Any]] = []
        self.answers: dict[str, tuple[int, dict[str, Any]]] = {}
        self.valid_token = "t1"
        self.shed: list[tuple[int, str | None]] = []
        """Answers given before any other, one per request: (status, Retry-After) (load shedding)."""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.seen.append((request.method, request.path_qs, request.headers.get("Content-Type", ""),
                          request.headers.get("Authorization"), body))
        if request.headers.get("Authorization") != f"Bearer {self.valid_token}":
            return web.json_response({"kind": "Status", "reason": "Unauthorized", "message": "token"}, status=401)
        if self.shed:
            code, after = self.shed.pop(0)
            return web.json_response({"kind": "Status", "reason": "TooManyRequests", "message": "shed"}, status=code,
                                     headers={"Retry-After": after} if after is not None else None)
        status, answer = self.answers.get(request.path, (200, body or {}))
        return web.json_response(answer, status=status)


class CountingAuth(httpx2.Auth):
    """A bearer token that changes each time it is asked for (a rotating service-account token)."""

    def __init__(self) -> None:
        self.asked = 0

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        self.asked += 1
        request.headers["Authorization"] = f"Bearer t{self.asked}"
        yield request


@pytest_asyncio.fixture(loop_scope="function")  # the server runs in the test's own loop
async def served() -> AsyncIterator[tuple[Server, RestClient, CountingAuth]]:
    server = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    auth = CountingAuth()
    client = RestClient(f"http://127.0.0.1:{port}", False, auth, timeout_seconds=5, limit=4)
    try:
        yield server, client, auth
    finally:
        await client.close()
        await runner.cleanup()


def _job() -> JobView:
    from kubegang.operator._cache import ClusterCache

    return ClusterCache().upsert_job({
        "apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "u1", "resourceVersion": "5"},
        "spec": {"queue": "q", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    })


async def test_each_write_goes_to_its_path_with_its_content_type(served: Any) -> None:
    server, client, _ = served
    kube = KubeApi(client, RateLimiter(qps=1000, burst=100))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
    assert await kube.create(pod)
    assert await kube.patch("Pod", "team-a", "p", {"metadata": {"labels": {"a": "b"}}})
    server.answers["/apis/kubegang.io/v1alpha1/namespaces/team-a/gpujobs/train/status"] = (
        200, {"metadata": {"resourceVersion": "6"}})
    assert await kube.patch_job_status(_job(), {"phase": "Admitted"}, resource_version="5") == "6"
    await kube.patch_queue_status("q", {"usage": {}})
    await kube.delete("Pod", "team-a", "p")
    sent = [(method, path, ctype) for method, path, ctype, _, _ in server.seen]
    assert sent == [
        ("POST", "/api/v1/namespaces/team-a/pods?fieldManager=kubegang-operator", "application/json"),
        ("PATCH", "/api/v1/namespaces/team-a/pods/p?fieldManager=kubegang-operator", "application/merge-patch+json"),
        ("PATCH", "/apis/kubegang.io/v1alpha1/namespaces/team-a/gpujobs/train/status?fieldManager=kubegang-operator",
         "application/merge-patch+json"),
        ("PATCH", "/apis/kubegang.io/v1alpha1/gpuqueues/q/status?fieldManager=kubegang-operator",
         "application/merge-patch+json"),
        ("DELETE", "/api/v1/namespaces/team-a/pods/p", ""),
    ]
    # The status write names the version it was decided on (the API server's precondition).
    assert server.seen[2][4] == {"status": {"phase": "Admitted"}, "metadata": {"resourceVersion": "5"}}
    assert server.seen[0][4] == pod


async def test_already_exists_and_not_found_are_success_other_errors_raise_with_their_code(served: Any) -> None:
    server, client, _ = served
    kube = KubeApi(client, RateLimiter(qps=1000, burst=100))
    conflict = {"kind": "Status", "reason": "AlreadyExists", "message": 'pods "p" already exists'}
    server.answers["/api/v1/namespaces/team-a/pods"] = (409, conflict)
    assert await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}) \
        is False
    server.answers["/api/v1/namespaces/team-a/pods/gone"] = (404, {"reason": "NotFound", "message": "not found"})
    await kube.delete("Pod", "team-a", "gone")
    assert await kube.patch("Pod", "team-a", "gone", {"metadata": {}}) is False
    server.answers["/apis/kubegang.io/v1alpha1/namespaces/team-a/gpujobs/train/status"] = (
        409, {"reason": "Conflict", "message": "the object has been modified"})
    with pytest.raises(ApiStatusError) as raised:
        await kube.patch_job_status(_job(), {"phase": "Admitted"}, resource_version="5")
    assert raised.value.code == 409 and raised.value.reason == "Conflict"
    server.answers["/api/v1/namespaces/team-a/configmaps"] = (422, {"reason": "Invalid", "message": "data: bad"})
    with pytest.raises(ApiStatusError, match="422 Invalid: data: bad"):
        await kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}})


async def test_a_401_asks_the_auth_flow_again_once_and_the_header_is_reused_meanwhile(served: Any) -> None:
    server, client, auth = served
    await client.request("GET", "/api/v1/namespaces")
    await client.request("GET", "/api/v1/namespaces")
    assert auth.asked == 1                      # the header is kept, not rebuilt per request
    server.valid_token = "t2"                   # the token rotated on the server's side
    assert await client.request("GET", "/api/v1/namespaces") == {}
    assert auth.asked == 2 and [s[3] for s in server.seen[-2:]] == ["Bearer t1", "Bearer t2"]
    server.valid_token = "never"
    with pytest.raises(ApiStatusError) as raised:
        await client.request("GET", "/api/v1/namespaces")
    assert raised.value.code == 401 and auth.asked == 3   # asked again once, then the 401 is the answer


def test_object_paths_and_an_unknown_kind_is_named() -> None:
    assert object_path("GPUJob", "ns", "j", "status") == "/apis/kubegang.io/v1alpha1/namespaces/ns/gpujobs/j/status"
    assert object_path("GPUQueue", "", "root") == "/apis/kubegang.io/v1alpha1/gpuqueues/root"
    assert object_path("Event", "ns") == "/api/v1/namespaces/ns/events"
    with pytest.raises(ValueError, match="kind 'Deployment'"):
        object_path("Deployment", "ns", "d")


async def test_a_kubeconfig_gives_the_server_and_the_users_token(tmp_path: Any) -> None:
    from kubegang.restclient import rest_client

    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443/", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    client = rest_client(str(path), timeout_seconds=5, limit=2)
    assert client.server == "https://127.0.0.1:6443"
    assert await client._auth.header() == "Bearer secret-token"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}))
    with pytest.raises(ValueError, match="kubeconfig"):
        rest_client(str(path), timeout_seconds=5, limit=2)


async def test_a_write_the_server_asks_to_retry_is_sent_again_while_the_replica_may_write(served: Any) -> None:
    """client-go's rule: 429, or a 5xx with Retry-After, means the server did not act on it. One shed
    request used to tear down a whole gang's creation."""
    server, client, _ = served
    allowed = True
    kube = KubeApi(client, RateLimiter(1000, 1000), fence=lambda: allowed)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
    server.shed = [(429, "0"), (503, "0")]
    assert await kube.create(pod) is True
    assert [m for m, *_ in server.seen] == ["POST", "POST", "POST"]
    # A 5xx without Retry-After may have been acted on: its error is the answer.
    server.shed = [(500, None)]
    with pytest.raises(ApiStatusError) as raised:
        await kube.create(pod)
    assert raised.value.code == 500
    # At most RETRIES retries, then the 429 is the answer.
    from kubegang.restclient import RETRIES
    server.shed = [(429, "0")] * (RETRIES + 1)
    with pytest.raises(ApiStatusError, match="429"):
        await kube.delete("Pod", "team-a", "p")
    # A replica past its renew deadline sends no retry.
    from kubegang.operator._kube import NotLeading
    server.seen.clear()
    server.shed = [(429, "0")]

    def deposed() -> bool:
        return len(server.seen) == 0  # may write the first time only

    kube.fence = deposed
    with pytest.raises(NotLeading):
        await kube.patch("Pod", "team-a", "p", {"metadata": {"labels": {"a": "b"}}})
    assert len(server.seen) == 1
