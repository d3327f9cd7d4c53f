"""``KubeApi``: every Kubernetes write the operator makes, in one thin module (``RestClient``, async).

Each call has a timeout (the client's) and passes a client-side token bucket with an urgent and a
background lane, so a burst of 500 jobs cannot flood the API server and reports never delay
decisions; idempotence lives here too: AlreadyExists on create and NotFound on delete are success,
which is what lets a new leader redo a half-finished step safely. Every write first asks the
leader's ``fence`` (``LeaderElector.holds``), right before it is sent: a replica past its renew
deadline writes nothing (``NotLeading``). A write still in flight when the deadline comes (an API
server that takes seconds to answer under load) is abandoned then, which closes its connection and so
cancels the request on the API server if it has not been applied yet: without it a deposed leader's
write could be applied after the new leader took over, bounded only by the client's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kubegang.operator import _metrics as metrics
from kubegang.operator._conditions import now_rfc3339
from kubegang.operator._job import JobView
from kubegang.operator._leader import NotLeading
from kubegang.restclient import JSON, MERGE_PATCH, ApiStatusError, RestClient, rest_client

log = logging.getLogger("kubegang.operator.kube")

FIELD_MANAGER = "kubegang-operator"

MAX_IN_FLIGHT = 20
"""API calls under way at once, and the connections the client keeps alive: a 64-pod gang opens no
connection that is closed after one call (in a 500-job burst a fifth of the leader's pod-creation CPU
was TLS handshakes of such connections, py-spy, and each cost the API server a handshake too)."""

_COLLECTIONS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Event": ("/api/v1", "events"),
    "GPUJob": ("/apis/kubegang.io/v1alpha1", "gpujobs"),
    "GPUQueue": ("/apis/kubegang.io/v1alpha1", "gpuqueues"),
    "RayCluster": ("/apis/ray.io/v1", "rayclusters"),
}
"""Kind -> (group-version prefix, plural) of every kind the operator writes."""


def object_path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    """The REST path of a collection (``name`` None) or an object of ``kind``; cluster-scoped when
    ``namespace`` is empty."""
    try:
        prefix, plural = _COLLECTIONS[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r}: the operator writes only {sorted(_COLLECTIONS)}") from None
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


class RateLimiter:
    """A token bucket with two lanes: at most ``qps`` calls per second on average, bursts up to ``burst``.

    Decisions (admission records, pod creates and deletes, evictions) take the urgent lane; reports
    (Events, "still waiting" status, GPUQueue status) take the background lane, which gets a token only
    while no urgent call waits. A burst of 500 waiting jobs therefore cannot starve admissions of the
    write budget, and reports still drain whenever decisions leave room. Each lane waits behind one
    lock, so a thousand background waiters cost one sleeper, not a thousand.
    """

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._urgent = asyncio.Lock()
        self._background = asyncio.Lock()
        self._urgent_waiting = 0

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now

    async def acquire(self, *, background: bool = False) -> None:
        """Wait (without blocking the loop) until a call may go out in its lane."""
        if background:
            await self._acquire_background()
            return
        self._urgent_waiting += 1
        try:
            async with self._urgent:
                while True:
                    self._refill()
                    if self._tokens >= 1:
                        self._tokens -= 1
                        return
                    await asyncio.sleep((1 - self._tokens) / self.qps)
        finally:
            self._urgent_waiting -= 1

    async def _acquire_background(self) -> None:
        async with self._background:
            while True:
                if not self._urgent_waiting:
                    self._refill()
                    if self._tokens >= 1:
                        self._tokens -= 1
                        return
                await asyncio.sleep(max(1 - self._tokens, 1) / self.qps)


def make_client(kubeconfig: str | None, *, timeout_seconds: float) -> RestClient:
    """The operator's writing client, from a kubeconfig file, or in-cluster / $KUBECONFIG when None."""
    return rest_client(kubeconfig, timeout_seconds=timeout_seconds, limit=MAX_IN_FLIGHT)


