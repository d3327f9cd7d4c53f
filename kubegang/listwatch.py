"""List + watch against the API server: the one place kubegang's caches follow a collection.

The protocol client-go's reflector speaks, in plain ``httpx2`` and JSON. A collection is listed
(paginated), then watched from the list's resourceVersion with bookmarks, so a quiet stream still
advances and a reconnect rarely needs a relist. A ``410 Gone`` (the version fell out of etcd's window)
relists, and the relist reaches the cache as a difference: upserts, plus deletes of what vanished.
Other failures back off (``kubegang.backoff``: jittered, so watchers do not come back in step after an
API server restart) and reconnect from the last version seen. A collection the API server does not
serve (a CRD not installed yet, an API group not enabled) is asked for again every few seconds, so a
KubeRay installed after kubegang is followed without a restart.

Why not a framework's watches: the operator fed its cache through Kopf's, which for every event builds
a worker task, a logger adapter and a patch object, and diffs bodies; a third of the leader's CPU in a
burst was that machinery (docs/benchmarks-e2e-analysis.md). Here an event costs a JSON decode and a
call into the cache. Nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from kubegang.backoff import Backoff

log = logging.getLogger("kubegang.listwatch")

WATCH_TIMEOUT_SECONDS = 300
"""Server-side watch timeout; the stream is reopened (from the last version) when it ends."""
WATCH_READ_TIMEOUT_SECONDS = 90.0
"""The longest silence a watch stream may keep before it is taken as broken and reopened from the last
version. The API server's watch cache sends a bookmark to a watch that asked for them about every
minute (``defaultBookmarkFrequency`` in k8s.io/apiserver's cacher), so a live stream is never silent
this long; a connection that died without a FIN or RST (a node or a load balancer gone) is then
noticed in 90 s, not at the end of the server-side timeout (``WATCH_TIMEOUT_SECONDS`` + 30 s), and
counts as failing (``Reflector.stale_for``) meanwhile, where the extender's readiness can see it."""
LIST_PAGE_SIZE = 500
"""Objects per list page."""
NOT_SERVED_RETRY_SECONDS = 5.0
"""How often a collection the API server does not serve (404) is asked for again."""
QUICK_CLOSE_SECONDS = 1.0
"""A watch that ends sooner than this having delivered nothing is retried after a backoff, as a failure."""

Sink = Callable[[str, dict[str, Any]], None]
"""Where events go: ``(type, object)`` with type ``ADDED``, ``MODIFIED`` or ``DELETED``. A deletion
found by a relist carries only the object's last known body."""

Restarted = Callable[[str, str], None]
"""Told ``(collection name, why)`` each time a watch stream ends: ``closed``, ``gone`` or ``error``."""


def api_client(kubeconfig: str | None, *, timeout_seconds: float = 30.0) -> httpx2.AsyncClient:
    """An httpx client for the API server: ``kubeconfig`` file, or in-cluster/env config.

    lightkube builds it, so authentication (service-account token, client certificates, exec
    plugins) is lightkube's, not ours.
    """
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig

    config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()).get()
    if config is None:
        raise ValueError(f"kubeconfig {kubeconfig or '(from environment)'} has no current context")
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_seconds))
    return client_adapter.AsyncClient(config, params)


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name``: the identity of a cluster-scoped object."""
    return str((obj.get("metadata") or {}).get("name", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    """``metadata.uid``: an identity that holds across namespaces."""
    return str((obj.get("metadata") or {}).get("uid", ""))


def identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a deletion handler needs of an object: its name, namespace, UID and labels."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta}}


@dataclass(frozen=True)
class Collection:
    """A watched collection: where it is, how its objects are told apart, whether it may be absent."""

    name: str
    """Short name for logs and metrics (``nodes``, ``gpujobs``)."""
    path: str
    """Collection URL path, e.g. ``/api/v1/pods`` or ``/apis/ray.io/v1/namespaces/ns/rayclusters``."""
    key: Callable[[Mapping[str, Any]], str] = uid_of
    """Identity of an object."""
    label_selector: str | None = None
    """Server-side ``labelSelector``; an object that stops matching is sent as DELETED."""
    optional: bool = False
    """A 404 means the API server does not serve it (yet): wait for it instead of failing."""
    tombstone: Callable[[Mapping[str, Any]], dict[str, Any]] = identity
    """What is kept of each object, to send as its deletion when a relist no longer finds it (a
    stub, not the body: a cache of 5,000 pods would otherwise be held twice)."""


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


class NotServed(Exception):
    """The API server answered 404 for an optional collection: its CRD or API group is not there."""


def _selected(collection: Collection, params: dict[str, str | int]) -> dict[str, str | int]:
    if collection.label_selector:
        params["labelSelector"] = collection.label_selector
    return params


async def list_collection(client: httpx2.AsyncClient, collection: Collection) -> tuple[list[dict[str, Any]], str]:
    """Every object of ``collection`` (all pages) and the list's resourceVersion.

    Raises :class:`NotServed` for an optional collection the API server does not serve.
    """
    items: list[dict[str, Any]] = []
    params = _selected(collection, {"limit": LIST_PAGE_SIZE})
    while True:
        resp = await client.get(collection.path, params=params)
        if resp.status_code == 404 and collection.optional:
            raise NotServed(collection.name)
        resp.raise_for_status()
        body = resp.json()
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items, str((body.get("metadata") or {}).get("resourceVersion", ""))
        params = _selected(collection, {"limit": LIST_PAGE_SIZE, "continue": token})


@dataclass
class Reflector:
    """Keeps a sink in step with one collection: what the sink was told exists, and from which version.

    ``known`` holds a stub of each object sent (``Collection.tombstone``), so a relist can send the
    deletion of what vanished.
    """

    client: httpx2.AsyncClient
    collection: Collection
    sink: Sink
    backoff: Callable[[], Backoff] = field(default=lambda: Backoff(initial_seconds=1.0, max_seconds=30.0))
    """A fresh backoff per retry loop."""
    restarted: Restarted | None = None
    not_served_retry_seconds: float = NOT_SERVED_RETRY_SECONDS
    known: dict[str, dict[str, Any]] = field(default_factory=dict)
    read_timeout_seconds: float = WATCH_READ_TIMEOUT_SECONDS
    """How long a watch stream may be silent (``WATCH_READ_TIMEOUT_SECONDS``)."""
    resume_from: str = ""
    """The last resourceVersion the current watch delivered (events and bookmarks)."""
    failing_since: float | None = None
    """Monotonic time of the first of the failures (lists, watches) since the collection was last
    followed; None while it is. A reader of the sink's state can tell how stale it may be."""

    def stale_for(self, now: float | None = None) -> float:
        """Seconds the collection has failed to be followed (0 while it is)."""
        if self.failing_since is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.failing_since

    def _failing(self) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One event: remember it, then hand it on. A sink that fails on one object is logged and
        the stream goes on: one bad object never stops the cache following the others."""
        key = self.collection.key(obj)
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = self.collection.tombstone(obj)
        try:
            self.sink(kind, obj)
        except Exception:
            log.exception("%s %s: %s event not applied", self.collection.name, key, kind)

    def seed(self, items: list[dict[str, Any]]) -> None:
        """Remember objects the sink was loaded with elsewhere (a bulk initial load)."""
        self.known = {self.collection.key(o): self.collection.tombstone(o) for o in items}

    async def relist(self) -> str:
        """List the collection and send the difference; returns the list's resourceVersion."""
        items, rv = await list_collection(self.client, self.collection)
        self.failing_since = None
        present = {self.collection.key(o) for o in items}
        for key in [k for k in self.known if k not in present]:
            self.apply("DELETED", self.known[key])
        for obj in items:
            self.apply("MODIFIED" if self.collection.key(obj) in self.known else "ADDED", obj)
        return rv

    async def watch_once(self, rv: str) -> str:
        """Follow one watch stream to its end; returns the last resourceVersion seen."""
        params = _selected(self.collection, {"watch": 1, "allowWatchBookmarks": "true",
                                             "timeoutSeconds": WATCH_TIMEOUT_SECONDS})
        if rv:
            params["resourceVersion"] = rv
        timeout = httpx2.Timeout(30.0, read=self.read_timeout_seconds)
        async with self.client.stream("GET", self.collection.path, params=params, timeout=timeout) as resp:
            if resp.status_code == 410:
                raise Gone(self.collection.name)
            if resp.status_code == 404 and self.collection.optional:
                raise NotServed(self.collection.name)
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(self.collection.name)
                    raise httpx2.HTTPError(f"watch {self.collection.name}: {obj.get('message', obj)}")
                new_rv = str((obj.get("metadata") or {}).get("resourceVersion", "")) or rv
                self.failing_since = None
                if kind != "BOOKMARK":
                    self.apply(str(kind), obj)
                rv = self.resume_from = new_rv
        return rv

    async def follow(self, rv: str) -> None:
        """Watch forever from ``rv``: reconnect on end or error (jittered backoff), relist on 410 Gone."""
        backoff = self.backoff()
        name = self.collection.name
        loop = asyncio.get_running_loop()
        while True:
            # Where a broken stream resumes: the last version it delivered, not the one it started
            # from (which would replay every event since, and may have been compacted away: a 410 and
            # a full relist).
            self.resume_from = rv
            started = loop.time()
            try:
                ended = await self.watch_once(rv)
                self._restarted("closed")
                if ended == rv and loop.time() - started < QUICK_CLOSE_SECONDS:
                    # Closed at once with nothing in it (a proxy or an API server shutting down):
                    # reconnecting at once would spin, so back off as after an error (client-go does).
                    self._failing()
                    delay = backoff.next_delay()
                    log.warning("watch on %s closed at once; retrying in %.1fs", name, delay)
                    await asyncio.sleep(delay)
                else:
                    self.failing_since = None
                    backoff.reset()  # a stream that ended normally: reconnect at once
                rv = ended
            except Gone:
                log.info("watch on %s: resourceVersion %s expired; relisting", name, rv)
                self._restarted("gone")
                rv = await self.synced()
            except NotServed:
                if rv:
                    log.info("watch on %s: no longer served; waiting for it", name)
                self._restarted("error")
                rv = await self.synced()
            except (httpx2.HTTPError, json.JSONDecodeError, OSError) as exc:
                rv = self.resume_from
                self._failing()
                delay = backoff.next_delay()
                log.warning("watch on %s failed (%s); retrying in %.1fs", name, exc, delay)
                self._restarted("error")
                await asyncio.sleep(delay)
            except Exception:
                # A bug must not stop the cache from following the cluster: log it loudly, go on.
                rv = self.resume_from
                self._failing()
                delay = backoff.next_delay()
                log.exception("watch on %s: unexpected error; retrying in %.1fs", name, delay)
                self._restarted("error")
                await asyncio.sleep(delay)

    async def synced(self, *, wait_until_served: bool = True) -> str:
        """Relist until it succeeds (jittered backoff); returns the list's resourceVersion.

        A collection not served is waited for; with ``wait_until_served=False`` it counts as listed
        and empty (version ``""``: following it then waits for it to be served).
        """
        backoff = self.backoff()
        announced = False
        while True:
            try:
                return await self.relist()
            except NotServed:
                for key in list(self.known):  # the CRD went away, and its objects with it
                    self.apply("DELETED", self.known[key])
                if not wait_until_served:
                    return ""
                if not announced:
                    log.info("%s is not served by the API server; asking again every %.0fs",
                             self.collection.name, self.not_served_retry_seconds)
                    announced = True
                await asyncio.sleep(self.not_served_retry_seconds)
            except (httpx2.HTTPError, json.JSONDecodeError, OSError) as exc:
                self._failing()
                delay = backoff.next_delay()
                log.warning("list of %s failed (%s); retrying in %.1fs", self.collection.name, exc, delay)
                await asyncio.sleep(delay)
            except Exception:
                # Anything else (a credential plugin failing, a body that is not a list) is retried
                # too: ending here ended the whole feed, and a replica waiting for its first lists
                # then held the Lease and admitted nothing, for ever.
                self._failing()
                delay = backoff.next_delay()
                log.exception("list of %s failed; retrying in %.1fs", self.collection.name, delay)
                await asyncio.sleep(delay)

    async def first_list(self) -> str:
        """The first list: retried until the API server answers; a collection it does not serve is
        listed as empty."""
        return await self.synced(wait_until_served=False)

    def _restarted(self, why: str) -> None:
        if self.restarted is not None:
            self.restarted(self.collection.name, why)
