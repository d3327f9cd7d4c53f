"""The leader's watches (``CacheFeed``) against a scripted API server (httpx MockTransport): the first
lists are the rebuild, a collection the API server does not serve is listed as empty (a plain-text 404,
as the API server answers an unknown group) and followed once it appears, events and relists reach the
cache, and watched namespaces narrow the namespaced collections."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from kubegang.api import POD_GROUP_LABEL, RAY_CLUSTER_LABEL
from kubegang.operator._cache import ClusterCache
from kubegang.operator._watches import GPU_PRODUCT_LABEL, CacheFeed
from kubegang.podcontract import JOB_UID_LABEL

from .conftest import gpu_queue, make_job_body

pytestmark = pytest.mark.asyncio(loop_scope="function")

GROUPS = "/apis/scheduling.k8s.io/v1alpha2"


def pod(name: str, *, uid: str | None = None, labels: dict[str, str] | None = None,
        group: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:1"}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": name, "namespace": "team-a", "uid": uid or f"pod-{name}", "labels": labels or {}},
            "spec": spec, "status": {"phase": "Pending"}}


class ScriptedApi:
    """Serves lists from ``objects`` by path; a watch replays the events queued for its path, then
    stays open (as a quiet stream does) until the test ends. Paths in ``not_served`` answer 404."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.not_served: set[str] = set()
        self.failing: set[str] = set()
        self.events: dict[str, list[list[dict[str, Any]]]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.version = 10

    async def handler(self, request: httpx2.Request) -> httpx2.Response:
        path, params = request.url.path, dict(request.url.params)
        self.requests.append((path, params))
        if path in self.not_served:
            return httpx2.Response(404, text="404 page not found")
        if path in self.failing:
            return httpx2.Response(500, json={"kind": "Status", "code": 500})
        if params.get("watch"):
            while not self.events.get(path):  # noqa: ASYNC110 -- a quiet stream, until the test queues more
                await asyncio.sleep(0.01)
            events = self.events[path].pop(0)
            if events and events[0].get("status") == 410:
                return httpx2.Response(410, json={"kind": "Status", "code": 410})
            return httpx2.Response(200, content="\n".join(json.dumps(e) for e in events).encode())
        return httpx2.Response(200, json={"items": self.objects.get(path, []),
                                          "metadata": {"resourceVersion": str(self.version)}})


@pytest.fixture
async def api() -> AsyncIterator[ScriptedApi]:
    yield ScriptedApi()


def _client(api: ScriptedApi) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(api.handler), base_url="https://api")


async def _running(feed: CacheFeed) -> asyncio.Task[None]:
    task = asyncio.create_task(feed.run())
    await asyncio.wait_for(feed.synced(), 5)
    return task


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_first_lists_rebuild_the_cache_and_collections_not_served_count_as_none(api: ScriptedApi) -> None:
    api.objects = {
        "/apis/kubegang.io/v1alpha1/gpuqueues": [gpu_queue("team-a", 16)],
        "/apis/kubegang.io/v1alpha1/gpujobs": [make_job_body("train")],
        "/api/v1/pods": [pod("train-0", labels={JOB_UID_LABEL: "uid-train"}),
                         pod("plain-0"),  # no gang's: not kept
                         pod("g-0", labels={POD_GROUP_LABEL: "g"}),
                         pod("r-0", labels={RAY_CLUSTER_LABEL: "ray"})],
        "/api/v1/nodes": [{"metadata": {"name": "n0", "labels": {GPU_PRODUCT_LABEL: "NVIDIA-H100"}}}],
        "/apis/scheduling.k8s.io/v1/priorityclasses": [{"metadata": {"name": "high"}, "value": 1000}],
    }
    api.not_served = {"/apis/ray.io/v1/rayclusters", f"{GROUPS}/podgroups", f"{GROUPS}/workloads"}
    cache = ClusterCache()
    task = await _running(CacheFeed(_client(api), cache))
    try:
        assert set(cache.queues) == {"team-a"} and set(cache.jobs) == {"uid-train"}
        assert set(cache.pods) == {"uid-train"}
        assert {k[2] for k in cache.source_pods} == {"g", "ray"}
        assert cache.gpu_products == {"n0": "NVIDIA-H100"} and cache.priorities == {"high": 1000}
        assert cache.rayclusters == {} and cache.podgroups == {} and cache.workloads == {}
        node_lists = [p for path, p in api.requests if path == "/api/v1/nodes"]
        assert node_lists and all(p.get("labelSelector") == GPU_PRODUCT_LABEL for p in node_lists)
    finally:
        await _stop(task)


