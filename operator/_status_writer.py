"""GPUJob status writes: in order per job, decisions now, reports in the background.

The admission cycle must not wait for a "still queued" write of 500 jobs before its next decision, nor
may a late report overwrite a decision: a Queued patch landing after the Admitted one would undo an
admission in the API. So every status write of a job goes through here:

- ``write`` (urgent): awaited; it absorbs the job's pending background patch (the decision is newer,
  merge-patch keys of both are written in one call) and raises on failure so the caller can undo.
- ``later`` (background): returns at once; patches of one job coalesce while they wait, and a few
  workers send them whenever the rate limiter's background lane has room.

A per-job lock around the actual call keeps the order in which writes were decided. A background
worker pays for its token *before* taking that lock, so an urgent write never waits behind a
background one that is itself waiting for a token.

``versions`` is the newest resourceVersion known of each job (the watch's, or a write's answer, which
the watch may not have echoed yet). A ``fenced`` write carries it as a precondition: the API server
refuses it (409) if anyone wrote the job since, so a deposed leader's late admission fails instead of
admitting a job a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from kubegang.operator import _metrics as metrics
from kubegang.operator._job import JobView
from kubegang.operator._ports import KubePort

log = logging.getLogger("kubegang.operator.status")


class StatusChange(enum.Enum):
    """What one GPUJob status write carries: the ``change`` label of
    ``kubegang_operator_gpujob_status_writes_total``, which says where a job's status writes go (the
    API server's costliest handler in a burst)."""

    DECISION = "decision"
    """A phase written in the urgent lane: an admission, Running, a requeue, a finish, a repair."""
    REPORT = "report"
    """A phase written in the background lane: a waiting job's reason or message."""
    READY_COUNT = "ready_count"
    """The ready count of a gang that is forming."""
    QUEUE_POSITION = "queue_position"
    """A waiting job's place in its queue."""
    OTHER = "other"


def status_change(patch: Mapping[str, Any], *, urgent: bool) -> StatusChange:
    """What ``patch``, sent in the urgent lane or not, carries."""
    if "phase" in patch:
        return StatusChange.DECISION if urgent else StatusChange.REPORT
    if "readyReplicas" in patch:
        return StatusChange.READY_COUNT
    if "queuePosition" in patch:
        return StatusChange.QUEUE_POSITION
    return StatusChange.OTHER


def _observing(job: JobView, patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` with ``observedGeneration``: every status write describes the spec the decision was
    made on (docs/api.md), so a suspend, a resume or any edit is acknowledged by the write it causes.
    Before, only some transitions carried it, and an edited job kept the generation it was created at."""
    return {**patch, "observedGeneration": job.generation} if job.generation else dict(patch)


def _count(patch: Mapping[str, Any], *, urgent: bool) -> None:
    metrics.STATUS_WRITES.labels(status_change(patch, urgent=urgent).value, str(patch.get("phase") or "")).inc()


class StatusWriter:
    """Ordered, two-lane writer of GPUJob status (see the module docstring)."""

    def __init__(self, kube: KubePort, *, on_lost: Callable[[str], None], workers: int = 4,
                 versions: MutableMapping[str, str] | None = None) -> None:
        self.kube = kube
        self.versions: MutableMapping[str, str] = versions if versions is not None else {}
        """Job UID -> newest resourceVersion known (shared with the cache, which the watch updates)."""
        self.on_lost = on_lost
        """Called with a job UID when its background write failed and nothing newer was written: the
        caller drops its assumption, so the next cycle sees the API's status and decides again."""
        self.workers = workers
        self._pending: dict[str, tuple[JobView, dict[str, Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self._writes: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy = 0

    async def write(self, job: JobView, patch: Mapping[str, Any], *, fenced: bool = False) -> None:
        """Write ``patch`` now (urgent lane), after any write of the same job already under way.

        ``fenced``: only if the job is unchanged since its newest known version (a decision that must
        not land twice); a conflict raises the API's 409 and the caller undoes the decision.
        """
        async with self._job_lock(job.uid):
            queued = self._pending.pop(job.uid, None)
            merged = {**queued[1], **patch} if queued else dict(patch)
            self._writes[job.uid] = self._writes.get(job.uid, 0) + 1
            self._note_idle()
            precondition = (self.versions.get(job.uid) or job.resource_version or None) if fenced else None
            _count(merged, urgent=True)
            self._note_version(job.uid, await self.kube.patch_job_status(job, _observing(job, merged),
                                                                         resource_version=precondition))

    def _note_version(self, uid: str, version: str | None) -> None:
        if version:
            self.versions[uid] = version

    def later(self, job: JobView, patch: Mapping[str, Any]) -> None:
        """Queue ``patch`` for the background lane; merges with a patch of the job still waiting."""
        queued = self._pending.pop(job.uid, None)
        # Re-inserting moves the job to the back: FIFO by latest change, and one write per job.
        self._pending[job.uid] = (job, {**queued[1], **patch} if queued else dict(patch))
        self._wake.set()
        self._idle.clear()
        self._start_workers()

    def discard(self, uid: str) -> None:
        """Drop what waits for a job that is gone."""
        self._pending.pop(uid, None)
        self._writes.pop(uid, None)
        self._note_idle()

    @property
    def backlog(self) -> int:
        """Patches waiting for the background lane."""
        return len(self._pending)

    async def settle(self) -> None:
        """Wait until every queued background patch has been sent (tests, shutdown)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop the background workers (what still waits is lost: a new leader re-decides it)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    # -- internals -----------------------------------------------------------------------------------
    def _note_idle(self) -> None:
        if not self._pending and not self._busy:
            self._idle.set()

    def _start_workers(self) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        while len(self._tasks) < self.workers:
            self._tasks.append(asyncio.create_task(self._work(), name="kubegang-status-writer"))

    @contextlib.asynccontextmanager
    async def _job_lock(self, uid: str) -> Any:
        lock = self._locks.setdefault(uid, asyncio.Lock())
        self._users[uid] = self._users.get(uid, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[uid] -= 1
            if not self._users[uid]:
                del self._users[uid], self._locks[uid]

    async def _work(self) -> None:
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._busy += 1
            try:
                await self.kube.reserve_background()
                await self._send_one()
            except Exception:
                log.exception("background status writer failed")
            finally:
                self._busy -= 1
                self._note_idle()

    async def _send_one(self) -> None:
        if not self._pending:
            return  # an urgent write absorbed it while this worker waited for its token
        uid = next(iter(self._pending))
        async with self._job_lock(uid):
            queued = self._pending.pop(uid, None)
            if queued is None:
                return
            job, patch = queued
            self._writes[uid] = before = self._writes.get(uid, 0) + 1
            _count(patch, urgent=False)
            try:
                self._note_version(uid, await self.kube.patch_job_status(job, _observing(job, patch), prepaid=True))
            except Exception as exc:
                log.warning("could not write the status of %s: %s", job.key, exc)
                if self._writes.get(uid) == before and uid not in self._pending:
                    self.on_lost(uid)
