"""What a standby replica runs: the Lease campaign and its liveness endpoint, nothing else.

A standby used to keep a full watch cache through Kopf (every GPUJob, gang pod, queue and node
event, parsed and indexed) that it never read: the new leader relists everything from the API on
takeover anyway (``resync_from_api``), because a cache fed by watches may still be replaying its
initial list. Over a 500-job burst that cache cost the standby 44% of the leader's CPU. Now a
standby only campaigns (one Lease GET every retry period) and answers ``/healthz`` from its event
loop, so a hung loop still fails the probe; Kopf and its watches start when it becomes leader.

A leader that loses the Lease exits instead of standing by again (``LostLeadership``), as
client-go's and controller-runtime's leaders do: whatever it had under way is fenced, its cache and
Kopf's tasks are not reused, and its Deployment restarts it as a fresh standby.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from aiohttp import web

log = logging.getLogger("kubegang.operator.standby")

POLL_SECONDS = 0.5
"""How often a leader checks that it still holds the Lease (its fence decides; this only notices)."""


class LostLeadership(Exception):
    """This replica led and lost the Lease: the process exits and is restarted as a standby."""


class Leadership(Protocol):
    """What this module needs from an elector."""

    leading: asyncio.Event

    def holds(self) -> bool: ...


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def stand_by(elector: Leadership, *, health_port: int, host: str = "0.0.0.0") -> None:
    """Return once ``elector`` leads; meanwhile serve ``/healthz`` on ``health_port`` (0: none).

    The endpoint is closed before returning, so Kopf's liveness endpoint can take the same port.
    """
    if elector.leading.is_set():
        return
    runner: web.AppRunner | None = None
    if health_port:
        app = web.Application()
        app.router.add_get("/healthz", _health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, health_port).start()
    log.info("standing by: campaigning for the Lease, no watches until leading")
    try:
        await elector.leading.wait()
    finally:
        if runner is not None:
            await runner.cleanup()


async def until_lost(elector: Leadership, stop: asyncio.Event) -> None:
    """Set ``stop`` (Kopf's stop flag) once ``elector`` no longer holds the Lease."""
    # Polled: the fence is a deadline on a monotonic clock, which no event announces.
    while elector.holds():  # noqa: ASYNC110
        await asyncio.sleep(POLL_SECONDS)
    log.warning("lost the Lease: stopping the watches; the process exits to start again as a standby")
    stop.set()
