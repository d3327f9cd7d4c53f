"""The agent's only Kubernetes I/O: a thin adapter over lightkube's AsyncClient (and, for a replay
agent's node list, ``kubegang.restclient``, which can ask for metadata only).

Everything above it (what to write, when) is pure and tested without a cluster; this module just
turns "create GPUNode n" (answering the conditions it already shows), "merge-patch its status",
"merge-patch node n's labels", "list the nodes I serve" and "tell me when a GPUNode is deleted" into
API calls, and maps a 404 on the status patch to :class:`GPUNodeMissing` so the publisher can
recreate an object someone deleted.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lightkube import ApiError, AsyncClient, operators
from lightkube.generic_resource import create_global_resource
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from pydantic import ValidationError

from kubegang.api import Condition
from kubegang.api.gpunode import GPUNode
from kubegang.restclient import METADATA_LIST, RestClient

log = logging.getLogger(__name__)

GPUNodeResource = create_global_resource("kubegang.io", "v1alpha1", GPUNode.crd.kind, GPUNode.crd.plural)


class GPUNodeMissing(Exception):
    """The GPUNode to patch does not exist (never created, or deleted by someone)."""


class NodeMissing(Exception):
    """The Node a GPUNode would belong to does not exist (deleted, or not registered yet)."""


@dataclass(frozen=True)
class NodeInfo:
    """What the replay supervisor needs of a node."""

    name: str
    annotations: Mapping[str, str]
    uid: str = ""
    """Changes when the node is deleted and created again under the same name."""


class Sink(Protocol):
    """Where the publisher writes; :class:`KubeSink` in production, a recorder in unit tests."""

    async def create_gpunode(self, name: str) -> Sequence[Condition] | None:
        """Create an empty GPUNode ``name``, owned by its Node; if it already exists, make sure the
        current Node owns it and answer the conditions its status shows (None or empty for a new
        one), whose transition times a publisher that starts carries on. Raise
        :class:`NodeMissing` when there is no such Node."""
        ...

    async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource; raise :class:`GPUNodeMissing` on 404."""
        ...

    async def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Merge-patch node labels (``None`` removes a label)."""
        ...


class ClusterSink(Sink, Protocol):
    """A sink that can also list the nodes a replay agent serves and report deleted GPUNodes."""

    async def list_nodes(self, selector: str) -> list[NodeInfo]:
        """Nodes matching a label selector (``type=kwok``)."""
        ...

    def deleted_gpunodes(self, name: str | None = None) -> AsyncIterator[str]:
        """Names of GPUNodes as they are deleted (only ``name`` if given), until the stream ends
        or fails; the caller restarts it."""
        ...


def parse_selector(selector: str) -> dict[str, Any]:
    """``type=kwok,zone!=a,gpu`` → lightkube's label filter; a ValueError names the bad term."""
    result: dict[str, Any] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            result[key] = operators.not_equal(value)
        elif "=" in term:
            key, value = (part.strip().strip("=") for part in term.split("=", 1))
            result[key] = value
        else:
            key = term
            result[key] = operators.exists()
        if not key:
            raise ValueError(f"label selector {selector!r}: empty key in {term!r}")
    if not result:
        raise ValueError(f"label selector {selector!r} is empty")
    return result


def published_conditions(name: str, gpunode: Any) -> list[Condition]:
    """The conditions a GPUNode read from the API server shows. An entry that is not a valid
    condition (an edit by hand) is skipped: the publisher then gives that condition a fresh time."""
    status = getattr(gpunode, "status", None)
    entries = status.get("conditions") if isinstance(status, Mapping) else None
    conditions: list[Condition] = []
    for entry in entries if isinstance(entries, list) else ():
        try:
            conditions.append(Condition.model_validate(entry))
        except ValidationError as exc:
            log.info("GPUNode %s: condition %r not carried on: %s", name, entry, exc)
    return conditions


MAX_IN_FLIGHT = 16
"""Writes under way at once. A replay agent serving every node of a shape started a publisher per
node at the same moment: 1,024 GPUNode writes sent at once on a loaded 2-core API server all ran into
their 10 s timeout and were sent again at the next poll, so the agent never finished its first pass
(``hack/cluster kubegang up`` gave up after 265 s). Waiting for a slot, a write is not yet sent, so
its timeout does not run. A DaemonSet's agent serves one node and never waits."""


