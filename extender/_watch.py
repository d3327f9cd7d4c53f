"""All of the extender's Kubernetes I/O: list + watch Nodes, GPUNodes, pods and GPUJobs into the ledger.

Kueue-like: a long-lived cache fed by watches. The protocol (paginated lists, watches from the list's
version with bookmarks, relists on 410 Gone applied as a difference, jittered reconnects) is
``kubegang.listwatch``, shared with the operator; this module says which collections the ledger needs
and how each event reaches it. Nothing here decides anything: events go to :class:`Ledger` as plain
JSON.

Pods are watched cluster-wide and filtered here (the API cannot select on resource requests);
only pods that hold GPUs are kept by the ledger. GPUJobs are watched for one thing: the placement
an admitted job's status records, which the ledger holds until the job's pods exist.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import json
import logging
from typing import Any

import httpx2
from pydantic import ValidationError

from kubegang.api.gpunode import GPUNodeStatus
from kubegang.backoff import Backoff
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._pods import REQUEUE_ANNOTATION
from kubegang.listwatch import (
    Collection,
    Gone,
    NotServed,
    Reflector,
    Sink,
    api_client,
    list_collection,
    name_of,
    uid_of,
)

__all__ = ["GPUJOBS", "GPUNODES", "NODES", "PODS", "ClusterFeed", "Gone", "api_client", "gpunode_status"]

log = logging.getLogger(__name__)

NODES = Collection("nodes", "/api/v1/nodes", name_of)
GPUNODES = Collection("gpunodes", "/apis/kubegang.io/v1alpha1/gpunodes", name_of, optional=True)
"""Optional: until the CRD is installed, nodes are placeable from Node objects alone."""
PODS = Collection("pods", "/api/v1/pods", uid_of)
GPUJOBS = Collection("gpujobs", "/apis/kubegang.io/v1alpha1/gpujobs", uid_of, optional=True)


def gpunode_status(obj: dict[str, Any]) -> GPUNodeStatus | None:
    """The status of a GPUNode object, or None when absent or invalid (logged)."""
    status = obj.get("status")
    if status is None:
        return None
    try:
        return GPUNodeStatus.model_validate(status)
    except ValidationError as exc:
        log.warning("GPUNode %s has an invalid status, ignored: %s", name_of(obj), exc)
        return None


class ClusterFeed:
    """Keeps a :class:`Ledger` in step with the API server: one reflector per collection."""

    def __init__(self, client: httpx2.AsyncClient, ledger: Ledger, metrics: ExtenderMetrics,
                 *, retry_seconds: float = 1.0, max_retry_seconds: float = 30.0) -> None:
        self.client = client
        self.ledger = ledger
        self.metrics = metrics
        self.retry_seconds = retry_seconds
        """Ceiling of the first delay after a failed list or watch; it doubles per failure (jittered)."""
        self.max_retry_seconds = max(max_retry_seconds, retry_seconds)
        """Cap of that ceiling."""
        self.reflectors = {
            r.name: Reflector(client, r, self._sink(r), backoff=self._backoff, restarted=self._restarted)
            for r in (NODES, GPUNODES, PODS, GPUJOBS)
        }

    def _backoff(self) -> Backoff:
        """One per retry loop (``kubegang.backoff``): after an API server restart the extender's watches
        come back spread out and less often while it stays down, not every ``retry_seconds`` in step."""
        return Backoff(initial_seconds=self.retry_seconds, max_seconds=self.max_retry_seconds)

    def _restarted(self, name: str, why: str) -> None:
        self.metrics.watch_restarts.labels(name, why).inc()

    def _sink(self, resource: Collection) -> Sink:
        return lambda kind, obj: self._into_ledger(resource, kind, obj)

    async def requeue(self, pods: list[tuple[str, str]]) -> int:
        """Annotate waiting pods so kube-scheduler retries them (the ledger says which, and when).

        A pod that vanished meanwhile (404) is fine; other failures are logged and skipped: the
        pod is then retried by kube-scheduler's own five-minute flush at the latest.
        """
        stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        body = json.dumps({"metadata": {"annotations": {REQUEUE_ANNOTATION: stamp}}})
        done = 0
        for namespace, name in pods:
            try:
                resp = await self.client.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", content=body,
                                               headers={"Content-Type": "application/merge-patch+json"})
            except httpx2.HTTPError as exc:
                log.warning("could not requeue pod %s/%s: %s", namespace, name, exc)
                continue
            if resp.status_code == 404:
                continue
            if resp.is_error:
                log.warning("could not requeue pod %s/%s: HTTP %d %s", namespace, name, resp.status_code,
                            resp.text[:200])
                continue
            done += 1
        if pods:
            log.info("reserved GPUs were freed: asked kube-scheduler to retry %d waiting GPU pod(s)", done)
        return done

    async def list(self, resource: Collection) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``resource`` (all pages) and the list's resourceVersion; none where the
        API server does not serve an optional one yet."""
        try:
            return await list_collection(self.client, resource)
        except NotServed:
            return [], ""

    async def initial_sync(self) -> dict[str, str]:
        """List every resource and load the ledger at once; returns each resourceVersion."""
        (nodes, nrv), (gpunodes, grv), (pods, prv), (jobs, jrv) = await asyncio.gather(
            self.list(NODES), self.list(GPUNODES), self.list(PODS), self.list(GPUJOBS))
        statuses = {name_of(o): s for o in gpunodes if (s := gpunode_status(o)) is not None}
        self.ledger.replace_all(nodes, statuses, pods, jobs)
        for resource, items in ((NODES, nodes), (GPUNODES, gpunodes), (PODS, pods), (GPUJOBS, jobs)):
            self.reflectors[resource.name].seed(items)
        self.ledger.synced = True
        # The listed cluster is long-lived: keep it out of the cyclic GC's scans (steadier p99).
        gc.collect()
        gc.freeze()
        return {"nodes": nrv, "gpunodes": grv, "pods": prv, "gpujobs": jrv}

    def apply(self, resource: Collection, kind: str, obj: dict[str, Any]) -> None:
        """One watch event into the ledger (and into what the resource's reflector knows)."""
        self.reflectors[resource.name].apply(kind, obj)

    def _into_ledger(self, resource: Collection, kind: str, obj: dict[str, Any]) -> None:
        key = resource.key(obj)
        if kind == "DELETED":
            if resource is NODES:
                self.ledger.delete_node(key)
            elif resource is GPUNODES:
                self.ledger.delete_gpunode(key)
            elif resource is GPUJOBS:
                self.ledger.forget_gpujob(key)
            else:
                self.ledger.delete_pod(key)
        elif resource is NODES:
            self.ledger.upsert_node(obj)
        elif resource is GPUNODES:
            self.ledger.upsert_gpunode(key, gpunode_status(obj))
        elif resource is GPUJOBS:
            self.ledger.upsert_gpujob(obj)
        else:
            self.ledger.upsert_pod(obj)

    def stale_for(self) -> float:
        """Seconds the longest-failing resource has not been followed (0 while every one is)."""
        return max((r.stale_for() for r in self.reflectors.values()), default=0.0)

    async def resync(self, resource: Collection) -> str:
        """Relist one resource and apply the difference; returns the new resourceVersion."""
        return await self.reflectors[resource.name].relist()

    async def watch_once(self, resource: Collection, rv: str) -> str:
        """Follow one watch stream to its end; returns the last resourceVersion seen."""
        return await self.reflectors[resource.name].watch_once(rv)

    async def run(self) -> None:
        """Initial sync (retried with jittered backoff until it succeeds), then follow every resource."""
        backoff = self._backoff()
        while True:
            try:
                versions = await self.initial_sync()
                break
            except (httpx2.HTTPError, json.JSONDecodeError, OSError) as exc:
                delay = backoff.next_delay()
                log.warning("initial list failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
        async with asyncio.TaskGroup() as group:
            for name, reflector in self.reflectors.items():
                group.create_task(reflector.follow(versions[name]))
