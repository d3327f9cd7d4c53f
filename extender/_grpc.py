"""The gRPC ``Placement`` service: a thin adapter over :class:`PlacementAuthority`.

Handlers are registered with raw-bytes (de)serialisation on purpose: grpcio answers an undecodable
request with INTERNAL before any handler runs, and we want every malformed message to be
INVALID_ARGUMENT with a message, counted like the HTTPS refusals. The listener is mTLS only
(``require_client_auth=True``): the operator presents a certificate from the same CA as
kube-scheduler.

Deadlines: the client's deadline is checked before the authority is asked; the work itself is
in-memory and sub-millisecond, so a request that arrives in time is answered in time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._authority import PlacementAuthority
from kubegang.extender._convert import (
    InvalidMessage,
    gang_from_proto,
    placement_from_proto,
    plan_response,
    repair_response,
    reserve_response,
    what_if_response,
)
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.tls import ReloadingServerTLS, ServerMaterial

log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Message)

SERVICE_NAME = "kubegang.placement.v1.Placement"
"""Fully-qualified service name (``package.Service`` of the .proto)."""
DEFAULT_RESERVE_TTL_SECONDS = 120.0
"""TTL of a reservation when the request gives none; the operator creates pods well within it."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest request accepted (gRPC's default); a 10,000-pod gang is far smaller."""


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def server_credentials(cert: Path, key: Path, client_ca: Path) -> grpc.ServerCredentials:
    """mTLS server credentials: clients must present a certificate chaining to ``client_ca``."""
    return grpc.ssl_server_credentials(
        [(key.read_bytes(), cert.read_bytes())],
        root_certificates=client_ca.read_bytes(),
        require_client_auth=True,
    )


def _certificate_configuration(material: ServerMaterial) -> Any:
    return grpc.ssl_server_certificate_configuration(
        [(material.key_pem, material.cert_pem)], root_certificates=material.ca_pem
    )


def reloading_server_credentials(tls: ReloadingServerTLS) -> grpc.ServerCredentials:
    """mTLS server credentials that follow ``tls``: each new handshake gets its current material.

    gRPC asks the fetcher before every handshake; it answers None ("keep what you have") unless
    ``tls`` reloaded since it last answered, so the bytes are handed over once per rotation.
    """
    served = [tls.current.generation]

    def fetch() -> Any:
        material = tls.current
        if material.generation == served[0]:
            return None
        served[0] = material.generation
        return _certificate_configuration(material)

    return grpc.dynamic_ssl_server_credentials(
        _certificate_configuration(tls.current), fetch, require_client_authentication=True
    )


class _Service:
    def __init__(self, authority: PlacementAuthority, metrics: ExtenderMetrics,
                 default_ttl_seconds: float) -> None:
        self.authority = authority
        self.metrics = metrics
        self.default_ttl_seconds = default_ttl_seconds

    def plan(self, raw: bytes) -> Message:
        req = _decode(pb.PlanRequest, raw)
        resp = plan_response(self.authority.plan(gang_from_proto(req.gang)))
        resp.room_epoch = self.authority.room()  # after the plan: a rebuild it made may have moved it
        return resp

    def room(self, raw: bytes) -> Message:
        _decode(pb.RoomRequest, raw)
        return pb.RoomResponse(epoch=self.authority.room())

    def reserve(self, raw: bytes) -> Message:
        req = _decode(pb.ReserveRequest, raw)
        gang = gang_from_proto(req.gang)
        plan = placement_from_proto(req.placement, gang.id, gang.pods) if req.placement.pods else None
        ttl = float(req.ttl_seconds) if req.ttl_seconds else self.default_ttl_seconds
        return reserve_response(self.authority.reserve(gang, plan, ttl))

    def release(self, raw: bytes) -> Message:
        req = _decode(pb.ReleaseRequest, raw)
        if not req.job_uid:
            raise InvalidMessage("job_uid: required")
        freed = self.authority.release(req.job_uid)
        return pb.ReleaseResponse(released=freed > 0, gpus_freed=freed)

    def repair(self, raw: bytes) -> Message:
        req = _decode(pb.RepairRequest, raw)
        ttl = float(req.ttl_seconds) if req.ttl_seconds else self.default_ttl_seconds
        return repair_response(self.authority.repair(gang_from_proto(req.gang), ttl))

    def what_if(self, raw: bytes) -> Message:
        req = _decode(pb.WhatIfRequest, raw)
        gang = gang_from_proto(req.gang)
        candidates = _other_gangs("candidate_job_uids", req.candidate_job_uids, gang.id)
        gone = _other_gangs("gone_job_uids", req.gone_job_uids, gang.id)
        if set(gone) & set(candidates):
            raise InvalidMessage("gone_job_uids: must not repeat a candidate")
        return what_if_response(self.authority.what_if(gang, candidates, gone))


