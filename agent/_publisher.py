"""One node's publish loop: read, build, and write to the API server only what changed.

A poll that finds nothing new costs no API call: the status and the labels are compared by
fingerprint (everything but the timestamps) with what was last written, and a backend that can tell
its data has not changed (``Backend.version``) is not even read. A resync timer writes
anyway now and then, which refreshes ``lastSeen`` and repairs edits made by someone else. A write
that fails is logged and counted and retried at the next poll (its fingerprint is not recorded);
nothing here lets one node's failure stop the loop or the other nodes of a replay agent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubegang.api.gpunode import GPUNodeStatus

from ._backend import Backend
from ._kube import GPUNodeMissing, Sink
from ._metrics import AgentMetrics
from ._settings import AgentSettings
from ._snapshot import parse_dump
from ._status import (
    build_status,
    fingerprint,
    keep_transition_times,
    labels_fingerprint,
    node_labels,
    status_payload,
)

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class PollResult:
    """What one poll did."""

    status_written: bool
    labels_written: bool
    errors: tuple[str, ...] = ()


class NodePublisher:
    """Keeps one node's GPUNode and labels in step with its backend."""

    def __init__(
        self,
        node: str,
        backend: Backend,
        sink: Sink,
        settings: AgentSettings,
        metrics: AgentMetrics,
        *,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.backend = backend
        self._sink = sink
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._monotonic = monotonic
        self._previous: GPUNodeStatus | None = None
        self._status_fp: str | None = None
        self._labels_fp: str | None = None
        self._status_at: float | None = None
        self._labels_at: float | None = None
        self._created = False
        self._read_version: Hashable | None = None
        self.last_poll: float | None = None
        """Monotonic time of the last completed poll (for /healthz)."""

    def forget_written(self) -> None:
        """The GPUNode was deleted: create and write it at the next poll. Without this a node whose
        readings never change would stay without its GPUNode until the resync timer."""
        self._status_fp = None
        self._created = False

    def _due(self, written_at: float | None, now: float) -> bool:
        return written_at is None or now - written_at >= self._settings.resync_interval_s

    def _up_to_date(self, version: Hashable | None, now: float) -> bool:
        """Nothing to read: the backend says its data is what was last written, and no write failed,
        was undone (a deleted GPUNode) or is due for resync."""
        return (
            version is not None
            and version == self._read_version
            and self._status_fp is not None
            and self._labels_fp is not None
            and not self._due(self._status_at, now)
            and not self._due(self._labels_at, now)
        )

    async def poll_once(self) -> PollResult:
        started = self._monotonic()
        version = self.backend.version()
        if self._up_to_date(version, started):
            self.last_poll = started
            return PollResult(False, False)
        dump = await asyncio.to_thread(self.backend.read)
        readings = parse_dump(dump)
        status = build_status(
            readings, now=self._clock(), previous=self._previous, fatal_xids=self._settings.xid_policy.fatal
        )
        self._previous = status
        self._metrics.poll.observe(self._monotonic() - started)
        self._metrics.observe(self.node, readings, {g.index: g.health.healthy for g in status.gpus})
        labels = node_labels(status, nvidia_labels=self._settings.nvidia_labels)

        now = self._monotonic()
        errors: list[str] = []
        status_fp, labels_fp = fingerprint(status), labels_fingerprint(labels)
        wrote_status = wrote_labels = False
        if status_fp != self._status_fp or self._due(self._status_at, now):
            try:
                self._previous = await self._write_status(status)
            except Exception as exc:
                errors.append(self._failed("status", exc))
            else:
                self._status_fp, self._status_at, wrote_status = status_fp, now, True
        if labels and (labels_fp != self._labels_fp or self._due(self._labels_at, now)):
            try:
                await self._sink.patch_labels(self.node, labels)
                self._metrics.writes.labels("labels").inc()
            except Exception as exc:
                errors.append(self._failed("labels", exc))
            else:
                self._labels_fp, self._labels_at, wrote_labels = labels_fp, now, True
        self._read_version = None if errors else version  # a failed write is retried from a fresh read
        self.last_poll = self._monotonic()
        return PollResult(wrote_status, wrote_labels, tuple(errors))

    async def _write_status(self, status: GPUNodeStatus) -> GPUNodeStatus:
        """Write ``status`` and return what was written. The first write (and the first after a
        failed one) makes sure the GPUNode exists and takes the transition times of the conditions
        it already shows with the same status: a publisher that starts (an agent restart, a replay
        node served anew) knows no earlier status, and an unchanged condition must keep its time."""
        if not self._created:
            published = await self._sink.create_gpunode(self.node)
            self._created = True
            if published:
                status = keep_transition_times(status, published)
        payload = status_payload(status)
        try:
            await self._sink.patch_status(self.node, payload)
        except GPUNodeMissing:
            log.info("GPUNode %s was deleted; recreating it", self.node)
            await self._sink.create_gpunode(self.node)
            await self._sink.patch_status(self.node, payload)
        self._metrics.writes.labels("status").inc()
        return status

    def _failed(self, kind: str, exc: Exception) -> str:
        self._metrics.write_errors.labels(kind).inc()
        if kind == "status":
            self._created = False  # re-check existence on the next attempt
        log.warning("node %s: writing %s failed: %s", self.node, kind, exc)
        return f"{kind}: {exc}"

    async def run(self) -> None:
        """Poll forever; a failed read or build is logged and retried next interval."""
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %s: poll failed", self.node)
            await asyncio.sleep(self._settings.poll_interval_s)
