"""The operator's liveness endpoint, ``/healthz``, answered on its event loop.

Served from the loop itself, not a thread: a loop that hangs (a blocking call where none may be)
fails the probe, which the /metrics server (a thread) cannot show. It is up for the whole life of
the process, standby and leader alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@contextlib.asynccontextmanager
async def serve_health(port: int, host: str = "0.0.0.0") -> AsyncIterator[None]:
    """Serve ``/healthz`` on ``port`` while the block runs; ``port`` 0 serves nothing."""
    if not port:
        yield
        return
    app = web.Application()
    app.router.add_get("/healthz", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield
    finally:
        await runner.cleanup()