def _other_gangs(field: str, uids: Sequence[str], own: str) -> list[str]:
    """``uids`` of a WhatIf list, each at most once and never the gang's own."""
    if len(set(uids)) != len(uids):
        raise InvalidMessage(f"{field}: each UID at most once")
    if own in uids:
        raise InvalidMessage(f"{field}: must not contain the gang's own job_uid")
    return list(uids)


def _decode(cls: type[_M], raw: bytes) -> _M:
    try:
        return cls.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidMessage(f"cannot decode {cls.DESCRIPTOR.name}: {exc}") from None


_Unary = Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[bytes]]


def _method(verb: str, work: Callable[[bytes], Message], metrics: ExtenderMetrics) -> _Unary:
    async def handler(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                raise _Refused(grpc.StatusCode.DEADLINE_EXCEEDED, f"{verb}: deadline passed before work")
            try:
                return work(raw).SerializeToString()
            except InvalidMessage as exc:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        except _Refused as exc:
            code = exc.code
            metrics.errors.labels(verb, exc.code.name.lower()).inc()
            await context.abort(exc.code, exc.message)
        except Exception:
            code = grpc.StatusCode.INTERNAL
            log.exception("gRPC %s failed", verb)
            metrics.errors.labels(verb, "internal").inc()
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {verb}; see extender logs")
        finally:
            metrics.request_duration.labels(verb).observe(time.perf_counter() - start)
            metrics.requests.labels(verb, code.name).inc()
        raise AssertionError("unreachable: context.abort raises")

    return handler


def _generic_handler(service: _Service) -> grpc.GenericRpcHandler:
    methods = {"Plan": ("plan", service.plan), "Reserve": ("reserve", service.reserve),
               "Release": ("release", service.release), "WhatIf": ("what_if", service.what_if),
               "Repair": ("repair", service.repair), "Room": ("room", service.room)}
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(_method(verb, work, service.metrics))
        for name, (verb, work) in methods.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


@dataclass
class GrpcSite:
    """A started gRPC server; ``port`` is the bound one (useful with port 0)."""

    server: grpc.aio.Server
    """The grpc.aio server."""
    port: int
    """Bound port."""

    async def close(self, grace: float = 1.0) -> None:
        """Stop, letting in-flight calls finish for ``grace`` seconds."""
        await self.server.stop(grace)


async def serve_grpc(
    authority: PlacementAuthority,
    metrics: ExtenderMetrics,
    address: str,
    credentials: grpc.ServerCredentials,
    *,
    default_ttl_seconds: float = DEFAULT_RESERVE_TTL_SECONDS,
) -> GrpcSite:
    """Start the Placement service on ``address`` (``host:port``, port 0 = ephemeral), mTLS."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
    server.add_generic_rpc_handlers((_generic_handler(_Service(authority, metrics, default_ttl_seconds)),))
    port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {address} for gRPC")
    await server.start()
    return GrpcSite(server=server, port=port)
