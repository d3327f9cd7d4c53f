"""The leader's watches: list + watch every collection the cache follows, and say when all are listed.

Only the leader runs them (a standby campaigns and nothing else: ``_standby``). Each collection has
a reflector (``kubegang.listwatch``) whose events go straight into ``ClusterCache`` on the event
loop; the cache never blocks, so an event costs a JSON decode and a dict update. The first list of
every collection is the new leader's rebuild: the leader's loop waits for :meth:`CacheFeed.synced`
before its first cycle, so the quota tree is rebuilt from *all* admitted jobs, never a prefix of
them (a watch cache that is still replaying its listing would give a prefix).

One pod stream serves every kind of gang pod: kubegang's own (by ``kubegang.io/job-uid``), those of
labelled pod groups and RayClusters, and those naming a native PodGroup in ``spec.schedulingGroup``
(no selector reaches a spec field, so pods are watched unselected and told apart here).

Why not Kopf any more: its per-event machinery was a third of the leader's CPU in a burst, for a
cache that needs none of it (decisions.md, "The operator's watches are plain list + watch").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import httpx2

from kubegang.api import POD_GROUP_LABEL, RAY_CLUSTER_LABEL, scheduling_group_name
from kubegang.backoff import Backoff
from kubegang.listwatch import Collection, Reflector, identity, name_of, uid_of
from kubegang.operator._cache import ClusterCache
from kubegang.podcontract import JOB_UID_LABEL

log = logging.getLogger("kubegang.operator.watches")

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The node label (GPU feature discovery's) naming the GPU model; flavours that match it are products."""


def _pod_identity(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a pod's deletion needs: identity, labels, and the native PodGroup it names."""
    stub = identity(pod)
    group = (pod.get("spec") or {}).get("schedulingGroup")
    if group is not None:
        stub["spec"] = {"schedulingGroup": group}
    return stub


def _namespaced(group_version: str, plural: str, namespaces: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, path) of a namespaced collection: cluster-wide, or once per watched namespace."""
    base = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
    if not namespaces:
        return [(plural, f"{base}/{plural}")]
    return [(f"{plural}/{ns}", f"{base}/namespaces/{ns}/{plural}") for ns in namespaces]


class CacheFeed:
    """Keeps a :class:`ClusterCache` in step with the API server, one reflector per collection."""

    def __init__(self, client: httpx2.AsyncClient, cache: ClusterCache, *, namespaces: tuple[str, ...] = (),
                 retry_seconds: float = 1.0, max_retry_seconds: float = 21.0) -> None:
        self.cache = cache
        self.retry_seconds = retry_seconds
        """Ceiling of the first delay after a failed list or watch; it doubles per failure (jittered)."""
        self.max_retry_seconds = max(max_retry_seconds, retry_seconds)
        """Cap of that ceiling."""
        sinks: list[tuple[Collection, Any]] = [
            (Collection("gpuqueues", "/apis/kubegang.io/v1alpha1/gpuqueues", name_of), self._queue),
            (Collection("nodes", "/api/v1/nodes", name_of, label_selector=GPU_PRODUCT_LABEL), self._node),
            (Collection("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses", name_of), self._priority),
        ]
        for name, path in _namespaced("kubegang.io/v1alpha1", "gpujobs", namespaces):
            sinks.append((Collection(name, path, uid_of), self._job))
        for name, path in _namespaced("v1", "pods", namespaces):
            sinks.append((Collection(name, path, uid_of, tombstone=_pod_identity), self._pod))
        # Served only where KubeRay is installed / the GenericWorkload gate is on: waited for, not failed.
        for name, path in _namespaced("ray.io/v1", "rayclusters", namespaces):
            sinks.append((Collection(name, path, uid_of, optional=True), self._raycluster))
        for kind, plural in (("PodGroup", "podgroups"), ("Workload", "workloads")):
            for name, path in _namespaced("scheduling.k8s.io/v1alpha2", plural, namespaces):
                sinks.append((Collection(name, path, uid_of, optional=True), self._scheduling_object(kind)))
        self.reflectors = [Reflector(client, c, sink, backoff=self._backoff) for c, sink in sinks]
        self._synced = asyncio.Event()

    def _backoff(self) -> Backoff:
        return Backoff(initial_seconds=self.retry_seconds, max_seconds=self.max_retry_seconds)

    async def run(self) -> None:
        """List every collection (a collection not served counts as listed, empty), then follow all."""
        async def one(reflector: Reflector) -> None:
            rv = await reflector.first_list()
            listed.add(reflector.collection.name)
            if len(listed) == len(self.reflectors):
                log.info("listed: %d jobs, %d queues, %d gangs with pods", len(self.cache.jobs),
                         len(self.cache.queues), len(self.cache.pods))
                self._synced.set()
            await reflector.follow(rv)

        listed: set[str] = set()
        async with asyncio.TaskGroup() as group:
            for reflector in self.reflectors:
                group.create_task(one(reflector), name=f"kubegang-watch-{reflector.collection.name}")

    async def synced(self) -> None:
        """Return once every collection has been listed into the cache."""
        await self._synced.wait()

    # -- events into the cache ----------------------------------------------------------------------

    def _job(self, kind: str, body: dict[str, Any]) -> None:
        uid = uid_of(body)
        if kind == "DELETED":
            self.cache.remove_job(uid)
        elif self.cache.upsert_job(body) is None:
            meta = body.get("metadata") or {}
            invalid = self.cache.invalid_jobs.get(uid)
            log.error("GPUJob %s/%s is invalid: %s", meta.get("namespace"), meta.get("name"),
                      invalid.error if invalid is not None else "unknown")

    def _queue(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.cache.remove_queue(name_of(body))
        else:
            self.cache.upsert_queue(body)

    def _pod(self, kind: str, body: dict[str, Any]) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        if JOB_UID_LABEL in labels:
            if kind == "DELETED":
                self.cache.remove_pod(body)
            else:
                self.cache.upsert_pod(body)
        if POD_GROUP_LABEL in labels or RAY_CLUSTER_LABEL in labels or \
                scheduling_group_name(body.get("spec") or {}) is not None:
            if kind == "DELETED":
                self.cache.remove_source_pod(body)
            else:
                self.cache.upsert_source_pod(body)

    def _raycluster(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = body.get("metadata") or {}
            self.cache.remove_raycluster(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        else:
            self.cache.upsert_raycluster(body)

    def _scheduling_object(self, kind: str) -> Any:
        def record(event: str, body: dict[str, Any]) -> None:
            self.cache.record_scheduling_object(kind, body, deleted=event == "DELETED")
        return record

    def _node(self, kind: str, body: dict[str, Any]) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        self.cache.set_node_product(name_of(body), None if kind == "DELETED" else labels.get(GPU_PRODUCT_LABEL))

    def _priority(self, kind: str, body: dict[str, Any]) -> None:
        self.cache.set_priority(name_of(body), None if kind == "DELETED" else int(body.get("value") or 0))