class KubeSink:
    """:class:`Sink` over the API server."""

    def __init__(self, client: AsyncClient, field_manager: str = "kubegang-agent",
                 max_in_flight: int = MAX_IN_FLIGHT, *, lister: RestClient | None = None) -> None:
        self._client = client
        self._lister = lister
        """Lists nodes (a replay agent's discovery poll); a DaemonSet's agent lists nothing."""
        self._field_manager = field_manager
        self._slots = asyncio.Semaphore(max_in_flight)

    async def create_gpunode(self, name: str) -> list[Condition]:
        async with self._slots:
            return await self._create_gpunode(name)

    async def _create_gpunode(self, name: str) -> list[Condition]:
        # Owned by its Node, so the garbage collector deletes the GPUNode with the node (the agent
        # that would clean it up is gone by then). No blockOwnerDeletion: that would need
        # nodes/finalizers, more than the agent may do. No node, no GPUNode: one created without an
        # owner (or owned by a node since deleted) would outlive the node, and a node registered
        # again under the same name would inherit it.
        try:
            node = await self._client.get(Node, name)
        except ApiError as exc:
            if exc.status.code == 404:
                raise NodeMissing(name) from exc
            raise
        uid = node.metadata.uid if node.metadata is not None else None
        if not uid:
            raise NodeMissing(name)
        owner = OwnerReference(apiVersion="v1", kind="Node", name=name, uid=uid)
        try:
            await self._client.create(
                GPUNodeResource(metadata=ObjectMeta(name=name, ownerReferences=[owner])),
                field_manager=self._field_manager,
            )
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            existing = await self._client.get(GPUNodeResource, name)
            await self._adopt(name, existing, owner)
            return published_conditions(name, existing)
        return []

    async def _adopt(self, name: str, existing: Any, owner: OwnerReference) -> None:
        """An existing GPUNode is made the current node's: one left by an earlier node of the same
        name (its owner's uid no longer exists) would otherwise be collected, or kept without owner."""
        owners = (existing.metadata.ownerReferences if existing.metadata is not None else None) or []
        if [(o.kind, o.uid) for o in owners] == [("Node", owner.uid)]:
            return
        log.info("GPUNode %s: owner set to node uid %s", name, owner.uid)
        await self._client.patch(
            GPUNodeResource,
            name,
            {"metadata": {"ownerReferences": [owner.to_dict()]}},
            patch_type=PatchType.MERGE,
            field_manager=self._field_manager,
        )

    async def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        async with self._slots:
            await self._patch_status(name, status)

    async def _patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            await self._client.patch(
                GPUNodeResource.Status,
                name,
                {"status": dict(status)},
                patch_type=PatchType.MERGE,
                field_manager=self._field_manager,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                raise GPUNodeMissing(name) from exc
            raise

    async def patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        async with self._slots:
            await self._patch_labels(name, labels)

    async def _patch_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        await self._client.patch(
            Node,
            name,
            {"metadata": {"labels": dict(labels)}},
            patch_type=PatchType.MERGE,
            field_manager=self._field_manager,
        )

    async def deleted_gpunodes(self, name: str | None = None) -> AsyncIterator[str]:
        # A field selector on the name lets the DaemonSet's agent watch only its own object.
        fields: dict[str, str | operators.BinaryOperator | operators.SequenceOperator] | None = (
            {"metadata.name": name} if name else None
        )
        async for event, obj in self._client.watch(GPUNodeResource, fields=fields):
            if event == "DELETED" and obj.metadata is not None and obj.metadata.name:
                yield obj.metadata.name

    async def list_nodes(self, selector: str) -> list[NodeInfo]:
        # The nodes' metadata only, from the API server's watch cache (resourceVersion=0): a replay
        # agent polls every node of the cluster every few seconds, and lightkube's full Node models
        # of 1,024 kwok nodes were most of its CPU (bench.e2e.node_list_cost).
        if self._lister is None:
            raise RuntimeError("this KubeSink was made without a lister: only a replay agent lists nodes")
        parse_selector(selector)  # a bad selector is named here, not by the API server's 400
        query = urllib.parse.urlencode({"labelSelector": selector, "resourceVersion": "0"})
        answer = await self._lister.request("GET", f"/api/v1/nodes?{query}", accept=METADATA_LIST)
        nodes: list[NodeInfo] = []
        for item in answer.get("items") or ():
            meta = item.get("metadata") or {}
            if meta.get("name"):
                annotations = dict(meta.get("annotations") or {})
                nodes.append(NodeInfo(str(meta["name"]), annotations, str(meta.get("uid") or "")))
        return nodes
