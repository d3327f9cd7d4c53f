"""``PlacementClient``: the operator's async client for the extender's Placement service.

It speaks core types (``GangRequest`` in, ``Placement | Unplaceable`` out), so
the operator never touches protobuf. Every call has a deadline (``deadline_s``, default ``timeout``); a refused request
raises ``grpc.aio.AioRpcError`` whose ``details()`` is the extender's message.

A client made :meth:`~PlacementClient.from_files` follows its files: cert-manager renews the mounted
Secret long before the certificate expires, and a channel holding the old one would be refused by
the extender the day it does. At most every ``reload_seconds`` a call first looks at the files (off
the event loop); when they changed and load, later calls go over a new channel and the old one is
closed once its calls are done.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.message import Message

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._authority import RepairOutcome, ReserveOutcome, WhatIfOutcome
from kubegang.extender._convert import (
    gang_to_proto,
    placement_to_proto,
    plan_result,
    repair_outcome,
    reserve_outcome,
    what_if_outcome,
)
from kubegang.extender._grpc import SERVICE_NAME
from kubegang.placement import GangRequest, Placement, PlanResult
from kubegang.tls import client_ssl_context, files_stamp

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0
"""Deadline of each call unless the caller gives one."""
DEFAULT_RELOAD_SECONDS = 10.0
"""How often a client made from files looks at them for a renewed certificate."""


def channel_credentials(ca: Path, cert: Path, key: Path) -> grpc.ChannelCredentials:
    """mTLS channel credentials: trust ``ca``, present ``cert``/``key``."""
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(), private_key=key.read_bytes(), certificate_chain=cert.read_bytes()
    )


class PlacementClient:
    """Async client; use ``async with PlacementClient(...)`` or call :meth:`close`."""

    def __init__(
        self,
        target: str,
        credentials: grpc.ChannelCredentials,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        server_name: str | None = None,
    ) -> None:
        self._target = target
        self._options: list[tuple[str, str]] = []
        if server_name:
            # Lets a client dial an IP while checking the certificate for the service's DNS name.
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self._timeout = timeout
        self._files: tuple[Path, Path, Path] | None = None
        self._stamp: object = None
        self._next_look = 0.0
        self._reload_seconds = DEFAULT_RELOAD_SECONDS
        self._closing: set[asyncio.Task[None]] = set()
        self._open(credentials)

    def _open(self, credentials: grpc.ChannelCredentials) -> None:
        self._channel = grpc.aio.secure_channel(self._target, credentials, options=self._options)
        self._plan = self._method("Plan", pb.PlanResponse)
        self._reserve = self._method("Reserve", pb.ReserveResponse)
        self._release = self._method("Release", pb.ReleaseResponse)
        self._what_if = self._method("WhatIf", pb.WhatIfResponse)
        self._repair = self._method("Repair", pb.RepairResponse)
        self._room = self._method("Room", pb.RoomResponse)

    @classmethod
    def from_files(cls, target: str, ca: Path, cert: Path, key: Path, **kwargs: object) -> PlacementClient:
        """Client from PEM files (the operator's mounted secret), reloaded when they change.

        Keyword arguments: ``timeout`` and ``server_name`` as for the constructor, ``reload_seconds``
        (default :data:`DEFAULT_RELOAD_SECONDS`) how often the files are looked at.
        """
        timeout = kwargs.get("timeout", DEFAULT_TIMEOUT_SECONDS)
        server_name = kwargs.get("server_name")
        reload_seconds = kwargs.get("reload_seconds", DEFAULT_RELOAD_SECONDS)
        client = cls(target, channel_credentials(ca, cert, key),
                     timeout=float(timeout) if isinstance(timeout, int | float) else DEFAULT_TIMEOUT_SECONDS,
                     server_name=server_name if isinstance(server_name, str) else None)
        client._files = (ca, cert, key)
        client._stamp = files_stamp(client._files)
        if isinstance(reload_seconds, int | float):
            client._reload_seconds = float(reload_seconds)
        client._next_look = time.monotonic() + client._reload_seconds
        return client

    async def _follow_files(self) -> None:
        """Switch to a new channel when the certificate files changed and load (see the module doc)."""
        if self._files is None or time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + self._reload_seconds
        files = self._files
        try:
            stamp = await asyncio.to_thread(files_stamp, files)
            if stamp == self._stamp:
                return
            await asyncio.to_thread(client_ssl_context, *files)  # refuses a key that does not match
            credentials = await asyncio.to_thread(channel_credentials, *files)
        except (OSError, ValueError, ssl.SSLError) as exc:
            log.warning("extender client certificate files changed but do not load (%s); keeping the "
                        "current channel", exc)
            return
        self._stamp = stamp
        old = self._channel
        self._open(credentials)
        task = asyncio.create_task(old.close(grace=self._timeout))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("extender client certificate reloaded; new calls use a new channel")

    def _method(self, name: str, response: type[Message]) -> Any:
        # Plain unary_unary calls instead of the generated stub: same wire, and typed here.
        return self._channel.unary_unary(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=lambda msg: msg.SerializeToString(),
            response_deserializer=response.FromString,
        )

    async def __aenter__(self) -> PlacementClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel (and any a reload left closing)."""
        await self._channel.close()
        await asyncio.gather(*self._closing, return_exceptions=True)

    def _deadline(self, deadline_s: float | None) -> float:
        return self._timeout if deadline_s is None else deadline_s

    async def plan(self, gang: GangRequest, *, namespace: str = "", name: str = "",
                   deadline_s: float | None = None) -> PlanResult:
        """Where would ``gang`` go now (no change on the extender)."""
        return (await self.plan_at(gang, namespace=namespace, name=name, deadline_s=deadline_s))[0]

    async def plan_at(self, gang: GangRequest, *, namespace: str = "", name: str = "",
                      deadline_s: float | None = None) -> tuple[PlanResult, int | None]:
        """:meth:`plan`, with the room epoch it was answered at (None: an extender that gives none)."""
        await self._follow_files()
        req = pb.PlanRequest(gang=gang_to_proto(gang, namespace=namespace, name=name))
        resp = await self._plan(req, timeout=self._deadline(deadline_s))
        return plan_result(resp, gang.id), resp.room_epoch or None

    async def room(self, *, deadline_s: float | None = None) -> int | None:
        """The extender's room epoch now (``Room``); None from an extender that has no such call."""
        await self._follow_files()
        try:
            resp = await self._room(pb.RoomRequest(), timeout=self._deadline(deadline_s))
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                return None
            raise
        return int(resp.epoch) or None

    async def reserve(self, gang: GangRequest, plan: Placement | None = None, *, ttl_seconds: int = 0,
                      namespace: str = "", name: str = "", deadline_s: float | None = None) -> ReserveOutcome:
        """Hold GPUs for ``gang``: ``plan`` if given and still free, else a fresh plan."""
        await self._follow_files()
        req = pb.ReserveRequest(gang=gang_to_proto(gang, namespace=namespace, name=name),
                                ttl_seconds=ttl_seconds)
        if plan is not None:
            req.placement.CopyFrom(placement_to_proto(plan))
        return reserve_outcome(await self._reserve(req, timeout=self._deadline(deadline_s)), gang.id)

    async def release(self, job_uid: str, *, deadline_s: float | None = None) -> int:
        """Drop the gang's reservation; returns the GPUs freed (0 when nothing was held)."""
        await self._follow_files()
        resp = await self._release(pb.ReleaseRequest(job_uid=job_uid), timeout=self._deadline(deadline_s))
        return int(resp.gpus_freed)

    async def repair(self, gang: GangRequest, *, ttl_seconds: int = 0, namespace: str = "", name: str = "",
                     deadline_s: float | None = None) -> RepairOutcome:
        """Place again the slots of ``gang`` that pods kubegang did not place took; hold them."""
        await self._follow_files()
        req = pb.RepairRequest(gang=gang_to_proto(gang, namespace=namespace, name=name), ttl_seconds=ttl_seconds)
        return repair_outcome(await self._repair(req, timeout=self._deadline(deadline_s)), gang.id)

    async def what_if(self, gang: GangRequest, candidates: list[str], *, gone: Sequence[str] = (),
                      namespace: str = "", name: str = "", deadline_s: float | None = None) -> WhatIfOutcome:
        """Smallest subset of ``candidates`` (job UIDs, preferred victims first) that lets ``gang`` fit
        once the ``gone`` gangs (job UIDs, evicted in any case) are gone too."""
        await self._follow_files()
        req = pb.WhatIfRequest(gang=gang_to_proto(gang, namespace=namespace, name=name),
                               candidate_job_uids=candidates, gone_job_uids=gone)
        return what_if_outcome(await self._what_if(req, timeout=self._deadline(deadline_s)), gang.id)
