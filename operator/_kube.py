"""``KubeApi``: every Kubernetes write the operator makes, in one thin module (lightkube, async).

Each call has a timeout (the client's) and passes a client-side token bucket with an urgent and a
background lane, so a burst of 500 jobs cannot flood the API server and reports never delay
decisions; idempotence lives here too: AlreadyExists on create and NotFound on delete are success,
which is what lets a new leader redo a half-finished step safely. Every write first asks the
leader's ``fence`` (``LeaderElector.holds``), right before it is sent: a replica past its renew
deadline writes nothing (``NotLeading``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap, Pod, Service
from lightkube.types import PatchType

from kubegang.operator import _metrics as metrics
from kubegang.operator._conditions import now_rfc3339
from kubegang.operator._job import JobView
from kubegang.operator._leader import NotLeading

log = logging.getLogger("kubegang.operator.kube")

GPUJobResource = create_namespaced_resource("kubegang.io", "v1alpha1", "GPUJob", "gpujobs")
GPUQueueResource = create_global_resource("kubegang.io", "v1alpha1", "GPUQueue", "gpuqueues")
RayClusterResource = create_namespaced_resource("ray.io", "v1", "RayCluster", "rayclusters")
FIELD_MANAGER = "kubegang-operator"

MAX_IN_FLIGHT = 20
"""API calls under way at once: as many as the HTTP client keeps alive (httpx's default pool keeps 20),
so a 64-pod gang does not open connections beyond the pool that are closed after one call: in a
500-job burst a fifth of the leader's pod-creation CPU was TLS handshakes of such connections (py-spy),
and each one cost the API server a handshake too."""

_KINDS: dict[str, Any] = {"Pod": Pod, "Service": Service, "ConfigMap": ConfigMap, "GPUJob": GPUJobResource,
                          "RayCluster": RayClusterResource}


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


def make_client(kubeconfig: str | None, *, timeout_seconds: float) -> AsyncClient:
    """A lightkube AsyncClient from a kubeconfig file, or in-cluster / $KUBECONFIG when None."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else None
    return AsyncClient(config=config, timeout=httpx2.Timeout(timeout_seconds), field_manager=FIELD_MANAGER)


class KubeApi:
    """KubePort over lightkube."""

    def __init__(self, client: AsyncClient, limiter: RateLimiter, *, component: str = "kubegang-operator",
                 fence: Callable[[], bool] = lambda: True, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.client = client
        self.limiter = limiter
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self.component = component
        self.instance = f"{component}-{uuid.uuid4().hex[:8]}"
        self.fence = fence
        """Whether this replica may write now (the leader's renew deadline); checked before each call."""

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
                await self.client.create(codecs.from_dict(dict(manifest)))
            except ApiError as exc:
                if exc.status.code == 409:
                    return False
                raise
        return True

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        await self.limiter.acquire()
        async with self._sending(f"delete {kind} {namespace}/{name}"):
            try:
                await self.client.delete(_KINDS[kind], name, namespace=namespace)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise

    async def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        await self.limiter.acquire()
        async with self._sending(f"patch {kind} {namespace}/{name}"):
            try:
                await self.client.patch(_KINDS[kind], name, dict(patch), namespace=namespace,
                                        patch_type=PatchType.MERGE)
            except ApiError as exc:
                if exc.status.code == 404:
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
            written = await self.client.patch(
                GPUJobResource.Status, job.name, body, namespace=job.namespace, patch_type=PatchType.MERGE
            )
        meta = getattr(written, "metadata", None)
        return str(meta.resourceVersion) if meta is not None and meta.resourceVersion else None

    async def patch_queue_status(self, name: str, patch: Mapping[str, Any]) -> None:
        await self.limiter.acquire(background=True)
        async with self._sending(f"status of GPUQueue {name}"):
            await self.client.patch(GPUQueueResource.Status, name, {"status": dict(patch)}, patch_type=PatchType.MERGE)

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
                await self.client.create(codecs.from_dict(manifest))
        except Exception as exc:
            # Events are for humans; losing one must not undo a scheduling decision.
            log.warning("could not record event %s on %s %s/%s: %s", reason, involved.get("kind"), namespace,
                        name, exc)
