"""KubeSink's ownership rules, over a small in-memory stand-in for lightkube's AsyncClient (the
cluster-level behaviour, a node deleted and registered again, is in tests/e2e/agent).

A GPUNode belongs to exactly its current Node: none is created for a node that is not there, and
one left by an earlier node of the same name is taken over rather than left to be collected."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference, Status
from lightkube.resources.core_v1 import Node

from kubegang.agent._kube import GPUNodeResource, KubeSink, NodeMissing


def api_error(code: int) -> ApiError:
    error = ApiError.__new__(ApiError)
    error.status = Status(code=code, message=f"HTTP {code}")
    return error


class FakeClient:
    """Nodes and GPUNodes by name; create/get/merge-patch as the API server answers them."""

    def __init__(self) -> None:
        self.nodes: dict[str, str] = {}  # name -> uid
        self.gpunodes: dict[str, list[dict[str, Any]]] = {}  # name -> ownerReferences
        self.statuses: dict[str, dict[str, Any]] = {}  # name -> status, where one was written
        self.patches: list[dict[str, Any]] = []

    async def get(self, resource: Any, name: str) -> Any:
        if resource is Node:
            if name not in self.nodes:
                raise api_error(404)
            return Node(metadata=ObjectMeta(name=name, uid=self.nodes[name]))
        if name not in self.gpunodes:
            raise api_error(404)
        owners = [OwnerReference(**o) for o in self.gpunodes[name]]
        found = GPUNodeResource(metadata=ObjectMeta(name=name, ownerReferences=owners or None))
        if name in self.statuses:
            found["status"] = self.statuses[name]
        return found

    async def create(self, obj: Any, field_manager: str | None = None) -> Any:
        name = obj.metadata.name
        if name in self.gpunodes:
            raise api_error(409)
        self.gpunodes[name] = [o.to_dict() for o in obj.metadata.ownerReferences or []]
        return obj

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **_: Any) -> Any:
        self.patches.append(body)
        if name not in self.gpunodes:
            raise api_error(404)
        if "ownerReferences" in body.get("metadata", {}):
            self.gpunodes[name] = body["metadata"]["ownerReferences"]
        return None


def owner_uids(client: FakeClient, name: str) -> list[str]:
    return [o["uid"] for o in client.gpunodes[name]]


async def test_a_new_gpunode_is_owned_by_its_node() -> None:
    client = FakeClient()
    client.nodes["n1"] = "uid-1"
    await KubeSink(client).create_gpunode("n1")  # type: ignore[arg-type]
    assert client.gpunodes["n1"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}]


async def test_no_gpunode_without_its_node() -> None:
    client = FakeClient()
    with pytest.raises(NodeMissing):
        await KubeSink(client).create_gpunode("gone")  # type: ignore[arg-type]
    assert client.gpunodes == {}


@pytest.mark.parametrize("left_owners", [[], [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-old"}]])
async def test_a_gpunode_left_by_an_earlier_node_of_the_name_is_taken_over(left_owners: list[dict[str, Any]]) -> None:
    client = FakeClient()
    client.nodes["n1"] = "uid-new"
    client.gpunodes["n1"] = list(left_owners)
    await KubeSink(client).create_gpunode("n1")  # type: ignore[arg-type]
    assert owner_uids(client, "n1") == ["uid-new"]


async def test_a_gpunode_already_owned_by_its_node_is_not_written() -> None:
    client = FakeClient()
    client.nodes["n1"] = "uid-1"
    sink = KubeSink(client)  # type: ignore[arg-type]
    await sink.create_gpunode("n1")
    await sink.create_gpunode("n1")
    assert client.patches == []
    assert owner_uids(client, "n1") == ["uid-1"]


async def test_an_existing_gpunode_answers_the_conditions_it_shows() -> None:
    """What a publisher that starts carries on from (their transition times); an entry that is not
    a condition is left out, and a GPUNode just created shows none."""
    client = FakeClient()
    client.nodes["n1"] = "uid-1"
    sink = KubeSink(client)  # type: ignore[arg-type]
    assert await sink.create_gpunode("n1") == []
    ready = {"type": "Ready", "status": "True", "reason": "ReadingsPublished", "message": "8 GPUs read",
             "lastTransitionTime": "2025-12-01T08:00:00Z"}
    client.statuses["n1"] = {"gpuCount": 8, "conditions": [ready, {"type": "GPUHealthy"}]}
    conditions = await sink.create_gpunode("n1")
    assert [(c.type, c.status, c.last_transition_time.isoformat()) for c in conditions] == [
        ("Ready", "True", "2025-12-01T08:00:00+00:00")]


class RecordingLister:
    """A RestClient stand-in that answers a node list and records what was asked."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.asked: list[tuple[str, str, str]] = []

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "",
                      accept: str = "") -> dict[str, Any]:
        self.asked.append((method, path, accept))
        return {"kind": "PartialObjectMetadataList", "items": self.items}


async def test_a_replay_agent_lists_only_the_nodes_metadata_from_the_watch_cache() -> None:
    from kubegang.restclient import METADATA_LIST

    lister = RecordingLister([
        {"metadata": {"name": "n1", "uid": "u1", "annotations": {"kubegang.io/replay-dump": "h100"}}},
        {"metadata": {"name": "n2", "uid": "u2"}},
        {"metadata": {}},  # nameless: skipped
    ])
    sink = KubeSink(FakeClient(), lister=lister)  # type: ignore[arg-type]
    nodes = await sink.list_nodes("type=kwok")
    assert [(n.name, n.uid, dict(n.annotations)) for n in nodes] == [
        ("n1", "u1", {"kubegang.io/replay-dump": "h100"}), ("n2", "u2", {})]
    [(method, path, accept)] = lister.asked
    assert (method, accept) == ("GET", METADATA_LIST)
    assert path == "/api/v1/nodes?labelSelector=type%3Dkwok&resourceVersion=0"
    with pytest.raises(ValueError, match="empty key"):
        await sink.list_nodes("=x")
    with pytest.raises(RuntimeError, match="without a lister"):
        await KubeSink(FakeClient()).list_nodes("type=kwok")  # type: ignore[arg-type]
