"""Kopf handlers that feed the cache, and the full reload a new leader does.

Every replica runs these (they only read): event handlers for GPUJobs, GPUQueues, PriorityClasses and
the pods of gangs keep ``ClusterCache`` current. They are coroutines: Kopf runs plain functions in a
thread pool, where a cache update would race the leader's loop reading the same dicts and set its
``asyncio.Event`` from a foreign thread (which need not wake the loop); the updates are quick and
never block, so they run on the loop itself. They never patch what they watch, so Kopf keeps no
progress annotations or finalizers on user objects and a standby's handlers are harmless. All
decisions happen in the leader's loop (``_controller``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import httpx2
import kopf
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import GenericGlobalResource
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from kubegang.api import POD_GROUP_LABEL, RAY_CLUSTER_LABEL, scheduling_group_name
from kubegang.backoff import Backoff, RetrySchedule
from kubegang.operator._cache import ClusterCache
from kubegang.operator._kopf_essence import EventsOnlyDiffBase
from kubegang.operator._kube import (
    GPUJobResource,
    GPUQueueResource,
    PodGroupResource,
    RayClusterResource,
    WorkloadResource,
)
from kubegang.podcontract import JOB_UID_LABEL

log = logging.getLogger("kubegang.operator.watches")

KOPF_RETRIES = RetrySchedule(Backoff(initial_seconds=1.0, max_seconds=21.0), attempts=8)
"""Kopf's API retries: as many as its default (8), up to the same longest delay (21 s), jittered."""

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The node label (GPU feature discovery's) naming the GPU model; flavours that match it are products."""


def build_registry(cache: ClusterCache, *, kubeconfig: str | None, api_timeout_seconds: float) -> Any:
    """A Kopf registry whose handlers keep ``cache`` current."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # our events name jobs and reasons; Kopf's would be noise
        settings.persistence.diffbase_storage = EventsOnlyDiffBase()  # no per-event deep copy (_kopf_essence)
        settings.networking.request_timeout = api_timeout_seconds
        settings.networking.connect_timeout = api_timeout_seconds
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        # Kopf walks this iterable afresh for each failing API request, its watch requests included:
        # jittered delays (kubegang.backoff) in place of its fixed 1, 1, 2, 3, 5, ... so that the
        # replicas do not all come back in the same second after an API server restart.
        settings.networking.error_backoffs = KOPF_RETRIES

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        if kubeconfig:
            os.environ["KUBECONFIG"] = kubeconfig
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event("kubegang.io", "v1alpha1", "gpujobs", registry=registry)
    async def job_event(type: str | None, body: Mapping[str, Any], uid: str, **_: Any) -> None:
        if type == "DELETED":
            cache.remove_job(uid)
        else:
            view = cache.upsert_job(body)
            if view is None:
                log.error(
                    "GPUJob %s/%s is invalid: %s",
                    body["metadata"].get("namespace"),
                    body["metadata"].get("name"),
                    cache.invalid_jobs.get(uid),
                )

    @kopf.on.event("kubegang.io", "v1alpha1", "gpuqueues", registry=registry)
    async def queue_event(type: str | None, body: Mapping[str, Any], name: str, **_: Any) -> None:
        if type == "DELETED":
            cache.remove_queue(name)
        else:
            cache.upsert_queue(body)

    @kopf.on.event("", "v1", "pods", labels={JOB_UID_LABEL: kopf.PRESENT}, registry=registry)
    async def pod_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        if type == "DELETED":
            cache.remove_pod(body)
        else:
            cache.upsert_pod(body)

    # Gangs whose pods another controller makes (``_sources``): labelled RayClusters (KubeRay's CRD; Kopf
    # serves the handler once the CRD exists) and the pods of pod groups and of RayClusters.
    @kopf.on.event("ray.io", "v1", "rayclusters", registry=registry)
    async def raycluster_event(type: str | None, body: Mapping[str, Any], name: str, namespace: str | None,
                               **_: Any) -> None:
        if type == "DELETED":
            cache.remove_raycluster(namespace or "", name)
        else:
            cache.upsert_raycluster(body)

    @kopf.on.event("", "v1", "pods", labels={POD_GROUP_LABEL: kopf.PRESENT}, registry=registry)
    async def group_pod_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        if type == "DELETED":
            cache.remove_source_pod(body)
        else:
            cache.upsert_source_pod(body)

    @kopf.on.event("", "v1", "pods", labels={RAY_CLUSTER_LABEL: kopf.PRESENT}, registry=registry)
    async def ray_pod_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        if type == "DELETED":
            cache.remove_source_pod(body)
        else:
            cache.upsert_source_pod(body)

    # Kubernetes' own PodGroups and Workloads (scheduling.k8s.io/v1alpha2, served only with the
    # GenericWorkload gate; like KubeRay's CRD, Kopf serves these handlers only where the API exists)
    # and the pods that name a PodGroup in spec.schedulingGroup (Kopf filters its one pod watch here).
    @kopf.on.event("scheduling.k8s.io", "v1alpha2", "podgroups", registry=registry)
    async def podgroup_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        cache.record_scheduling_object("PodGroup", body, deleted=type == "DELETED")

    @kopf.on.event("scheduling.k8s.io", "v1alpha2", "workloads", registry=registry)
    async def workload_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        cache.record_scheduling_object("Workload", body, deleted=type == "DELETED")

    @kopf.on.event("", "v1", "pods", when=_names_scheduling_group, registry=registry)
    async def scheduling_group_pod_event(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        if type == "DELETED":
            cache.remove_source_pod(body)
        else:
            cache.upsert_source_pod(body)

    @kopf.on.event("", "v1", "nodes", labels={GPU_PRODUCT_LABEL: kopf.PRESENT}, registry=registry)
    async def node_event(type: str | None, body: Mapping[str, Any], name: str, **_: Any) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        cache.set_node_product(name, None if type == "DELETED" else labels.get(GPU_PRODUCT_LABEL))

    @kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses", registry=registry)
    async def priority_event(type: str | None, body: Mapping[str, Any], name: str, **_: Any) -> None:
        cache.set_priority(name, None if type == "DELETED" else int(body.get("value") or 0))

    return registry


def _names_scheduling_group(spec: Mapping[str, Any], **_: Any) -> bool:
    return scheduling_group_name(spec) is not None


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, GenericGlobalResource) or hasattr(obj, "to_dict"):
        return dict(obj.to_dict())
    return dict(obj)


async def resync_from_api(client: AsyncClient, cache: ClusterCache) -> None:
    """Reload every object the leader decides on, so a new leader starts from the API's truth.

    The watch streams may still be replaying their initial listing when leadership arrives; a list
    here guarantees the quota tree is rebuilt from *all* admitted jobs, never a prefix of them.
    """
    async for queue in client.list(GPUQueueResource):
        cache.upsert_queue(_as_dict(queue))
    async for node in client.list(Node, labels={GPU_PRODUCT_LABEL: None}):
        if node.metadata is not None and node.metadata.name:
            cache.set_node_product(node.metadata.name, (node.metadata.labels or {}).get(GPU_PRODUCT_LABEL))
    async for pc in client.list(PriorityClass):
        if pc.metadata is not None and pc.metadata.name:
            cache.set_priority(pc.metadata.name, int(pc.value or 0))
    seen_jobs: set[str] = set()
    async for job in client.list(GPUJobResource, namespace="*"):
        body = _as_dict(job)
        cache.upsert_job(body)
        seen_jobs.add(str(body["metadata"]["uid"]))
    for uid in set(cache.jobs) - seen_jobs:
        cache.remove_job(uid)
    seen_pods: dict[str, set[str]] = {}
    async for pod in client.list(Pod, namespace="*", labels={JOB_UID_LABEL: None}):
        body = _as_dict(pod)
        cache.upsert_pod(body)
        uid = body["metadata"]["labels"][JOB_UID_LABEL]
        seen_pods.setdefault(uid, set()).add(body["metadata"]["name"])
    for uid, pods in list(cache.pods.items()):
        for name in set(pods) - seen_pods.get(uid, set()):
            cache.remove_pod({"metadata": {"name": name, "labels": {JOB_UID_LABEL: uid}}})
    await _resync_sources(client, cache)
    log.info("resynced: %d jobs, %d queues, %d gangs with pods", len(cache.jobs), len(cache.queues), len(cache.pods))


async def _served(client: AsyncClient, resource: Any) -> list[dict[str, Any]] | None:
    """Every object of ``resource`` in every namespace, or None where the API server does not serve it
    (KubeRay not installed, scheduling.k8s.io/v1alpha2 not enabled)."""
    try:
        return [_as_dict(obj) async for obj in client.list(resource, namespace="*")]
    except (ApiError, httpx2.HTTPStatusError) as exc:
        # 404: not served. The API server answers an unknown group or version with a plain-text 404,
        # which lightkube raises as httpx2's error, not as an ApiError.
        code = exc.status.code if isinstance(exc, ApiError) else exc.response.status_code
        if code != 404:
            raise
        return None


async def _resync_sources(client: AsyncClient, cache: ClusterCache) -> None:
    """Reload RayClusters (when KubeRay's CRD exists), native PodGroups and Workloads (when the API
    serves them) and the pods of pod groups, native PodGroups and RayClusters."""
    seen: set[tuple[str, str]] = set()
    for body in await _served(client, RayClusterResource) or []:
        cache.upsert_raycluster(body)
        seen.add((str(body["metadata"].get("namespace")), str(body["metadata"].get("name"))))
    for key in set(cache.rayclusters) - seen:
        cache.remove_raycluster(*key)
    cache.podgroups.clear()
    cache.workloads.clear()
    for kind, resource in (("PodGroup", PodGroupResource), ("Workload", WorkloadResource)):
        for body in await _served(client, resource) or []:
            cache.record_scheduling_object(kind, body)
    cache.source_pods.clear()
    for label in (POD_GROUP_LABEL, RAY_CLUSTER_LABEL):
        async for pod in client.list(Pod, namespace="*", labels={label: None}):
            cache.upsert_source_pod(_as_dict(pod))
    if cache.podgroups:
        # No selector reaches spec.schedulingGroup: every pod is listed, but only where PodGroups exist.
        async for pod in client.list(Pod, namespace="*"):
            body = _as_dict(pod)
            if scheduling_group_name(body.get("spec") or {}) is not None:
                cache.upsert_source_pod(body)
