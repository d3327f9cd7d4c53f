"""docs/operator.md: "The leader gives the Lease up at shutdown". After a clean stop (its campaign
cancelled, then ``release()``, as ``_run.py`` does), the Lease has no holder and a one-second
duration, so a standby takes it at once instead of waiting out the 15 s lease duration."""

from __future__ import annotations

import asyncio
import contextlib

from kubegang.operator import _metrics as metrics
from tests.unit.operator.test_leader_fence import Clocks, LeaseStore, _elector


async def test_a_leader_stopped_cleanly_clears_the_lease_and_a_standby_takes_it_at_once() -> None:
    store, clocks = LeaseStore(), Clocks()
    leader, standby = _elector(store, clocks, "replica-a"), _elector(store, clocks, "replica-b")
    campaign = asyncio.create_task(leader.run())
    await asyncio.wait_for(leader.leading.wait(), timeout=5)
    assert metrics.IS_LEADER._value.get() == 1
    assert not await standby.try_acquire_or_renew()   # held, and renewed: the standby would wait 15 s
    held = store.lease.spec
    assert (held.holderIdentity, held.leaseDurationSeconds) == ("replica-a", 15)

    campaign.cancel()                                  # the clean stop: the campaign ends, then release()
    with contextlib.suppress(asyncio.CancelledError):
        await campaign
    await leader.release()

    released = store.lease.spec
    assert released.holderIdentity is None and released.leaseDurationSeconds == 1
    assert not leader.holds() and not leader.leading.is_set()
    assert metrics.IS_LEADER._value.get() == 0         # /metrics may still be served while it exits
    assert await standby.try_acquire_or_renew()       # no clock moved: free at once
    taken = store.lease.spec
    assert (taken.holderIdentity, taken.leaseDurationSeconds, taken.leaseTransitions) == ("replica-b", 15, 1)


async def test_a_stopping_replica_whose_lease_was_taken_over_does_not_clear_the_new_holders_lease() -> None:
    store, clocks = LeaseStore(), Clocks()
    old, new = _elector(store, clocks, "replica-a"), _elector(store, clocks, "replica-b")
    assert await old.try_acquire_or_renew()
    old.leading.set()
    assert not await new.try_acquire_or_renew()
    clocks.advance(15)                                 # the old leader was paused past its lease
    assert await new.try_acquire_or_renew()
    version = store.version
    await old.release()                                # it still thinks it leads, and stops
    assert store.version == version                    # no write: the Lease is replica-b's
    assert (store.lease.spec.holderIdentity, store.lease.spec.leaseDurationSeconds) == ("replica-b", 15)
