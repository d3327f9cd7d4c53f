"""Assemble the operator from its parts and run it until a signal stops it.

Three long-lived tasks: the Lease campaign, the leader's loop, and Kopf's watches, which only the
leader runs (a standby campaigns and answers /healthz, nothing else: ``_standby``). When Kopf exits
(SIGINT/SIGTERM) the others are cancelled and the Lease is given up, so the standby takes over at
once instead of after the lease expires; when the leader loses the Lease, Kopf is stopped and
``run`` raises ``LostLeadership``, so the process exits and comes back as a fresh standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import kopf
from lightkube.core.exceptions import ConfigError

from kubegang.admission import CycleSettings
from kubegang.extender.client import PlacementClient
from kubegang.operator._admission import Admission
from kubegang.operator._cache import ClusterCache
from kubegang.operator._controller import Controller
from kubegang.operator._extender_placement import ExtenderPlacement
from kubegang.operator._kube import KubeApi, RateLimiter, make_client
from kubegang.operator._leader import AlwaysLeader, LeaderElector
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._settings import OperatorSettings
from kubegang.operator._standby import LostLeadership, stand_by, until_lost
from kubegang.operator._watches import build_registry, resync_from_api
from kubegang.quota import BackfillPolicy

log = logging.getLogger("kubegang.operator")


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


def liveness_endpoint(settings: OperatorSettings) -> str | None:
    """Where Kopf serves liveness (``kopf.operator(liveness_endpoint=...)``), or None when it is off.

    Kopf answers it from the operator's own event loop, running the ``@kopf.on.probe`` handlers: the
    probe fails when the loop hangs, which a probe of /metrics (a thread) cannot see.
    """
    if not settings.health_port:
        return None
    return f"http://0.0.0.0:{settings.health_port}/healthz"


async def run(settings: OperatorSettings) -> None:
    """Run the operator until it is stopped."""
    cache = ClusterCache()
    extender = placement_client(settings)
    try:
        client = make_client(settings.kubeconfig, timeout_seconds=settings.api_timeout_seconds)
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
            client,
            namespace=settings.namespace,
            identity=settings.identity,
            lease_duration_seconds=settings.lease_duration_seconds,
            renew_deadline_seconds=settings.renew_deadline_seconds,
            retry_period_seconds=settings.retry_period_seconds,
        )
    else:
        elector = AlwaysLeader()
    kube.fence = elector.holds  # every write checks the renew deadline right before it is sent

    async def resync(c: ClusterCache) -> None:
        await resync_from_api(client, c)

    controller = Controller(cache, admission, elector, kube, resync=resync, resync_seconds=settings.resync_seconds)
    registry = build_registry(cache, kubeconfig=settings.kubeconfig, api_timeout_seconds=settings.api_timeout_seconds)
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
    try:
        await stand_by(elector, health_port=settings.health_port)
        # Created before Kopf starts: Kopf cancels every task spawned while it runs when it stops.
        background.append(asyncio.create_task(until_lost(elector, stop), name="kubegang-lease-watch"))
        await kopf.operator(
            registry=registry,
            standalone=True,  # peering off: the Lease decides who acts, and handlers only read
            clusterwide=not settings.watch_namespaces,
            namespaces=list(settings.watch_namespaces),
            liveness_endpoint=liveness_endpoint(settings),
            stop_flag=stop,
        )
        if stop.is_set():
            raise LostLeadership(f"{settings.identity} lost the Lease")
    finally:
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await admission.writer.close()
        await elector.release()
        await extender.close()
        await client.close()
