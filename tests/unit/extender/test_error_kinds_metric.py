"""``kubegang_extender_errors_total{verb,kind}``: each kind docs/metrics.md lists is counted, once,
under its own label, when a request fails that way.

HTTPS (``bad_request``, ``too_large``, ``internal``) and gRPC (``invalid_argument``, ``internal``)
go through real listeners. ``deadline_exceeded`` cannot be provoked over the network: grpcio drops a
call whose deadline passed before its handler starts (the client gets DEADLINE_EXCEEDED from grpcio
itself, nothing is counted), so that check calls the service's registered handler directly, with a
servicer context whose deadline has passed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._grpc import SERVICE_NAME, GrpcSite, _generic_handler, _Service, serve_grpc, server_credentials
from kubegang.extender._http import RunningSite
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender.client import channel_credentials
from kubegang.tls import PemPaths, client_ssl_context

pytestmark = pytest.mark.asyncio(loop_scope="session")

ERRORS = "kubegang_extender_errors_total"
DOCUMENTED_KINDS = ("bad_request", "too_large", "internal", "invalid_argument", "deadline_exceeded")
POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
}


def errors(metrics: ExtenderMetrics) -> dict[tuple[str, str], float]:
    """Every series of the error counter, by its exposed name: (verb, kind) → value."""
    return {
        (s.labels["verb"], s.labels["kind"]): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == ERRORS
    }


def rose(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


def assert_counted_once(metrics: ExtenderMetrics, before: dict[tuple[str, str], float], verb: str, kind: str) -> None:
    after = errors(metrics)
    assert rose(before, after) == {(verb, kind): 1.0}
    assert metrics.registry.get_sample_value(ERRORS, {"verb": verb, "kind": kind}) == before.get((verb, kind), 0) + 1
    for other in DOCUMENTED_KINDS:
        if other != kind:
            assert after.get((verb, other), 0.0) == before.get((verb, other), 0.0), other


# ---- HTTPS ----------------------------------------------------------------------------------------


async def _post(site: RunningSite, pki: PemPaths, path: str, body: bytes | Any) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    ctx = client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
    async with aiohttp.ClientSession() as session, session.post(
        f"https://127.0.0.1:{site.port}{path}", data=data, ssl=ctx, headers={"Content-Type": "application/json"},
    ) as resp:
        await resp.read()
        return resp.status


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        (b"{not json", 400, "bad_request"),
        (b"", 400, "bad_request"),
        ({"NodeNames": ["a"]}, 400, "bad_request"),
        ({"Pod": POD, "NodeNames": ["a" * 70_000]}, 413, "too_large"),  # the fixture's limit is 64 KiB
    ],
)
async def test_https_refusal_counts_its_kind(
    https_site: RunningSite, pki: PemPaths, metrics: ExtenderMetrics, verb: str, body: Any, status: int, kind: str
) -> None:
    before = errors(metrics)
    assert await _post(https_site, pki, f"/{verb}", body) == status
    assert_counted_once(metrics, before, verb, kind)


@pytest.mark.parametrize(("verb", "status"), [("filter", 200), ("prioritize", 400), ("preempt", 400)])
async def test_https_unreadable_pod_counts_bad_request_except_in_filter(
    https_site: RunningSite, pki: PemPaths, metrics: ExtenderMetrics, verb: str, status: int
) -> None:
    """A pod whose GPU demand cannot be read: prioritize and preempt refuse it (400, counted);
    filter answers 200 with the message in ``Error`` for kube-scheduler to show, and counts nothing."""
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}
    before = errors(metrics)
    assert await _post(https_site, pki, f"/{verb}", {"Pod": pod, "NodeNames": ["a"]}) == status
    if status == 200:
        assert rose(before, errors(metrics)) == {}
    else:
        assert_counted_once(metrics, before, verb, "bad_request")


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
async def test_https_authority_bug_counts_internal(
    https_site: RunningSite, pki: PemPaths, metrics: ExtenderMetrics, authority: Any, verb: str
) -> None:
    body = {"Pod": POD, "NodeNames": ["a"], "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}]}}}
    before = errors(metrics)
    authority.boom = True
    assert await _post(https_site, pki, f"/{verb}", body) == 500
    assert_counted_once(metrics, before, verb, "internal")
    authority.boom = False
    before = errors(metrics)
    assert await _post(https_site, pki, f"/{verb}", body) == 200
    assert rose(before, errors(metrics)) == {}  # an answered request counts no error


# ---- gRPC -----------------------------------------------------------------------------------------


class BuggyAuthority:
    """Answers Release; raises for the job UID ``boom`` (an authority bug). The other verbs are only
    sent invalid messages here, which must be refused before the authority is asked."""

    def release(self, job_uid: str) -> int:
        if job_uid == "boom":
            raise RuntimeError("simulated authority bug")
        return 0

    def _not_asked(self, *_: Any) -> Any:
        raise AssertionError("an invalid message reached the authority")

    plan = reserve = what_if = repair = _not_asked


@pytest.fixture
async def grpc_metrics(pki: PemPaths) -> AsyncIterator[tuple[GrpcSite, ExtenderMetrics]]:
    metrics = ExtenderMetrics()
    creds = server_credentials(pki.server_cert, pki.server_key, pki.ca_cert)
    site = await serve_grpc(BuggyAuthority(), metrics, "127.0.0.1:0", creds)
    yield site, metrics
    await site.close(0)


async def _call(site: GrpcSite, pki: PemPaths, method: str, raw: bytes) -> grpc.StatusCode:
    creds = channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)
    async with grpc.aio.secure_channel(f"127.0.0.1:{site.port}", creds) as channel:
        try:
            await channel.unary_unary(f"/{SERVICE_NAME}/{method}")(raw, timeout=5)
        except grpc.aio.AioRpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("method", "verb", "raw"),
    [
        ("Release", "release", pb.ReleaseRequest().SerializeToString()),  # job_uid missing
        ("Plan", "plan", b"\xff\xff\xff"),  # not a PlanRequest at all
        ("Reserve", "reserve", pb.ReserveRequest().SerializeToString()),  # no gang
        ("WhatIf", "what_if", pb.WhatIfRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1),
                                               candidate_job_uids=["j"]).SerializeToString()),
        ("Repair", "repair", pb.RepairRequest().SerializeToString()),
    ],
)
async def test_grpc_invalid_message_counts_invalid_argument(
    grpc_metrics: tuple[GrpcSite, ExtenderMetrics], pki: PemPaths, method: str, verb: str, raw: bytes
) -> None:
    site, metrics = grpc_metrics
    before = errors(metrics)
    assert await _call(site, pki, method, raw) == grpc.StatusCode.INVALID_ARGUMENT
    assert_counted_once(metrics, before, verb, "invalid_argument")


async def test_grpc_authority_bug_counts_internal(
    grpc_metrics: tuple[GrpcSite, ExtenderMetrics], pki: PemPaths
) -> None:
    site, metrics = grpc_metrics
    before = errors(metrics)
    assert await _call(site, pki, "Release", pb.ReleaseRequest(job_uid="boom").SerializeToString()) == (
        grpc.StatusCode.INTERNAL)
    assert_counted_once(metrics, before, "release", "internal")
    before = errors(metrics)
    assert await _call(site, pki, "Release", pb.ReleaseRequest(job_uid="ok").SerializeToString()) == (
        grpc.StatusCode.OK)
    assert rose(before, errors(metrics)) == {}  # an answered request counts no error


class _Aborted(Exception):
    pass


class ExpiredContext:
    """The part of ``grpc.aio.ServicerContext`` the handler uses, for a call whose deadline has passed;
    ``abort`` raises as grpcio's does."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def time_remaining(self) -> float | None:
        return self.remaining

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        self.aborted = (code, details)
        raise _Aborted(details)


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


@pytest.mark.parametrize("remaining", [0.0, -0.5])
async def test_grpc_call_past_its_deadline_counts_deadline_exceeded(remaining: float) -> None:
    metrics = ExtenderMetrics()
    service = _Service(BuggyAuthority(), metrics, 60.0)
    handler = _generic_handler(service).service(_Details(f"/{SERVICE_NAME}/Release"))
    assert handler is not None and handler.unary_unary is not None
    context = ExpiredContext(remaining)
    before = errors(metrics)
    with pytest.raises(_Aborted):
        await handler.unary_unary(pb.ReleaseRequest(job_uid="x").SerializeToString(), context)
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert_counted_once(metrics, before, "release", "deadline_exceeded")
    assert metrics.registry.get_sample_value(
        "kubegang_extender_requests_total", {"verb": "release", "code": "DEADLINE_EXCEEDED"}) == 1

    # With time left the same handler answers and counts nothing.
    before = errors(metrics)
    answer = await handler.unary_unary(pb.ReleaseRequest(job_uid="x").SerializeToString(), ExpiredContext(5.0))
    assert pb.ReleaseResponse.FromString(answer).released is False
    assert rose(before, errors(metrics)) == {}
