"""The Placement gRPC service: round trips through PlacementClient, refusals, fuzzing, mTLS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._authority import ReserveOutcome, WhatIfOutcome
from kubegang.extender._grpc import SERVICE_NAME, GrpcSite, _Service, serve_grpc, server_credentials
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender.client import PlacementClient, channel_credentials
from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, PlanResult, PodAssignment, Toleration, Unplaceable
from kubegang.tls import PemPaths


class FakePlacement:
    """Places gangs of up to 4 pods of up to 8 GPUs on nodes n0..n3 (GPUs 0..k-1); bigger ones do not fit
    (as on real nodes: a fuzzed gang of a million GPUs a pod answered with an over-4-MiB placement)."""

    def __init__(self) -> None:
        self.reserved: dict[str, Placement] = {}
        self.gangs: list[GangRequest] = []
        self.delay = 0.0
        self.epoch = 41
        """The room epoch: moved by each release here."""

    def room(self) -> int:
        return self.epoch

    def plan(self, gang: GangRequest) -> PlanResult:
        self.gangs.append(gang)
        if gang.pods > 4:
            return Unplaceable(gang_id=gang.id, reason=f"needs {gang.pods} nodes; 4 exist",
                               level=Level.CLUSTER, best_domain="leaf-a", best_pods=4)
        if gang.gpus_per_pod > 8:
            return Unplaceable(gang_id=gang.id, reason=f"needs {gang.gpus_per_pod} GPUs a pod; nodes have 8",
                               level=Level.CLUSTER)
        return Placement(
            gang_id=gang.id,
            assignments=tuple(PodAssignment(pod=i, node=f"n{i}", gpus=tuple(range(gang.gpus_per_pod)))
                              for i in range(gang.pods)),
            level=Level.LEAF, domain="leaf-a", score=0.75, preferred_met=True,
        )

    def reserve(self, gang: GangRequest, placement: Placement | None, ttl_seconds: float) -> ReserveOutcome:
        result = placement if placement is not None else self.plan(gang)
        if isinstance(result, Placement):
            self.reserved[gang.id] = result
            return ReserveOutcome(result=result, expires_at=1000.0 + ttl_seconds)
        return ReserveOutcome(result=result)

    def release(self, job_uid: str) -> int:
        self.epoch += 1
        held = self.reserved.pop(job_uid, None)
        return sum(len(a.gpus) for a in held.assignments) if held else 0

    def what_if(self, gang: GangRequest, candidates: Sequence[str], gone: Sequence[str] = ()) -> WhatIfOutcome:
        if self.delay:
            import time

            time.sleep(self.delay)  # simulate a slow authority for the deadline test
        return WhatIfOutcome(victims=tuple(candidates[:1]), result=self.plan(gang))


GANG = GangRequest(id="job-1", pods=2, gpus_per_pod=4, cpu_milli=500, memory_mib=1024,
                   gpu_product="H100", node_selector={"pool": "a"},
                   tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
                   excluded_nodes=frozenset({"bad-1"}), required_level=Level.SPINE,
                   preferred_level=Level.LEAF)

session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def grpc_site(pki: PemPaths) -> AsyncIterator[tuple[GrpcSite, FakePlacement]]:
    fake = FakePlacement()
    creds = server_credentials(pki.server_cert, pki.server_key, pki.ca_cert)
    site = await serve_grpc(fake, ExtenderMetrics(), "127.0.0.1:0", creds, default_ttl_seconds=60)
    yield site, fake
    await site.close(0)


def _client(site: GrpcSite, pki: PemPaths, **kw: Any) -> PlacementClient:
    return PlacementClient.from_files(f"127.0.0.1:{site.port}", pki.ca_cert, pki.client_cert,
                                      pki.client_key, **kw)


@session_loop
async def test_plan_round_trips_the_gang_and_the_placement(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths
) -> None:
    site, fake = grpc_site
    async with _client(site, pki) as client:
        result = await client.plan(GANG, namespace="ns", name="j")
    assert fake.gangs == [GANG]
    assert isinstance(result, Placement)
    assert result == fake.plan(GANG)


@session_loop
async def test_infeasible_plan_carries_reason_and_shortfall(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths
) -> None:
    site, _ = grpc_site
    async with _client(site, pki) as client:
        result = await client.plan(GangRequest(id="big", pods=9))
    assert result == Unplaceable(gang_id="big", reason="needs 9 nodes; 4 exist", level=Level.CLUSTER,
                                 best_domain="leaf-a", best_pods=4)


@session_loop
async def test_a_refusal_carries_the_room_epoch_it_was_given_at_and_room_reads_it_now(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths
) -> None:
    site, fake = grpc_site
    async with _client(site, pki) as client:
        refused, at = await client.plan_at(GangRequest(id="big", pods=9))
        assert isinstance(refused, Unplaceable) and at == 41
        assert await client.room() == 41
        await client.release("nothing-held")
        assert await client.room() == 42 == fake.epoch
        _, later = await client.plan_at(GangRequest(id="big", pods=9))
        assert later == 42


@session_loop
async def test_an_extender_without_room_gives_no_epoch_and_plans_as_before(pki: PemPaths) -> None:
    # An extender of an earlier release: no Room method, and its PlanResponse has no room_epoch.
    fake = FakePlacement()
    service = _Service(fake, ExtenderMetrics(), 60)

    async def old_plan(raw: bytes, _context: Any) -> bytes:
        resp = service.plan(raw)
        resp.ClearField("room_epoch")  # what an extender without the field sends
        return resp.SerializeToString()

    handlers = {"Plan": grpc.unary_unary_rpc_method_handler(old_plan)}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    port = server.add_secure_port("127.0.0.1:0", server_credentials(pki.server_cert, pki.server_key, pki.ca_cert))
    await server.start()
    try:
        async with PlacementClient.from_files(f"127.0.0.1:{port}", pki.ca_cert, pki.client_cert,
                                              pki.client_key) as client:
            assert await client.room() is None
            refused, at = await client.plan_at(GangRequest(id="big", pods=9))
            assert isinstance(refused, Unplaceable) and at is None
    finally:
        await server.stop(0)


@session_loop
async def test_reserve_with_and_without_a_plan_then_release(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths
) -> None:
    site, fake = grpc_site
    async with _client(site, pki) as client:
        fresh = await client.reserve(GANG)
        assert isinstance(fresh.result, Placement)
        assert fresh.expires_at == 1060.0  # the server's default TTL applied
        again = await client.reserve(GANG, fresh.result, ttl_seconds=5)
        assert again.result == fresh.result and again.expires_at == 1005.0
        assert await client.release("job-1") == 8
        assert await client.release("job-1") == 0
    assert fake.reserved == {}


@session_loop
async def test_what_if(grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths) -> None:
    site, _ = grpc_site
    async with _client(site, pki) as client:
        out = await client.what_if(GANG, ["v1", "v2"])
    assert out.victims == ("v1",)
    assert isinstance(out.result, Placement)


def _gpu_node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubegang.io/leaf": "leaf-a", "nvidia.com/gpu.product": "H100"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8", "pods": "110"}}}


def _gang_pod(job: str, node: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{job}", "namespace": "ns", "uid": f"uid-{job}",
                         "labels": {"kubegang.io/job-uid": job, "kubegang.io/replica-index": "0"}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


async def _serve_small_and_big(pki: PemPaths) -> tuple[Any, Any]:
    """A real ledger behind the gRPC servicer (both returned): gang "small" holds 2 GPUs of n0, "big" all 8
    of n1."""
    from kubegang.extender._ledger import Ledger

    ledger = Ledger()
    for name in ("n0", "n1"):
        ledger.upsert_node(_gpu_node(name))
    ledger.upsert_pod(_gang_pod("small", "n0", 2))
    ledger.upsert_pod(_gang_pod("big", "n1", 8))
    creds = server_credentials(pki.server_cert, pki.server_key, pki.ca_cert)
    return await serve_grpc(ledger, ExtenderMetrics(), "127.0.0.1:0", creds, default_ttl_seconds=60), ledger


@session_loop
async def test_what_if_over_grpc_is_the_ledgers_planner_answer(pki: PemPaths) -> None:
    site, _ = await _serve_small_and_big(pki)
    try:
        async with _client(site, pki) as client:
            one = await client.what_if(GangRequest(id="new", pods=1, gpus_per_pod=8), ["big", "small"])
            two = await client.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), ["big", "small"])
            three = await client.what_if(GangRequest(id="new", pods=3, gpus_per_pod=8), ["big", "small"])
    finally:
        await site.close(0)
    assert one.victims == ("small",)  # fewest GPUs evicted
    assert isinstance(one.result, Placement) and one.result.nodes == ("n0",)
    assert two.victims == ("big", "small")  # in the candidates' order
    assert isinstance(two.result, Placement)
    assert three.victims == () and isinstance(three.result, Unplaceable)


@session_loop
async def test_what_if_gone_over_grpc_reaches_the_ledger(pki: PemPaths) -> None:
    # n0: small (2 GPUs); n1: big (8). A 2x8 gang needs both nodes. With big gone already (WhatIf's
    # gone_job_uids), only small is to evict on top of it; a 1x8 gang is placeable by big's node
    # alone (no victim); an older client that sends no gone_job_uids gets the answer it always had.
    site, ledger = await _serve_small_and_big(pki)
    try:
        async with _client(site, pki) as client:
            two = await client.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), ["small"], gone=["big"])
            one = await client.what_if(GangRequest(id="new", pods=1, gpus_per_pod=8), ["small"], gone=["big"])
            short = await client.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), [], gone=["big"])
            old = await client.what_if(GangRequest(id="new", pods=1, gpus_per_pod=8), ["big", "small"])
        async with grpc.aio.secure_channel(
                f"127.0.0.1:{site.port}", channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)) as channel:
            raw = pb.WhatIfRequest(gang=pb.Gang(job_uid="new", pods=1, gpus_per_pod=8),
                                   candidate_job_uids=["big", "small"]).SerializeToString()
            assert b"gone" not in raw
            legacy = pb.WhatIfResponse.FromString(
                await channel.unary_unary(f"/{SERVICE_NAME}/WhatIf")(raw, timeout=5))
    finally:
        await site.close(0)
    assert two.victims == ("small",)
    assert isinstance(two.result, Placement) and set(two.result.nodes) == {"n0", "n1"}
    assert one.victims == () and isinstance(one.result, Placement) and one.result.nodes == ("n1",)
    assert short.victims == () and isinstance(short.result, Unplaceable)  # big alone is not enough
    assert old.victims == ("small",)  # nothing gone: fewest GPUs evicted, as before
    assert legacy.feasible and list(legacy.victim_job_uids) == ["small"]
    assert ledger.what_if(GangRequest(id="new", pods=2, gpus_per_pod=8), ["small"], ["big"]).victims == ("small",)


@pytest.mark.parametrize(
    ("method", "request_msg", "needle"),
    [
        ("Plan", pb.PlanRequest(), "gang.job_uid: required"),
        ("Plan", pb.PlanRequest(gang=pb.Gang(job_uid="j", pods=0, gpus_per_pod=1)), "pods must be >= 1"),
        ("Plan", pb.PlanRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1, required_level="rack")),
         "gang.required_level"),
        ("Plan", pb.PlanRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1,
                                             tolerations=[pb.Toleration(operator="Maybe")])), "operator"),
        ("Reserve", pb.ReserveRequest(
            gang=pb.Gang(job_uid="j", pods=2, gpus_per_pod=1),
            placement=pb.GangPlacement(pods=[pb.PodPlacement(pod_index=0, node="n")],
                                       domain=pb.Domain(level="node", id="n"))),
         "one entry for each pod index"),
        ("Release", pb.ReleaseRequest(), "job_uid: required"),
        ("WhatIf", pb.WhatIfRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1),
                                    candidate_job_uids=["j"]), "own job_uid"),
        ("WhatIf", pb.WhatIfRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1),
                                    gone_job_uids=["j"]), "gone_job_uids: must not contain the gang's own"),
        ("WhatIf", pb.WhatIfRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1),
                                    gone_job_uids=["a", "a"]), "gone_job_uids: each UID at most once"),
        ("WhatIf", pb.WhatIfRequest(gang=pb.Gang(job_uid="j", pods=1, gpus_per_pod=1), candidate_job_uids=["a"],
                                    gone_job_uids=["a"]), "gone_job_uids: must not repeat a candidate"),
    ],
)
@session_loop
async def test_invalid_messages_are_invalid_argument(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths, method: str, request_msg: Any, needle: str
) -> None:
    site, _ = grpc_site
    creds = channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)
    async with grpc.aio.secure_channel(f"127.0.0.1:{site.port}", creds) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(request_msg.SerializeToString(), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in (info.value.details() or "")


@session_loop
async def test_client_calls_carry_a_deadline(
    grpc_site: tuple[GrpcSite, FakePlacement], pki: PemPaths
) -> None:
    site, fake = grpc_site
    fake.delay = 0.3
    try:
        async with _client(site, pki, timeout=0.05) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.what_if(GANG, ["v"])
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        fake.delay = 0.0
    await asyncio.sleep(0.3)


# ---- hostile input and hostile clients, against a server in a background loop ---------------


@pytest.fixture(scope="module")
def threaded_grpc(loop_thread: Any, pki: PemPaths) -> Iterator[GrpcSite]:
    async def start() -> GrpcSite:
        creds = server_credentials(pki.server_cert, pki.server_key, pki.ca_cert)
        return await serve_grpc(FakePlacement(), ExtenderMetrics(), "127.0.0.1:0", creds)

    site: GrpcSite = loop_thread.run(start())
    yield site
    loop_thread.run(site.close(0))


def _sync_channel(site: GrpcSite, creds: grpc.ChannelCredentials | None) -> grpc.Channel:
    target = f"127.0.0.1:{site.port}"
    return grpc.secure_channel(target, creds) if creds is not None else grpc.insecure_channel(target)


gangs = st.builds(
    pb.Gang,
    job_uid=st.text(max_size=8), pods=st.integers(0, 2**32 - 1), gpus_per_pod=st.integers(0, 2**32 - 1),
    gpu_fraction_milli=st.integers(0, 2000), required_level=st.sampled_from(["", "node", "leaf", "x"]),
    preferred_level=st.sampled_from(["", "nvlink", "cluster", "?"]),
    mig_profile=st.sampled_from(["", "1g.10gb"]), gpu_product=st.sampled_from(["", "H100"]),
)
messages = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda g: pb.PlanRequest(gang=g).SerializeToString(), gangs),
    st.builds(lambda g, t: pb.ReserveRequest(gang=g, ttl_seconds=t).SerializeToString(),
              gangs, st.integers(0, 2**32 - 1)),
    st.builds(lambda u: pb.ReleaseRequest(job_uid=u).SerializeToString(), st.text(max_size=8)),
    st.builds(lambda g, c, d: pb.WhatIfRequest(gang=g, candidate_job_uids=c, gone_job_uids=d).SerializeToString(),
              gangs, st.lists(st.text(max_size=4), max_size=4), st.lists(st.text(max_size=4), max_size=3)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["Plan", "Reserve", "Release", "WhatIf"]), raw=messages)
def test_fuzzed_messages_are_answered_ok_or_invalid_argument(
    threaded_grpc: GrpcSite, pki: PemPaths, method: str, raw: bytes
) -> None:
    creds = channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)
    with _sync_channel(threaded_grpc, creds) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
        try:
            call(raw, timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()
            assert exc.details()
        alive = channel.unary_unary(f"/{SERVICE_NAME}/Release")(
            pb.ReleaseRequest(job_uid="x").SerializeToString(), timeout=10)
        assert pb.ReleaseResponse.FromString(alive).released is False


def _plan_with(site: GrpcSite, creds: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    with _sync_channel(site, creds) as channel:
        try:
            channel.unary_unary(f"/{SERVICE_NAME}/Release")(
                pb.ReleaseRequest(job_uid="x").SerializeToString(), timeout=5)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


def test_grpc_right_client_certificate_is_accepted(threaded_grpc: GrpcSite, pki: PemPaths) -> None:
    assert _plan_with(threaded_grpc, channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)) \
        == grpc.StatusCode.OK


def test_grpc_plaintext_is_refused(threaded_grpc: GrpcSite) -> None:
    assert _plan_with(threaded_grpc, None) == grpc.StatusCode.UNAVAILABLE


def test_grpc_without_client_certificate_is_refused(threaded_grpc: GrpcSite, pki: PemPaths) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca_cert.read_bytes())
    assert _plan_with(threaded_grpc, creds) == grpc.StatusCode.UNAVAILABLE


def test_grpc_client_certificate_from_unknown_ca_is_refused(
    threaded_grpc: GrpcSite, pki: PemPaths, other_pki: PemPaths
) -> None:
    creds = channel_credentials(pki.ca_cert, other_pki.client_cert, other_pki.client_key)
    assert _plan_with(threaded_grpc, creds) == grpc.StatusCode.UNAVAILABLE


def test_grpc_expired_client_certificate_is_refused(
    threaded_grpc: GrpcSite, pki: PemPaths, expired_client: tuple[Path, Path], unexpired_twin: tuple[Path, Path]
) -> None:
    assert _plan_with(threaded_grpc, channel_credentials(pki.ca_cert, *expired_client)) \
        == grpc.StatusCode.UNAVAILABLE
    assert _plan_with(threaded_grpc, channel_credentials(pki.ca_cert, *unexpired_twin)) == grpc.StatusCode.OK, \
        "the same certificate, not yet expired, is accepted: the expiry is what is refused"
