"""The operator's ``/metrics``: served from a thread of its own, behind the token check by default.

Why a thread (``kubegang.authn.ThreadedSite``): the event loop runs Kopf and the admission cycle, and a
scrape, with the TokenReview and SubjectAccessReview it may cost, must neither wait for that loop nor
add to it. Liveness is Kopf's ``/healthz`` on the loop itself (``--health-port``), so a hung loop is
still seen there.
"""

from __future__ import annotations

from aiohttp import web

from kubegang.authn import SecureServing, ThreadedSite, guard, kube_review_api, metrics_handler
from kubegang.operator._metrics import REGISTRY


def start_metrics(port: int, serving: SecureServing, kubeconfig: str | None, host: str = "0.0.0.0") -> ThreadedSite:
    """Serve ``/metrics`` on ``port`` until the process exits; raises if the port cannot be bound."""

    def build() -> web.Application:  # runs on the thread's loop, which the review client belongs to
        app = web.Application()
        if serving.checked:
            guard(app, serving, kube_review_api(kubeconfig), ["/metrics"])
        app.router.add_get("/metrics", metrics_handler(REGISTRY))
        return app

    return ThreadedSite(build, host, port, serving.ssl_context()).start()
