"""What a standby replica runs: the Lease campaign, nothing else (and ``/healthz``, ``_health``).

A standby used to keep a full watch cache (every GPUJob, gang pod, queue and node event, parsed
and indexed) that it never read: a new leader lists everything anyway before its first cycle
(``_watches.CacheFeed.synced``). Over a 500-job burst that cache cost the standby 44% of the
leader's CPU. Now a standby only campaigns (one Lease GET every retry period); its watches start
when it becomes leader.

A leader that loses the Lease exits instead of standing by again (``LostLeadership``), as
client-go's and controller-runtime's leaders do: whatever it had under way is fenced, its cache and
tasks are not reused, and its Deployment restarts it as a fresh standby.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("kubegang.operator.standby")

POLL_SECONDS = 0.5
"""How often a leader checks that it still holds the Lease (its fence decides; this only notices)."""


class LostLeadership(Exception):
    """This replica led and lost the Lease: the process exits and is restarted as a standby."""


class Leadership(Protocol):
    """What this module needs from an elector."""

    leading: asyncio.Event

    def holds(self) -> bool: ...


async def stand_by(elector: Leadership) -> None:
    """Return once ``elector`` leads."""
    if elector.leading.is_set():
        return
    log.info("standing by: campaigning for the Lease, no watches until leading")
    await elector.leading.wait()


async def until_lost(elector: Leadership) -> None:
    """Return once ``elector`` no longer holds the Lease."""
    # Polled: the fence is a deadline on a monotonic clock, which no event announces.
    while elector.holds():  # noqa: ASYNC110
        await asyncio.sleep(POLL_SECONDS)
    log.warning("lost the Lease: stopping the watches; the process exits to start again as a standby")
