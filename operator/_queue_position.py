"""``status.queuePosition``: where each waiting job stands, written without a write storm.

The position is the core's (``kubegang.quota.queue_positions`` through the ``QuotaBook``: the admission
cycle's own order). A burst moves every position with each admission, so the leader reports at most
every ``POSITION_REFRESH_SECONDS``, only the jobs whose position changed, in the status writer's
background lane (coalesced per job, behind every decision), and only for jobs that have waited a
whole interval already: in a burst most jobs are admitted within seconds, and a position written for
each of them (then cleared) was two status writes per job that nobody read. The admission's own status
write clears the field (``Admission``); a job that stops waiting otherwise (suspended, finished,
deleted) has it cleared here. A user reads it with ``kubectl get gj -o yaml`` even where ``kubectl gang`` cannot list
other namespaces.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence

from kubegang.api import GPUJobStatus, QueuePosition
from kubegang.operator._job import JobView, status_fields, timestamp
from kubegang.operator._status_writer import StatusWriter
from kubegang.quota import QueuePosition as CorePosition

POSITION_REFRESH_SECONDS = 5.0
"""Shortest interval between two position passes."""

Positions = Callable[[Sequence[JobView]], Mapping[str, CorePosition]]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class PositionReporter:
    """Writes ``status.queuePosition`` of waiting jobs when it moved, at most every few seconds."""

    def __init__(self, writer: StatusWriter, *, every: float = POSITION_REFRESH_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic, now: Callable[[], dt.datetime] = _utcnow) -> None:
        self.writer = writer
        self.every = every
        self.monotonic = monotonic
        self.now = now
        self._last = -float("inf")
        self._written: dict[str, tuple[int, int, int, float, tuple[str, ...]]] = {}
        """UID -> (queue, cohort, ahead, aheadGPUs, reservedNodes) last written."""
        self._waited: set[str] = set()
        """UIDs pending at the previous pass: only they are written (they have waited an interval)."""

    def forget(self) -> None:
        """A new leadership: the API is the truth again (write every position once more)."""
        self._written.clear()
        self._waited.clear()

    def due(self) -> bool:
        """Whether ``report`` would make a pass now (its caller need not list the waiting jobs else)."""
        return self.monotonic() - self._last >= self.every

    def report(self, pending: Sequence[JobView], positions: Positions, job: Callable[[str], JobView | None],
               reservation: Callable[[str], frozenset[str] | None] = lambda uid: None) -> int:
        """One pass when it is due; returns the number of status patches queued. ``reservation``: the
        nodes a job holds by backfill (the cycle's ``reservation``), written with its position."""
        if not self.due():
            return 0
        self._last = self.monotonic()
        found = positions(pending)
        gpus = {view.uid: view.requested_gpus for view in pending}
        stamp = timestamp(self.now())
        queued = 0
        waited, self._waited = self._waited, {view.uid for view in pending}
        for view in pending:
            pos = found.get(view.uid)
            if pos is None or view.uid not in waited:
                continue
            ahead = pos.ahead
            reserved = tuple(sorted(reservation(view.uid) or ()))
            value = (pos.in_queue, pos.cohort, len(ahead), sum(gpus.get(uid, 0.0) for uid in ahead), reserved)
            if self._written.get(view.uid) == value:
                continue
            model = QueuePosition(queue=value[0], cohort=value[1], ahead=value[2], ahead_gpus=value[3],
                                  updated_at=stamp, reserved_nodes=list(reserved))
            self.writer.later(view, status_fields(GPUJobStatus(queue_position=model)))
            self._written[view.uid] = value
            queued += 1
        waiting = {view.uid for view in pending}
        for uid in [uid for uid in self._written if uid not in waiting]:
            del self._written[uid]
            gone = job(uid)
            # Suspended or finished: it has no place in a queue now (an admission cleared it itself).
            if gone is not None and not gone.admitted_at:
                self.writer.later(gone, status_fields(GPUJobStatus(queue_position=None)))
                queued += 1
        return queued
