"""Assemble the operator from its parts and run it until a signal stops it.

Three long-lived tasks: the Lease campaign, the leader's loop, and the watches (``_watches``), which
only the leader runs (a standby campaigns and answers /healthz, nothing else: ``_standby``). On
SIGINT/SIGTERM the tasks are cancelled and the Lease is given up, so the standby takes over at once
instead of after the lease expires; when the leader loses the Lease, ``run`` raises
``LostLeadership``, so the process exits and comes back as a fresh standby: within
``EXIT_GRACE_SECONDS``, whatever is still stopping (``exit_after``).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Awaitable

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ConfigError

from kubegang.admission import CycleSettings
from kubegang.extender.client import PlacementClient
from kubegang.listwatch import api_client
from kubegang.operator._admission import Admission
from kubegang.operator._cache import ClusterCache
from kubegang.operator._controller import Controller
from kubegang.operator._extender_placement import ExtenderPlacement
from kubegang.operator._health import serve_health
from kubegang.operator._kube import KubeApi, RateLimiter, make_client
from kubegang.operator._leader import AlwaysLeader, LeaderElector
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._settings import OperatorSettings
from kubegang.operator._standby import LostLeadership, stand_by, until_lost
from kubegang.operator._watches import CacheFeed
from kubegang.quota import BackfillPolicy

log = logging.getLogger("kubegang.operator")

EXIT_GRACE_SECONDS = 5.0
"""How long a replica that lost the Lease may take to cancel its tasks and close its clients before it
is made to exit. Nothing needs that cleanup (the fence refuses every write it still tries), and a
fenced process that lingers keeps its Pod from being restarted as a standby; client-go's leaders exit
at once."""


def exit_after(seconds: float, status: int) -> threading.Timer:
    """Exit the process with ``status`` in ``seconds`` unless it has exited by then.

    The graceful path (cancel, close, ``asyncio.run``'s own teardown) has no bound of its own: a task
    that outlives its cancellation or a thread stuck in a blocking call would hold it. The stacks
    are written to stderr first, so a slow stop can be diagnosed.
    """

    def force() -> None:
        log.error("still stopping after %.0fs: exiting now (status %d); the threads' stacks follow", seconds, status)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        faulthandler.dump_traceback(all_threads=True)
        os._exit(status)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()
    return timer


def placement_client(settings: OperatorSettings) -> PlacementClient:
    """The mTLS gRPC client of the extender; ValueError names a missing TLS file."""
    for field in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(settings, field)
        if path is None or not path.is_file():
            raise ValueError(f"{field.replace('_', '-')}: {path} is not a file (the extender accepts mTLS only)")
    assert settings.tls_ca and settings.tls_cert and settings.tls_key
    return PlacementClient.from_files(
        settings.extender_address,
        settings.tls_ca,
        settings.tls_cert,
        settings.tls_key,
        timeout=settings.extender_timeout_seconds,
        server_name=settings.tls_server_name,
    )


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT and SIGTERM (the kubelet's stop), so ``run`` can give up the Lease."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)


class WatchesEnded(RuntimeError):
    """The cache feed stopped following the cluster (a bug: every failure it meets is retried)."""


async def first_of(*waits: Awaitable[object]) -> None:
    """Return when the first of ``waits`` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run(settings: OperatorSettings) -> None:
    """Run the operator until it is stopped."""
    cache = ClusterCache()
    extender = placement_client(settings)
    try:
        client = make_client(settings.kubeconfig, timeout_seconds=settings.api_timeout_seconds)
        watch_client = api_client(settings.kubeconfig, timeout_seconds=settings.api_timeout_seconds)
        # The Lease is read and replaced every retry period, a few requests a second: lightkube's typed
        # client keeps the election readable; the writes that scale with jobs go through ``client``.
        lease_client = AsyncClient(config=KubeConfig.from_file(settings.kubeconfig) if settings.kubeconfig else None,
                                   timeout=httpx2.Timeout(settings.api_timeout_seconds))
    except ConfigError as exc:
        raise ValueError(f"kubeconfig: {exc}") from None
    kube = KubeApi(client, RateLimiter(settings.api_qps, settings.api_burst))
    quota = QuotaBook(priority_of=cache.priority_of, node_products=lambda: cache.gpu_products, job_of=cache.job)
    admission = Admission(
        cache,
        quota,
        ExtenderPlacement(extender, reservation_ttl_seconds=settings.reservation_ttl_seconds),
        kube,
        master_port=settings.master_port,
        shared_gpu_resource=settings.shared_gpu_resource,
        settings=CycleSettings(backfill=BackfillPolicy(
            reserve_after_seconds=settings.backfill_reserve_after_seconds,
            planned_reserve_after_seconds=settings.backfill_planned_reserve_after_seconds)),
        creation_concurrency=settings.creation_concurrency,
    )
    elector: LeaderElector | AlwaysLeader
    if settings.leader_election:
        elector = LeaderElector(
            lease_client,
            namespace=settings.namespace,
            identity=settings.identity,
            lease_duration_seconds=settings.lease_duration_seconds,
            renew_deadline_seconds=settings.renew_deadline_seconds,
            retry_period_seconds=settings.retry_period_seconds,
        )
    else:
        elector = AlwaysLeader()
    kube.fence = elector.holds  # every write checks the renew deadline right before it is sent
    kube.time_left = elector.time_left  # and is abandoned in flight at that deadline

    feed = CacheFeed(watch_client, cache, namespaces=settings.watch_namespaces)

    async def resync(_: ClusterCache) -> None:
        await feed.synced()  # a new leader's first lists are its rebuild

    controller = Controller(cache, admission, elector, kube, resync=resync, resync_seconds=settings.resync_seconds)
    background = [
        asyncio.create_task(elector.run(), name="kubegang-lease"),
        asyncio.create_task(controller.run(), name="kubegang-leader-loop"),
    ]
    log.info(
        "operator %s starting: extender %s, leader election %s",
        settings.identity,
        settings.extender_address,
        "on" if settings.leader_election else "off",
    )
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        async with serve_health(settings.health_port, settings.listen_address):
            await first_of(stand_by(elector), stop.wait())
            if stop.is_set():
                return
            watches = asyncio.create_task(feed.run(), name="kubegang-watches")
            background.append(watches)
            await first_of(until_lost(elector), stop.wait(), asyncio.wait({watches}))
            if watches.done() and not stop.is_set():
                # A leader whose cache no longer follows the cluster admits on what it saw last, or,
                # before its first lists, holds the Lease and admits nothing: exit (status 1), so that
                # a standby takes over and this replica starts afresh.
                exit_after(EXIT_GRACE_SECONDS, 1)
                error = None if watches.cancelled() else watches.exception()
                raise WatchesEnded(f"{settings.identity}: the watches ended ({error!r})")
            if not stop.is_set():
                exit_after(EXIT_GRACE_SECONDS, 1)
                raise LostLeadership(f"{settings.identity} lost the Lease")
    finally:
        admission.abandon()
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await admission.abandoned()
        await admission.writer.close()
        await elector.release()
        await extender.close()
        await client.close()
        await lease_client.close()
        await watch_client.aclose()