class KubeApi:
    """KubePort over ``RestClient``."""

    def __init__(self, client: RestClient, limiter: RateLimiter, *, component: str = "kubegang-operator",
                 fence: Callable[[], bool] = lambda: True, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.client = client
        self.limiter = limiter
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self.component = component
        self.instance = f"{component}-{uuid.uuid4().hex[:8]}"
        self.fence = fence
        """Whether this replica may write now (the leader's renew deadline); checked before each call."""
        self.time_left: Callable[[], float] = lambda: math.inf
        """Seconds until the fence may close (``LeaderElector.time_left``): when a call is still under
        way then, the fence is asked again, and the call abandoned if it closed."""

    def _fenced(self, what: str) -> None:
        if not self.fence():
            metrics.FENCED_WRITES.inc()
            raise NotLeading(f"not leading any more: {what} not sent")

    @contextlib.asynccontextmanager
    async def _sending(self, what: str) -> AsyncIterator[None]:
        """One of at most ``max_in_flight`` calls under way; the fence is asked once it may go out,
        so a call that waited for its turn is not sent by a replica that stopped leading meanwhile."""
        async with self._in_flight:
            self._fenced(what)
            yield

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        await self.limiter.acquire()
        async with self._sending(f"create {manifest.get('kind')} {manifest.get('metadata', {}).get('name')}"):
            try:
                await self._post(manifest)
            except ApiStatusError as exc:
                if exc.code == 409:
                    return False
                raise
        return True

    async def _post(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        namespace = str((manifest.get("metadata") or {}).get("namespace") or "")
        path = object_path(str(manifest.get("kind")), namespace) + f"?fieldManager={FIELD_MANAGER}"
        return await self._request("POST", path, manifest)

    async def _merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("PATCH", path + f"?fieldManager={FIELD_MANAGER}", body, content_type=MERGE_PATCH)

    async def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                       content_type: str = JSON) -> dict[str, Any]:
        """One call, in flight only while the fence is open: at the renew deadline a call not yet
        answered is cancelled (``NotLeading``), unless a renewal moved the deadline meanwhile."""
        call = asyncio.ensure_future(self.client.request(method, path, body, content_type=content_type,
                                                         before_retry=self._retry_fenced))
        try:
            while True:
                left = self.time_left()
                done, _ = await asyncio.wait({call}, timeout=None if math.isinf(left) else max(left, 0.05))
                if done:
                    return call.result()
                if not self.fence():
                    call.cancel()
                    await asyncio.gather(call, return_exceptions=True)
                    metrics.FENCED_WRITES.inc()
                    raise NotLeading(f"not leading any more: {method} {path} abandoned in flight")
        finally:
            if not call.done():  # this caller was cancelled (the replica stops, a creation is undone)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    def _retry_fenced(self) -> None:
        """A write the API server asked to be sent again goes only while this replica may still write."""
        self._fenced("a retried write")

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        await self.limiter.acquire()
        async with self._sending(f"delete {kind} {namespace}/{name}"):
            try:
                await self._request("DELETE", object_path(kind, namespace, name))
            except ApiStatusError as exc:
                if exc.code != 404:
                    raise

    async def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        await self.limiter.acquire()
        async with self._sending(f"patch {kind} {namespace}/{name}"):
            try:
                await self._merge_patch(object_path(kind, namespace, name), patch)
            except ApiStatusError as exc:
                if exc.code == 404:
                    return False
                raise
        return True

    async def reserve_background(self) -> None:
        await self.limiter.acquire(background=True)

    async def patch_job_status(
        self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False, resource_version: str | None = None
    ) -> str | None:
        if not prepaid:
            await self.limiter.acquire()
        async with self._sending(f"status of {job.key}"):
            body: dict[str, Any] = {"status": dict(patch)}
            if resource_version:
                # A merge patch that names a resourceVersion is a precondition: 409 if the job moved on.
                body["metadata"] = {"resourceVersion": resource_version}
            written = await self._merge_patch(object_path("GPUJob", job.namespace, job.name, "status"), body)
        version = (written.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None

    async def patch_named_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self.limiter.acquire(background=True)
        async with self._sending(f"status of GPUJob {namespace}/{name}"):
            await self._merge_patch(object_path("GPUJob", namespace, name, "status"), {"status": dict(patch)})

    async def patch_queue_status(self, name: str, patch: Mapping[str, Any]) -> None:
        await self.limiter.acquire(background=True)
        async with self._sending(f"status of GPUQueue {name}"):
            await self._merge_patch(object_path("GPUQueue", "", name, "status"), {"status": dict(patch)})

    async def event(self, job: JobView, reason: str, message: str, *, warning: bool = False) -> None:
        await self.event_on({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob", "name": job.name,
                             "namespace": job.namespace, "uid": job.uid}, reason, message, warning=warning)

    async def event_on(self, involved: Mapping[str, str], reason: str, message: str, *,
                       warning: bool = False) -> None:
        now = now_rfc3339()
        name, namespace = involved.get("name", ""), involved.get("namespace", "")
        manifest = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": dict(involved),
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        try:
            await self.limiter.acquire(background=True)
            async with self._sending(f"event {reason} on {namespace}/{name}"):
                await self._post(manifest)
        except Exception as exc:
            # Events are for humans; losing one must not undo a scheduling decision.
            log.warning("could not record event %s on %s %s/%s: %s", reason, involved.get("kind"), namespace,
                        name, exc)
