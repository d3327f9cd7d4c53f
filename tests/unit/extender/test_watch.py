"""The watch feed against a scripted API server (httpx MockTransport): list, watch, bookmarks, 410."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._watch import NODES, PODS, ClusterFeed, Gone

from .test_ledger import node, pod  # type: ignore[import-not-found]

pytestmark = pytest.mark.asyncio(loop_scope="session")


class FakeApi:
    def __init__(self) -> None:
        self.nodes = [node("n0")]
        self.pods = [pod("p0", 8, node_name="n0")]
        self.gpujobs: list[dict[str, Any]] = []
        self.streams: list[list[dict[str, Any]]] = []
        self.watch_params: list[dict[str, str]] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        params = dict(request.url.params)
        path = request.url.path
        if params.get("watch"):
            self.watch_params.append(params)
            if not self.streams:
                return httpx2.Response(500, json={"kind": "Status", "code": 500})
            events = self.streams.pop(0)
            if events and events[0].get("status") == 410:
                return httpx2.Response(410, json={"kind": "Status", "code": 410})
            return httpx2.Response(200, content="\n".join(json.dumps(e) for e in events).encode())
        if path.endswith("/gpunodes"):
            return httpx2.Response(404, json={"kind": "Status", "code": 404})
        items = self.nodes if path == "/api/v1/nodes" else self.gpujobs if path.endswith("/gpujobs") else self.pods
        return httpx2.Response(200, json={"items": items, "metadata": {"resourceVersion": "10"}})


def _feed(api: FakeApi) -> ClusterFeed:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(api.handler), base_url="https://api")
    return ClusterFeed(client, Ledger(), ExtenderMetrics(), retry_seconds=0.001)


def _free(ledger: Ledger) -> dict[str, int]:
    return {n: sum(g["freeMilli"] == 1000 for g in v["gpus"]) for n, v in ledger.snapshot()["nodes"].items()}


async def test_list_then_watch_with_bookmarks() -> None:
    api = FakeApi()
    feed = _feed(api)
    versions = await feed.initial_sync()
    assert versions == {"nodes": "10", "gpunodes": "", "pods": "10", "gpujobs": "10"}
    assert feed.ledger.synced and _free(feed.ledger) == {"n0": 0}
    added = node("n1")
    added["metadata"]["resourceVersion"] = "11"
    api.streams.append([{"type": "ADDED", "object": added},
                        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}])
    assert await feed.watch_once(NODES, "10") == "20"
    assert api.watch_params[-1]["resourceVersion"] == "10"
    assert api.watch_params[-1]["allowWatchBookmarks"] == "true"
    assert _free(feed.ledger) == {"n0": 0, "n1": 8}
    api.streams.append([{"type": "DELETED", "object": {"metadata": {"uid": "p0", "resourceVersion": "21"}}}])
    assert await feed.watch_once(PODS, "20") == "21"
    assert _free(feed.ledger) == {"n0": 8, "n1": 8}


async def test_gone_relists_and_applies_the_difference() -> None:
    api = FakeApi()
    feed = _feed(api)
    await feed.initial_sync()
    api.streams.append([{"type": "ERROR", "object": {"code": 410, "message": "too old"}}])
    with pytest.raises(Gone):
        await feed.watch_once(NODES, "10")
    api.streams.append([{"status": 410}])
    with pytest.raises(Gone):
        await feed.watch_once(NODES, "10")
    api.nodes = [node("n1")]
    api.pods = []
    assert await feed.resync(NODES) == "10"
    await feed.resync(PODS)
    assert _free(feed.ledger) == {"n1": 8}


async def test_a_410_on_a_watch_is_counted_as_a_restart_for_gone() -> None:
    """docs/metrics.md: kubegang_extender_watch_restarts_total{resource, reason="gone"} when a watch's
    resourceVersion expired (410) and the resource is listed again."""
    api = FakeApi()
    feed = _feed(api)
    versions = await feed.initial_sync()

    def restarts(reason: str) -> float:
        value = feed.metrics.registry.get_sample_value("kubegang_extender_watch_restarts_total",
                                                       {"resource": "nodes", "reason": reason})
        return value or 0.0

    api.streams.append([{"status": 410}])
    api.nodes = [node("n1")]
    following = asyncio.create_task(feed.reflectors["nodes"].follow(versions["nodes"]))
    try:
        for _ in range(200):
            if restarts("gone") or following.done():
                break
            await asyncio.sleep(0.01)
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
    assert restarts("gone") == 1
    assert "n1" in _free(feed.ledger)  # listed again
    assert feed.metrics.registry.get_sample_value("kubegang_extender_watch_restarts_total",
                                                  {"resource": "pods", "reason": "gone"}) is None


async def test_requeue_annotates_waiting_pods_and_tolerates_vanished_ones() -> None:
    patches: list[tuple[str, str, dict[str, Any]]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.method == "PATCH"
        patches.append((request.url.path, request.headers["content-type"], json.loads(request.content)))
        if request.url.path.endswith("/gone"):
            return httpx2.Response(404, json={"kind": "Status", "code": 404})
        if request.url.path.endswith("/forbidden"):
            return httpx2.Response(403, json={"kind": "Status", "code": 403})
        return httpx2.Response(200, json={})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="https://api")
    feed = ClusterFeed(client, Ledger(), ExtenderMetrics(), retry_seconds=0.001)
    assert await feed.requeue([("ns", "a"), ("ns", "gone"), ("ns", "forbidden"), ("other", "b")]) == 2
    assert [p[0] for p in patches] == ["/api/v1/namespaces/ns/pods/a", "/api/v1/namespaces/ns/pods/gone",
                                       "/api/v1/namespaces/ns/pods/forbidden", "/api/v1/namespaces/other/pods/b"]
    assert all(p[1] == "application/merge-patch+json" for p in patches)
    assert "kubegang.io/requeued-at" in patches[0][2]["metadata"]["annotations"]
