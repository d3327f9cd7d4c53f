"""Wires the extender together: ledger + watch feed + three listeners + housekeeping.

Kept apart from ``__main__`` so tests and the local demo can start a whole extender in-process
(``async with run_extender(settings, ...)``) against a given API client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2

from kubegang.authn import KubeReviewApi
from kubegang.extender._grpc import GrpcSite, reloading_server_credentials, serve_grpc
from kubegang.extender._http import RunningSite, build_extender_app, build_health_app, serve
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender._settings import ExtenderSettings
from kubegang.extender._watch import ClusterFeed, api_client
from kubegang.tls import ReloadingServerTLS, ReloadOutcome
from kubegang.topology import TopologyLabels

log = logging.getLogger(__name__)


@dataclass
class RunningExtender:
    """Handles of a started extender (bound ports are useful with port 0)."""

    ledger: Ledger
    """The ledger."""
    metrics: ExtenderMetrics
    """Its metrics."""
    https: RunningSite
    """kube-scheduler verbs listener."""
    grpc: GrpcSite
    """Placement listener."""
    health: RunningSite
    """Health/metrics listener (HTTPS when metrics auth is on)."""
    failed: asyncio.Event
    """Set when a background task (the watch feed, housekeeping, TLS reload) ended with an exception:
    an extender without its feed would stay unready for ever, so the process exits to be restarted."""


def publish(ledger: Ledger, metrics: ExtenderMetrics) -> None:
    """Refresh the ledger gauges."""
    metrics.gpus.clear()
    for product, states in ledger.gpu_totals().items():
        for state, count in states.items():
            metrics.gpus.labels(state, product).set(count)
    metrics.reservations.set(ledger.reservation_count)
    metrics.intrusions.inc(ledger.take_intrusions())


STALE_AFTER_SECONDS = 60.0
"""How long a watched resource may fail to be followed before the extender says it is not ready: its
ledger may then miss pods bound meanwhile, and a gang placed from it could be given GPUs a pod took."""


def ready(ledger: Ledger, feed: ClusterFeed) -> bool:
    """``/readyz``: the ledger was loaded and every resource has been followed within the last
    ``STALE_AFTER_SECONDS`` (an unready extender drops out of its Service, so kube-scheduler's and the
    operator's calls wait, as they do when it is down, instead of being answered from stale state)."""
    return ledger.synced and feed.stale_for() < STALE_AFTER_SECONDS


async def _housekeeping(ledger: Ledger, metrics: ExtenderMetrics, feed: ClusterFeed, every: float,
                        requeue_batch: int) -> None:
    requeuing: asyncio.Task[int] | None = None
    try:
        while True:
            await asyncio.sleep(every)
            try:
                ledger.expire()
                publish(ledger, metrics)
                # The requeue patches go on beside it: an API server that answers slowly must not hold
                # up the expiry of reservations (each patch may wait its whole timeout).
                if requeuing is None or requeuing.done():
                    if requeuing is not None and not requeuing.cancelled() and requeuing.exception() is not None:
                        log.error("requeueing waiting pods failed: %s", requeuing.exception())
                    requeuing = asyncio.create_task(feed.requeue(ledger.take_requeue(requeue_batch)),
                                                    name="requeue")
            except Exception:
                log.exception("housekeeping failed; continuing")
    finally:
        if requeuing is not None:
            requeuing.cancel()


def _count_reload(metrics: ExtenderMetrics, outcome: ReloadOutcome) -> None:
    if outcome is not ReloadOutcome.UNCHANGED:
        metrics.tls_reloads.labels(outcome.value).inc()


@contextlib.asynccontextmanager
async def run_extender(settings: ExtenderSettings,
                       client: httpx2.AsyncClient | None = None) -> AsyncIterator[RunningExtender]:
    """Start everything; on exit stop the listeners and the feed."""
    metrics = ExtenderMetrics()
    ledger = Ledger(labels=TopologyLabels.preset(settings.topology_preset))
    client = client if client is not None else api_client(settings.kubeconfig)
    feed = ClusterFeed(client, ledger, metrics)
    tls = ReloadingServerTLS(settings.tls_cert, settings.tls_key, settings.client_ca)
    serving = settings.serving
    reviews = KubeReviewApi(client)  # the reviews go with the extender's own credentials
    https = await serve(build_extender_app(ledger, metrics, max_body_bytes=settings.max_body_bytes,
                                           serving=serving, reviews=reviews),
                        settings.https_address, settings.https_port, tls.listening_context())
    grpc_site = await serve_grpc(ledger, metrics, f"{settings.grpc_address}:{settings.grpc_port}",
                                 reloading_server_credentials(tls),
                                 default_ttl_seconds=settings.reservation_ttl_seconds)
    health = await serve(build_health_app(metrics, lambda: ready(ledger, feed), serving, reviews),
                         settings.health_address, settings.health_port, serving.ssl_context())
    tasks = [asyncio.create_task(feed.run(), name="watch-feed"),
             asyncio.create_task(_housekeeping(ledger, metrics, feed, settings.housekeeping_seconds,
                                               settings.requeue_batch),
                                 name="housekeeping"),
             asyncio.create_task(tls.watch(settings.tls_reload_seconds,
                                           lambda outcome: _count_reload(metrics, outcome)),
                                 name="tls-reload")]
    failed = asyncio.Event()

    def stopped(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.critical("%s stopped; the extender exits to be restarted", task.get_name(),
                         exc_info=task.exception())
            failed.set()

    for task in tasks:
        task.add_done_callback(stopped)
    log.info("extender listening: https %s, grpc %s, health %s", https.port, grpc_site.port, health.port)
    try:
        yield RunningExtender(ledger, metrics, https, grpc_site, health, failed)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await grpc_site.close()
        await https.close()
        await health.close()
        await client.aclose()
