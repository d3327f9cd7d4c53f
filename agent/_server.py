"""``/metrics`` and ``/healthz`` on their own port (DESIGN: metrics and health never share the
API port, and the agent has no API port). With metrics auth on (the default) the port is HTTPS and
``/metrics`` needs a bearer token RBAC allows ``get`` on it (``kubegang.authn``); ``/healthz`` stays
open to kubelet."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from kubegang.authn import ReviewApi, SecureServing, guard, metrics_handler


def make_app(registry: CollectorRegistry, healthy: Callable[[], bool], serving: SecureServing | None = None,
             reviews: ReviewApi | None = None) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "stalled\n")

    app = web.Application()
    if serving is not None and reviews is not None:
        guard(app, serving, reviews, ["/metrics"])
    app.router.add_get("/metrics", metrics_handler(registry))
    app.router.add_get("/healthz", healthz)
    return app


async def start_server(app: web.Application, host: str, port: int,
                       ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner
