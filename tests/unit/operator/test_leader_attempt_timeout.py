"""A leader's renewal may take what is left of its renew deadline (client-go's bound), not just the
2 s retry period: on an overloaded API server that answered in 3 s the leader lost the Lease
mid-start-up, exited, and the stack never came up. The deadline stays the fence."""

from __future__ import annotations

from tests.unit.operator.test_leader_fence import Clocks, LeaseStore, _elector


async def test_a_standby_tries_for_one_retry_period() -> None:
    elector = _elector(LeaseStore(), Clocks(), "a")
    assert elector.attempt_timeout() == elector.retry_period_seconds == 2


async def test_a_leader_may_wait_for_its_renewal_until_the_deadline() -> None:
    store, clocks = LeaseStore(), Clocks()
    leader = _elector(store, clocks, "a")
    assert await leader.try_acquire_or_renew()
    leader.leading.set()
    assert leader.attempt_timeout() == 10               # just renewed: the whole renew deadline
    clocks.advance(4)
    assert leader.attempt_timeout() == 6
    clocks.advance(5)
    assert leader.attempt_timeout() == 2                # never less than a retry period
    clocks.advance(1)
    assert not leader.holds()                           # and the deadline still fences it
