"""The leader's work loop: rebuild from the API, then admit, supervise and report, one at a time.

A single asyncio task runs the admission cycle and the gang supervisor in turn, so no two decisions
ever race inside one process, and only the replica that holds the Lease runs it. It wakes on any cache
change (debounced on the leading edge: ``debounce_delay``) or after ``resync_seconds``. Gang
creation, Events, waiting reasons and GPUQueue status are written by background tasks
(``_admission``, ``_status_writer``): GPUQueue status at most every ``QUEUE_STATUS_SECONDS``, since
pending counts move with every cycle of a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kubegang.api import QueueConditionReason, QueueConditionType
from kubegang.operator import _metrics as metrics
from kubegang.operator._admission import Admission
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import set_condition
from kubegang.operator._invalid_jobs import InvalidJobReporter
from kubegang.operator._ports import KubePort, LeftOut, QuotaPort
from kubegang.operator._queue_position import PositionReporter
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._supervisor import Supervisor

log = logging.getLogger("kubegang.operator.controller")

DEBOUNCE_SECONDS = 0.05
"""Least time from the end of one step to the start of the next, so that a burst of watch events
settles into one cycle (see ``debounce_delay``)."""


def debounce_delay(since_last_step: float, interval: float = DEBOUNCE_SECONDS) -> float:
    """Seconds to wait before a step, ``since_last_step`` seconds after the previous one ended.

    A leading-edge debounce: an event that finds the loop idle for ``interval`` or more is
    acted on at once, and only events that come while steps follow each other wait for the rest of
    the interval. In a burst this is the same cadence as a fixed sleep after every wake-up (one step
    per ``DEBOUNCE_SECONDS`` at most), while a lone GPUJob or a trial's end no longer waits 50 ms for
    events that are not coming: the end-to-end sweep pays that wait twice per trial (its end, then the
    next trial's admission)."""
    return max(0.0, interval - since_last_step)

QUEUE_STATUS_SECONDS = 5.0
"""Shortest interval between two GPUQueue status passes (a report, not a decision; Kueue's
``queueVisibility.updateIntervalSeconds`` is also 5 s). At 1 s a full-size burst wrote 692-715 GPUQueue
status updates for 17 queues in 75 s, a custom-resource status write each: counts move with every
cycle, so nearly every queue changed every second."""


class Leadership(Protocol):
    """What the loop needs from an elector."""

    leading: asyncio.Event

    @property
    def is_leader(self) -> bool: ...


Resync = Callable[[ClusterCache], Awaitable[None]]


def queue_status(cache: ClusterCache, quota: QuotaPort,
                 written: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The status of every GPUQueue: usage and borrowing from quota, job counts from the cache.

    ``written``: what this leader last wrote per queue. Its conditions are the ones to carry on (their
    ``lastTransitionTime`` included) while the watch has not echoed them yet, so a late echo does not
    make every pass a new write; a new leader starts from the conditions the API has."""
    parents = {name: (body.get("spec") or {}).get("parent") for name, body in cache.queues.items()}

    def up(queue: str) -> list[str]:
        chain, seen = [], set()
        current: str | None = queue
        while current and current not in seen:
            seen.add(current)
            chain.append(current)
            current = parents.get(current)
        return chain

    pending: dict[str, int] = dict.fromkeys(cache.queues, 0)
    admitted: dict[str, int] = dict.fromkeys(cache.queues, 0)
    # The metric counts each queue's own jobs, as kubegang_queue_pending_jobs does (a sum over queues
    # counts every job once); the status counts a parent's whole subtree.
    own: dict[str, int] = dict.fromkeys(cache.queues, 0)
    for job in cache.pending():
        for name in up(job.queue):
            if name in pending:
                pending[name] += 1
    for job in cache.holding():
        if job.queue in own:  # a deleted queue's series goes, though its jobs still hold quota
            own[job.queue] += 1
        for name in up(job.queue):
            if name in admitted:
                admitted[name] += 1
    usage = quota.usage()
    out: dict[str, dict[str, Any]] = {}
    for name, body in cache.queues.items():
        u = usage.get(name)
        used = dict(u.usage) if u else {}
        borrowed = dict(u.borrowed) if u else {}
        out[name] = {
            "usage": [{"flavor": f, "gpus": g} for f, g in sorted(used.items())],
            "borrowed": [{"flavor": f, "gpus": g} for f, g in sorted(borrowed.items()) if g],
            "usedGPUs": sum(used.values()),
            "pending": pending[name],
            "admitted": admitted[name],
            "fairShare": round(u.fair_share, 6) if u else 0.0,
            **_standing(body, quota.left_out.get(name), (written or {}).get(name)),
        }
    metrics.QUEUE_ADMITTED_JOBS.export(own)
    return out


def _standing(body: Mapping[str, Any], left_out: LeftOut | None,
              written: Mapping[str, Any] | None) -> dict[str, Any]:
    """observedGeneration and the ``Active`` condition: whether the queue is in the quota tree."""
    generation = (body.get("metadata") or {}).get("generation")
    previous = (written or {}).get("conditions") or (body.get("status") or {}).get("conditions") or []
    if left_out is None:
        reason, message = QueueConditionReason.IN_TREE, "in the quota tree: its jobs are admitted"
    else:
        reason, message = left_out.reason, f"left out of the quota tree: {left_out.message}"
    conditions = set_condition(previous, QueueConditionType.ACTIVE,
                               left_out is None, reason.value, message, observed_generation=generation)
    return {"observedGeneration": generation, "conditions": conditions}


class Controller:
    """Runs the leader's loop; ``resync`` reloads the cache from the API on each new leadership."""

    def __init__(
        self,
        cache: ClusterCache,
        admission: Admission,
        leadership: Leadership,
        kube: KubePort,
        *,
        resync: Resync | None = None,
        resync_seconds: float = 5.0,
    ) -> None:
        self.cache = cache
        self.admission = admission
        self.supervisor = Supervisor(admission)
        self.leadership = leadership
        self.kube = kube
        self.resync = resync
        self.resync_seconds = resync_seconds
        self._written: dict[str, Mapping[str, Any]] = {}
        self._queue_status_task: asyncio.Task[None] | None = None
        self._queue_status_at = -math.inf
        self.positions = PositionReporter(admission.writer)
        """``status.queuePosition`` of waiting jobs (at most every few seconds, when it moved)."""
        self.invalid = InvalidJobReporter(cache, kube)
        """The Unschedulable ``InvalidSpec`` report of jobs the operator cannot read."""

    async def run(self) -> None:
        """Forever: wait for leadership, rebuild, then cycle while leading."""
        while True:
            await self.leadership.leading.wait()
            log.info("leading: rebuilding state from the API")
            try:
                if self.resync is not None:
                    await self.resync(self.cache)
                self.admission.sync_queues()
                self._written.clear()
                self.positions.forget()
                self.supervisor.look_at_everything()
            except Exception:
                log.exception("rebuilding state failed; retrying")
                await asyncio.sleep(1)
                continue
            loop = asyncio.get_running_loop()
            while self.leadership.is_leader:
                due = await self.step()
                ended = loop.time()
                timeout = min(self.resync_seconds, due if due is not None else math.inf)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.cache.wake.wait(), timeout=max(timeout, DEBOUNCE_SECONDS))
                await asyncio.sleep(debounce_delay(loop.time() - ended))
            log.info("no longer leading: standing by")

    async def step(self) -> float | None:
        """One admission cycle, one supervision pass, one queue-status write; never raises."""
        self.cache.wake.clear()
        due: float | None = None
        try:
            await self.admission.sources.sync()
        except Exception:
            log.exception("representing RayClusters and pod groups failed")
        try:
            outcomes = await self.admission.run_cycle()
            for outcome in outcomes:
                log.debug("admission %s: %s %s", outcome.job, outcome.result, outcome.message)
        except Exception:
            log.exception("admission cycle failed")
        try:
            due = await self.supervisor.run_pass()
        except Exception:
            log.exception("supervision pass failed")
        if self.invalid.due():
            try:
                await self.invalid.report(self.admission.clock())
            except Exception:
                log.exception("reporting invalid jobs failed")
        queue_status_due = self._start_queue_status()
        if queue_status_due is not None:
            due = queue_status_due if due is None else min(due, queue_status_due)
        quota = self.admission.quota
        # The order is the core tree's (another port has none to report); every few seconds only.
        if isinstance(quota, QuotaBook) and self.positions.due():
            try:
                self.positions.report(self.cache.pending(), quota.positions, self.cache.job,
                                      self.admission.cycle.reservation)
            except Exception:
                log.exception("reporting queue positions failed")
        return due

    def _start_queue_status(self) -> float | None:
        """Write GPUQueue status in the background, one pass at a time, at most every
        ``QUEUE_STATUS_SECONDS``; returns the seconds until a pass skipped for the interval may run (so
        the last change of a burst is written that long after it at most), else None."""
        loop = asyncio.get_running_loop()
        if self._queue_status_task is not None and not self._queue_status_task.done():
            return QUEUE_STATUS_SECONDS
        since = loop.time() - self._queue_status_at
        if since < QUEUE_STATUS_SECONDS:
            return QUEUE_STATUS_SECONDS - since
        self._queue_status_at = loop.time()

        async def write() -> None:
            try:
                await self.write_queue_status()
            except Exception:
                log.exception("writing GPUQueue status failed")

        self._queue_status_task = asyncio.create_task(write(), name="kubegang-queue-status")
        return None

    async def write_queue_status(self) -> None:
        """Patch each GPUQueue's status when it changed since the last write."""
        for name, status in queue_status(self.cache, self.admission.quota, self._written).items():
            if self._written.get(name) == status:
                continue
            try:
                await self.kube.patch_queue_status(name, status)
            except Exception as exc:
                # One queue's refused write (a webhook, a conflict) must not starve the queues after it;
                # it is not recorded as written, so the next pass tries it again.
                log.warning("writing the status of GPUQueue %s failed: %s", name, exc)
                continue
            self._written[name] = status
