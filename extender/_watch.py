"""All of the extender's Kubernetes I/O: list + watch Nodes, GPUNodes, pods and GPUJobs into the ledger.

Kueue-like: a long-lived cache fed by watches. Each resource is listed (paginated), then watched
from the list's resourceVersion with bookmarks, so a quiet stream still advances and a reconnect
rarely needs a relist. A ``410 Gone`` (the version fell out of etcd's window) triggers a relist
of that resource, applied to the ledger as a diff (upserts plus deletes of what vanished); other
errors back off and reconnect from the last version seen. Nothing here decides anything: events
go to :class:`Ledger` as plain JSON.

HTTP goes through ``httpx2``, the client lightkube builds from a kubeconfig or the in-cluster
service account (so authentication is lightkube's, not ours).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic import ValidationError

from kubegang.api.gpunode import GPUNodeStatus
from kubegang.backoff import Backoff
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._pods import REQUEUE_ANNOTATION

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300
"""Server-side watch timeout; the stream is reopened (from the last version) when it ends."""
LIST_PAGE_SIZE = 500
"""Objects per list page."""


def api_client(kubeconfig: str | None) -> httpx2.AsyncClient:
    """An httpx client for the API server: ``kubeconfig`` file, or in-cluster/env config."""
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig

    config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()).get()
    if config is None:
        raise ValueError(f"kubeconfig {kubeconfig or '(from environment)'} has no current context")
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0))
    return client_adapter.AsyncClient(config, params)


@dataclass(frozen=True)
class Resource:
    """A watched collection and how its objects reach the ledger."""

    name: str
    """Short name for logs and metrics (``nodes``, ``gpunodes``, ``pods``)."""
    path: str
    """Collection URL path."""
    key: Callable[[dict[str, Any]], str]
    """Identity of an object (name or UID)."""


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _uid(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


NODES = Resource("nodes", "/api/v1/nodes", _name)
GPUNODES = Resource("gpunodes", "/apis/kubegang.io/v1alpha1/gpunodes", _name)
PODS = Resource("pods", "/api/v1/pods", _uid)
GPUJOBS = Resource("gpujobs", "/apis/kubegang.io/v1alpha1/gpujobs", _uid)


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


def gpunode_status(obj: dict[str, Any]) -> GPUNodeStatus | None:
    """The status of a GPUNode object, or None when absent or invalid (logged)."""
    status = obj.get("status")
    if status is None:
        return None
    try:
        return GPUNodeStatus.model_validate(status)
    except ValidationError as exc:
        log.warning("GPUNode %s has an invalid status, ignored: %s", _name(obj), exc)
        return None


class ClusterFeed:
    """Keeps a :class:`Ledger` in step with the API server."""

    def __init__(self, client: httpx2.AsyncClient, ledger: Ledger, metrics: ExtenderMetrics,
                 *, retry_seconds: float = 1.0, max_retry_seconds: float = 30.0) -> None:
        self.client = client
        self.ledger = ledger
        self.metrics = metrics
        self.retry_seconds = retry_seconds
        """Ceiling of the first delay after a failed list or watch; it doubles per failure (jittered)."""
        self.max_retry_seconds = max(max_retry_seconds, retry_seconds)
        """Cap of that ceiling."""
        self._known: dict[str, set[str]] = {}

    def _backoff(self) -> Backoff:
        """One per retry loop (``kubegang.backoff``): after an API server restart the extender's watches
        come back spread out and less often while it stays down, not every ``retry_seconds`` in step."""
        return Backoff(initial_seconds=self.retry_seconds, max_seconds=self.max_retry_seconds)

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

    async def list(self, resource: Resource) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``resource`` (all pages) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        params: dict[str, str | int] = {"limit": LIST_PAGE_SIZE}
        while True:
            resp = await self.client.get(resource.path, params=params)
            if resp.status_code == 404 and resource in (GPUNODES, GPUJOBS):
                return [], ""  # CRD not installed yet: nodes are placeable from Node objects alone
            resp.raise_for_status()
            body = resp.json()
            items.extend(body.get("items") or [])
            token = body.get("metadata", {}).get("continue")
            if not token:
                return items, str(body.get("metadata", {}).get("resourceVersion", ""))
            params = {"limit": LIST_PAGE_SIZE, "continue": token}

    async def initial_sync(self) -> dict[str, str]:
        """List every resource and load the ledger at once; returns each resourceVersion."""
        (nodes, nrv), (gpunodes, grv), (pods, prv), (jobs, jrv) = await asyncio.gather(
            self.list(NODES), self.list(GPUNODES), self.list(PODS), self.list(GPUJOBS))
        statuses = {_name(o): s for o in gpunodes if (s := gpunode_status(o)) is not None}
        self.ledger.replace_all(nodes, statuses, pods, jobs)
        self._known = {"nodes": {_name(o) for o in nodes}, "gpunodes": {_name(o) for o in gpunodes},
                       "pods": {_uid(o) for o in pods}, "gpujobs": {_uid(o) for o in jobs}}
        self.ledger.synced = True
        # The listed cluster is long-lived: keep it out of the cyclic GC's scans (steadier p99).
        gc.collect()
        gc.freeze()
        return {"nodes": nrv, "gpunodes": grv, "pods": prv, "gpujobs": jrv}

    def apply(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        """One watch event into the ledger."""
        key = resource.key(obj)
        known = self._known.setdefault(resource.name, set())
        if kind == "DELETED":
            known.discard(key)
            if resource is NODES:
                self.ledger.delete_node(key)
            elif resource is GPUNODES:
                self.ledger.delete_gpunode(key)
            elif resource is GPUJOBS:
                self.ledger.forget_gpujob(key)
            else:
                self.ledger.delete_pod(key)
            return
        known.add(key)
        if resource is NODES:
            self.ledger.upsert_node(obj)
        elif resource is GPUNODES:
            self.ledger.upsert_gpunode(key, gpunode_status(obj))
        elif resource is GPUJOBS:
            self.ledger.upsert_gpujob(obj)
        else:
            self.ledger.upsert_pod(obj)

    async def resync(self, resource: Resource) -> str:
        """Relist one resource and apply the difference; returns the new resourceVersion."""
        items, rv = await self.list(resource)
        present = {resource.key(o) for o in items}
        for key in self._known.get(resource.name, set()) - present:
            self.apply(resource, "DELETED", {"metadata": {"name": key, "uid": key}})
        for obj in items:
            self.apply(resource, "MODIFIED", obj)
        return rv

    async def watch_once(self, resource: Resource, rv: str) -> str:
        """Follow one watch stream to its end; returns the last resourceVersion seen."""
        params: dict[str, str | int] = {"watch": 1, "allowWatchBookmarks": "true",
                                        "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        if rv:
            params["resourceVersion"] = rv
        timeout = httpx2.Timeout(30.0, read=WATCH_TIMEOUT_SECONDS + 30.0)
        async with self.client.stream("GET", resource.path, params=params, timeout=timeout) as resp:
            if resp.status_code == 410:
                raise Gone(resource.name)
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(resource.name)
                    raise httpx2.HTTPError(f"watch {resource.name}: {obj.get('message', obj)}")
                new_rv = str(obj.get("metadata", {}).get("resourceVersion", "")) or rv
                if kind != "BOOKMARK":
                    self.apply(resource, str(kind), obj)
                rv = new_rv
        return rv

    async def follow(self, resource: Resource, rv: str) -> None:
        """Watch ``resource`` forever: reconnect on end or error (jittered backoff), relist on 410 Gone."""
        backoff = self._backoff()
        while True:
            try:
                rv = await self.watch_once(resource, rv)
                self.metrics.watch_restarts.labels(resource.name, "closed").inc()
                backoff.reset()  # a stream that ended normally: reconnect at once
            except Gone:
                log.info("watch on %s: resourceVersion %s expired; relisting", resource.name, rv)
                self.metrics.watch_restarts.labels(resource.name, "gone").inc()
                rv = await self._retrying(self.resync, resource)
            except (httpx2.HTTPError, json.JSONDecodeError, OSError) as exc:
                delay = backoff.next_delay()
                log.warning("watch on %s failed (%s); retrying in %.1fs", resource.name, exc, delay)
                self.metrics.watch_restarts.labels(resource.name, "error").inc()
                await asyncio.sleep(delay)
            except Exception:
                # A bug must not stop the ledger from following the cluster: log it loudly, go on.
                delay = backoff.next_delay()
                log.exception("watch on %s: unexpected error; retrying in %.1fs", resource.name, delay)
                self.metrics.watch_restarts.labels(resource.name, "error").inc()
                await asyncio.sleep(delay)

    async def _retrying(self, call: Callable[[Resource], Any], resource: Resource) -> str:
        backoff = self._backoff()
        while True:
            try:
                result: str = await call(resource)
                return result
            except (httpx2.HTTPError, json.JSONDecodeError, OSError) as exc:
                delay = backoff.next_delay()
                log.warning("relist of %s failed (%s); retrying in %.1fs", resource.name, exc, delay)
                await asyncio.sleep(delay)

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
            for resource in (NODES, GPUNODES, PODS, GPUJOBS):
                group.create_task(self.follow(resource, versions[resource.name]))
