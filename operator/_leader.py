"""Lease-based leader election (coordination.k8s.io/v1 Lease), fenced as client-go's leaderelection is.

Kopf's peering only pauses operators that see each other; it does not guarantee a single writer.
Here the replica that holds the Lease ``kubegang-operator`` is the only one that admits, evicts and
writes status; every replica keeps its watch cache warm, so a standby takes over within one lease
duration. Optimistic concurrency (resourceVersion) makes acquisition a compare-and-swap.

Two leaders must never act at once, so the timings are client-go's, and they are a fence:

- A standby takes the Lease only when the record it sees has not changed for ``lease_duration``
  *by its own clock* since it first saw it (client-go's observed time), never by comparing the
  holder's ``renewTime`` with a clock of its own: skewed clocks cannot shorten the wait.
- The leader acts only until ``renew_deadline`` (shorter than the lease) after the start of its last
  successful renewal, by a monotonic clock; a renewal that fails or cannot tell ("cannot tell" is
  "not leader") is retried every ``retry_period`` until then. :meth:`LeaderElector.holds` is that
  test, and every write the operator makes checks it first (``KubeApi``): a leader that was paused
  (SIGSTOP, a long GC, a partitioned node) wakes up fenced, before it could write anything.
- What may still be in flight when the deadline passes is refused by the API server: the write that
  admits a job carries the job's resourceVersion (``StatusWriter.write(..., fenced=True)``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from kubegang.operator import _metrics as metrics

log = logging.getLogger("kubegang.operator.leader")


class NotLeading(Exception):
    """A write was refused because this replica may no longer act as the leader."""


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease that decide who leads."""

    holder: str | None
    """spec.holderIdentity."""
    renew_time: dt.datetime | None
    """spec.renewTime."""
    duration_seconds: int
    """spec.leaseDurationSeconds."""


def may_acquire(record: LeaseRecord | None, identity: str, *, unchanged_for: float) -> bool:
    """Whether ``identity`` may take (or keep) the lease described by ``record``.

    ``unchanged_for``: seconds since this replica first saw exactly this record (its own monotonic
    clock); another holder's lease is free only once it went unrenewed for its whole duration.
    """
    if record is None or not record.holder or record.holder == identity:
        return True
    return unchanged_for >= record.duration_seconds


class LeaderElector:
    """Acquires and renews the Lease; ``leading`` is set while this replica leads."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str,
        identity: str,
        name: str = "kubegang-operator",
        lease_duration_seconds: int = 15,
        renew_deadline_seconds: float = 10.0,
        retry_period_seconds: float = 2.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_period_seconds < renew_deadline_seconds < lease_duration_seconds:
            raise ValueError(
                f"leader election needs retry period ({retry_period_seconds}s) < renew deadline "
                f"({renew_deadline_seconds}s) < lease duration ({lease_duration_seconds}s)"
            )
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_duration_seconds = lease_duration_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.retry_period_seconds = retry_period_seconds
        self.clock = clock
        self.monotonic = monotonic
        self.leading = asyncio.Event()
        self._valid_until = -float("inf")
        """Monotonic time until which this replica may act: last successful renewal's start + deadline."""
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0

    @property
    def is_leader(self) -> bool:
        """Whether this replica may act as the leader now (the fence; see the module docstring)."""
        return self.holds()

    def holds(self) -> bool:
        """True while leading and inside the renew deadline of the last successful renewal."""
        if not self.leading.is_set():
            return False
        if self.monotonic() < self._valid_until:
            return True
        self._step_down("renew deadline passed")
        return False

    def time_left(self) -> float:
        """Seconds until the renew deadline of the last successful renewal (0 when not leading): how
        long a write sent now may stay in flight (``KubeApi``)."""
        if not self.leading.is_set():
            return 0.0
        return max(0.0, self._valid_until - self.monotonic())

    def _step_down(self, why: str) -> None:
        if self.leading.is_set():
            log.warning("lost leadership (%s): %s", self.identity, why)
            self.leading.clear()
            metrics.IS_LEADER.set(0)

    def _unchanged_for(self, record: LeaseRecord, now: float) -> float:
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now - self._observed_at

    async def try_acquire_or_renew(self) -> bool:
        """One compare-and-swap attempt; returns whether this replica holds the Lease afterwards."""
        started = self.monotonic()
        now = self.clock()
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            lease = None
        if lease is None:
            fresh = Lease(
                metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                spec=LeaseSpec(
                    holderIdentity=self.identity,
                    leaseDurationSeconds=self.lease_duration_seconds,
                    acquireTime=now,
                    renewTime=now,
                    leaseTransitions=0,
                ),
            )
            try:
                await self.client.create(fresh)
            except ApiError as exc:
                if exc.status.code == 409:
                    return False  # another replica created it first
                raise
            self._renewed(started)
            return True
        spec = lease.spec or LeaseSpec()
        record = LeaseRecord(
            spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds or self.lease_duration_seconds
        )
        if not may_acquire(record, self.identity, unchanged_for=self._unchanged_for(record, started)):
            self._step_down(f"the Lease is held by {record.holder}")
            return False
        if spec.holderIdentity != self.identity:
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            spec.acquireTime = now
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_duration_seconds
        spec.renewTime = now
        lease.spec = spec
        try:
            await self.client.replace(lease)  # carries resourceVersion: a conflict means we lost the race
        except ApiError as exc:
            if exc.status.code == 409:
                return False
            raise
        self._renewed(started)
        return True

    def _renewed(self, started: float) -> None:
        # Counted from before the request: the Lease was renewed no earlier than that.
        self._valid_until = started + self.renew_deadline_seconds

    def attempt_timeout(self) -> float:
        """How long one acquire-or-renew may take: a leader's renewal may use what is left of its renew
        deadline (client-go bounds its renew loop by the deadline, not each try by the retry period),
        so an API server that answers in 3 s under load does not cost the Lease; a standby's try, the
        retry period. The fence is the deadline itself (``holds``), whatever an attempt takes."""
        if not self.leading.is_set():
            return self.retry_period_seconds
        return max(self.retry_period_seconds, self._valid_until - self.monotonic())

    async def run(self) -> None:
        """Campaign forever: renew while leading, retry while not. Cancel to stop."""
        while True:
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(), timeout=self.attempt_timeout())
            except Exception as exc:  # cannot tell: not a renewal, and the deadline decides
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                ok = False
            if ok and not self.leading.is_set():
                log.info("became leader (%s)", self.identity)
                self.leading.set()
            self.holds()  # steps down once the deadline has passed without a renewal
            metrics.IS_LEADER.set(1 if self.leading.is_set() else 0)
            await asyncio.sleep(self.retry_period_seconds)

    async def release(self) -> None:
        """Give the Lease up at shutdown so the standby need not wait for it to expire."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        metrics.IS_LEADER.set(0)  # the process may serve /metrics for a while yet: it leads no more
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.leaseDurationSeconds = 1
                await self.client.replace(lease)
        except Exception as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)


class AlwaysLeader:
    """Stand-in when leader election is off (a single replica, or local runs)."""

    def __init__(self) -> None:
        self.leading = asyncio.Event()
        self.leading.set()
        metrics.IS_LEADER.set(1)

    @property
    def is_leader(self) -> bool:
        """Always True."""
        return True

    def holds(self) -> bool:
        """Always True."""
        return True

    def time_left(self) -> float:
        """No deadline."""
        return math.inf

    async def run(self) -> None:
        """Nothing to campaign for."""
        await asyncio.Event().wait()

    async def release(self) -> None:
        """Nothing to release."""
