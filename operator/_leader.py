"""Lease-based leader election (coordination.k8s.io/v1 Lease), as client-go's leaderelection does it.

Kopf's peering only pauses operators that see each other; it does not guarantee a single writer.
Here the replica that holds the Lease ``kubegang-operator`` is the only one that admits, evicts and
writes status; every replica keeps its watch cache warm, so a standby takes over within one lease
duration. Optimistic concurrency (resourceVersion) makes acquisition a compare-and-swap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from kubegang.operator import _metrics as metrics

log = logging.getLogger("kubegang.operator.leader")


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease that decide who leads."""

    holder: str | None
    """spec.holderIdentity."""
    renew_time: dt.datetime | None
    """spec.renewTime."""
    duration_seconds: int
    """spec.leaseDurationSeconds."""


def may_acquire(record: LeaseRecord | None, identity: str, now: dt.datetime) -> bool:
    """Whether ``identity`` may take (or keep) the lease described by ``record`` at ``now``."""
    if record is None or not record.holder or record.holder == identity:
        return True
    if record.renew_time is None:
        return True
    return now >= record.renew_time + dt.timedelta(seconds=record.duration_seconds)


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
        renew_interval_seconds: float = 5.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_duration_seconds = lease_duration_seconds
        self.renew_interval_seconds = renew_interval_seconds
        self.clock = clock
        self.leading = asyncio.Event()
        self._last_renewed: dt.datetime | None = None

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the Lease now."""
        return self.leading.is_set()

    async def try_acquire_or_renew(self) -> bool:
        """One compare-and-swap attempt; returns whether this replica leads afterwards."""
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
            return True
        spec = lease.spec or LeaseSpec()
        record = LeaseRecord(
            spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds or self.lease_duration_seconds
        )
        if not may_acquire(record, self.identity, now):
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
        return True

    async def run(self) -> None:
        """Campaign forever: renew while leading, retry while not. Cancel to stop."""
        while True:
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(), timeout=self.renew_interval_seconds)
            except Exception as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                ok = False
            now = self.clock()
            if ok:
                self._last_renewed = now
                if not self.leading.is_set():
                    log.info("became leader (%s)", self.identity)
                self.leading.set()
            elif self.leading.is_set():
                # Failing to renew is tolerated until the lease would have expired for others.
                expired = self._last_renewed is None or now >= self._last_renewed + dt.timedelta(
                    seconds=self.lease_duration_seconds
                )
                if expired or not await self._still_ours():
                    log.warning("lost leadership (%s)", self.identity)
                    self.leading.clear()
            metrics.IS_LEADER.set(1 if self.leading.is_set() else 0)
            await asyncio.sleep(self.renew_interval_seconds)

    async def _still_ours(self) -> bool:
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except Exception:
            return True  # cannot tell; the expiry check above bounds how long we keep acting
        return bool(lease.spec and lease.spec.holderIdentity == self.identity)

    async def release(self) -> None:
        """Give the Lease up at shutdown so the standby need not wait for it to expire."""
        if not self.leading.is_set():
            return
        self.leading.clear()
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

    async def run(self) -> None:
        """Nothing to campaign for."""
        await asyncio.Event().wait()

    async def release(self) -> None:
        """Nothing to release."""