async def test_a_failing_list_is_not_taken_for_an_absent_api_and_holds_the_rebuild(api: ScriptedApi) -> None:
    api.failing = {"/apis/ray.io/v1/rayclusters"}
    feed = CacheFeed(_client(api), ClusterCache(), retry_seconds=0.01, max_retry_seconds=0.02)
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.sleep(0.2)
        assert not feed._synced.is_set(), "a 500 is not 'KubeRay is not installed'"
        api.failing.clear()
        await asyncio.wait_for(feed.synced(), 5)
    finally:
        await _stop(task)


async def test_watch_events_reach_the_cache_and_a_relist_forgets_what_vanished(api: ScriptedApi) -> None:
    pods = "/api/v1/pods"
    member = pod("w-0", labels={}, group="pg")
    api.objects = {pods: [pod("train-0", labels={JOB_UID_LABEL: "uid-train"}), member]}
    api.events = {
        "/apis/kubegang.io/v1alpha1/gpuqueues": [[{"type": "ADDED", "object": gpu_queue("team-b", 8)}]],
        pods: [[{"type": "ADDED", "object": pod("train-1", labels={JOB_UID_LABEL: "uid-train"})},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}]],
    }
    cache = ClusterCache()
    task = await _running(CacheFeed(_client(api), cache))
    try:
        assert [k[2] for k in cache.source_pods] == ["pg"]
        await _until(lambda: "team-b" in cache.queues, "the queue's ADDED event")
        await _until(lambda: set(cache.pods.get("uid-train", {})) == {"train-0", "train-1"}, "the pod's ADDED event")
        api.objects[pods] = []
        api.events[pods] = [[{"status": 410}]]  # the version fell out of etcd's window
        await _until(lambda: not cache.pods and not cache.source_pods,
                     "the relist after 410 removing the pods that are gone, by their stubs")
        watches = [p for path, p in api.requests if path == pods and p.get("watch")]
        assert watches[0]["resourceVersion"] == "10" and watches[1]["resourceVersion"] == "20"
    finally:
        await _stop(task)


async def test_a_crd_installed_later_is_followed_without_a_restart(api: ScriptedApi) -> None:
    rays = "/apis/ray.io/v1/rayclusters"
    api.not_served = {rays}
    cache = ClusterCache()
    feed = CacheFeed(_client(api), cache)
    for reflector in feed.reflectors:
        reflector.not_served_retry_seconds = 0.01
    task = await _running(feed)
    try:
        assert cache.rayclusters == {}
        cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                   "metadata": {"name": "ray", "namespace": "team-a", "uid": "rc",
                                "labels": {"kubegang.io/queue": "q"}},
                   "spec": {}}
        api.objects[rays] = [cluster]
        api.not_served.clear()  # KubeRay's CRD is installed
        await _until(lambda: bool(cache.rayclusters), "the RayCluster listed once its CRD exists")
    finally:
        await _stop(task)


async def test_watched_namespaces_narrow_the_namespaced_collections_only() -> None:
    feed = CacheFeed(httpx2.AsyncClient(base_url="https://api"), ClusterCache(), namespaces=("team-a", "team-b"))
    paths = {r.collection.path for r in feed.reflectors}
    assert "/apis/kubegang.io/v1alpha1/namespaces/team-a/gpujobs" in paths
    assert "/api/v1/namespaces/team-b/pods" in paths
    assert "/apis/kubegang.io/v1alpha1/gpuqueues" in paths and "/api/v1/nodes" in paths
    assert not any(p.endswith("/gpujobs") and "/namespaces/" not in p for p in paths)
