"""Hostile input against the real ledger behind both real listeners: every request is answered without
a 5xx or an INTERNAL, and a request that is refused changes nothing in the ledger.

The fake authorities of test_https_fuzz_and_mtls.py and test_grpc.py prove the adapters never crash;
here the same kind of payloads reach :class:`Ledger` itself (the verbs, the pod contract, the proto
conversions, the placement engine), with what a hostile or broken client would send: wrong types,
huge lists, unknown nodes and jobs, negative and enormous quantities, truncated and mutated bytes.
Examples are bounded so the module stays well under a minute in ``make test``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._grpc import SERVICE_NAME, GrpcSite, serve_grpc, server_credentials
from kubegang.extender._http import RunningSite, build_extender_app, serve
from kubegang.extender._ledger import Ledger
from kubegang.extender._metrics import ExtenderMetrics
from kubegang.extender.client import channel_credentials
from kubegang.placement import GangRequest
from kubegang.tls import PemPaths, client_ssl_context, server_ssl_context

from .conftest import LoopThread  # type: ignore[import-not-found]

NODES = ["n0", "n1", "n2", "n3"]
HELD = "held-1"
"""A gang holding a reservation in every fresh ledger (Reserve/Release/Repair of it are accepted)."""
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


def _node(name: str, leaf: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubegang.io/leaf": leaf, "nvidia.com/gpu.product": "H100"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"}}}


def _fresh_ledger() -> Ledger:
    """Four 8-GPU nodes in two leaves, a bound plain pod with 2 GPUs on n0, a 2×4-GPU reservation."""
    ledger = Ledger()
    for i, name in enumerate(NODES):
        ledger.upsert_node(_node(name, f"leaf-{i // 2}"))
    ledger.upsert_pod({
        "metadata": {"name": "bound", "namespace": "ns", "uid": "bound-uid", "labels": {}, "annotations": {}},
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running"},
    })
    outcome = ledger.reserve(GangRequest(id=HELD, pods=2, gpus_per_pod=4), None, 3600.0)
    assert outcome.result is not None and outcome.expires_at is not None, outcome
    return ledger


class SwappableLedger:
    """What the listeners call: one ledger, replaced by a fresh one after a request that was accepted
    and changed it, so that every example starts from the same state."""

    def __init__(self) -> None:
        self.ledger = _fresh_ledger()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)


@pytest.fixture(scope="module")
def served(loop_thread: LoopThread, pki: PemPaths) -> Iterator[tuple[SwappableLedger, RunningSite, GrpcSite]]:
    authority = SwappableLedger()

    async def start() -> tuple[RunningSite, GrpcSite]:
        metrics = ExtenderMetrics()
        https = await serve(build_extender_app(authority, metrics), "127.0.0.1", 0,  # type: ignore[arg-type]
                            server_ssl_context(pki.server_cert, pki.server_key, pki.ca_cert))
        site = await serve_grpc(authority, metrics, "127.0.0.1:0",  # type: ignore[arg-type]
                                server_credentials(pki.server_cert, pki.server_key, pki.ca_cert))
        return https, site

    https, site = loop_thread.run(start())
    yield authority, https, site

    async def stop() -> None:
        await site.close(0)
        await https.close()

    loop_thread.run(stop())


def _state(loop_thread: LoopThread, authority: SwappableLedger) -> str:
    """The ledger as its debug snapshot (less the clock reading), read on the loop that owns it (it is
    single-threaded)."""

    async def read() -> str:
        state = authority.ledger.snapshot()
        state.pop("time")
        return json.dumps(state, sort_keys=True, default=str)

    result: str = loop_thread.run(read())
    return result


def _reset(loop_thread: LoopThread, authority: SwappableLedger) -> None:
    async def swap() -> None:
        authority.ledger = _fresh_ledger()

    loop_thread.run(swap())


# ---- payloads --------------------------------------------------------------------------------

quantities = st.one_of(
    st.sampled_from(["-1", "0", "1", "4", "8", "9", "-0", "0.5", "1e30", "99999999999999999999999", "1k", "1Ei",
                     "abc", "", " 1", "NaN", "Infinity", "0x10", "1_000"]),
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.none(), st.booleans(),
    st.lists(st.integers(), max_size=2),
)
node_names = st.one_of(st.sampled_from([*NODES, "ghost", "", "n0 ", "N0", "n" * 300]), st.text(max_size=12))
gpu_indices = st.sampled_from(["0", "0,1", "-1", "99", "a", "0,0", "", "0,,1", "4294967296", "1" * 40])
json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)


@st.composite
def pods(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_junk)  # not a pod at all
    labels: dict[str, Any] = {}
    if draw(st.booleans()):
        labels["kubegang.io/job-uid"] = draw(st.sampled_from([HELD, "ghost-job", "", 7]))
        labels["kubegang.io/replica-index"] = draw(st.sampled_from(["0", "1", "7", "-1", "x", "99999999999"]))
    annotations: dict[str, Any] = {}
    if draw(st.booleans()):
        annotations["kubegang.io/node"] = draw(node_names)
    if draw(st.booleans()):
        annotations["kubegang.io/gpus"] = draw(gpu_indices)
    if draw(st.integers(0, 3)) == 0:  # a GPU share
        annotations["kubegang.io/gpu-milli"] = draw(st.sampled_from(["1", "500", "999", "1000", "0", "-5", "x", ""]))
    resources = {kind: {name: draw(quantities)
                        for name in draw(st.sets(st.sampled_from(["nvidia.com/gpu", "cpu", "memory"]), min_size=1))}
                 for kind in draw(st.sets(st.sampled_from(["limits", "requests"])))}
    containers = [{"name": "c", "resources": resources}] * draw(st.integers(0, 3))
    init = [{"name": "i", "resources": resources}] if draw(st.integers(0, 3)) == 0 else []
    return {
        "metadata": {"name": draw(st.text(max_size=8)), "namespace": "ns", "uid": draw(st.text(max_size=8)),
                     "labels": labels, "annotations": annotations},
        "spec": {"containers": containers, **({"initContainers": init} if init else {}),
                 **({"nodeName": draw(node_names)} if draw(st.booleans()) else {}),
                 **({"tolerations": draw(json_junk)} if draw(st.integers(0, 4)) == 0 else {})},
    }


@st.composite
def candidate_names(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    if kind == 0:  # a huge list of unknown nodes (kube-scheduler sends up to every node's name)
        return [f"ghost-{i}" for i in range(draw(st.integers(1000, 20000)))]
    if kind == 1:
        return draw(json_junk)
    return draw(st.lists(node_names, max_size=8))


@st.composite
def http_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    verb = draw(st.sampled_from(["/filter", "/prioritize", "/preempt"]))
    if verb == "/preempt":
        victims = draw(st.dictionaries(node_names, st.one_of(
            st.fixed_dictionaries({"Pods": st.lists(st.fixed_dictionaries({"UID": st.sampled_from(
                ["bound-uid", HELD, "ghost", ""])}), max_size=3), "NumPDBViolations": st.integers(-5, 2**40)}),
            json_junk), max_size=4))
        body: Any = {"Pod": draw(pods()), "NodeNameToMetaVictims": victims}
    elif draw(st.booleans()):
        body = {"Pod": draw(pods()), "NodeNames": draw(candidate_names())}
    else:
        names = draw(st.lists(node_names, max_size=6))
        body = {"Pod": draw(pods()), "Nodes": {"items": [{"metadata": {"name": n}} for n in names]}}
    raw = json.dumps(body).encode()
    mutation = draw(st.integers(0, 5))
    if mutation == 0:  # truncated
        raw = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif mutation == 1 and raw:  # one byte changed
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    return verb, raw


gangs = st.builds(
    pb.Gang,
    job_uid=st.sampled_from([HELD, "new-job", "", "x" * 300]),
    pods=st.sampled_from([0, 1, 2, 3, 8, 1000, 2**31, 2**32 - 1]),
    gpus_per_pod=st.sampled_from([0, 1, 4, 8, 9, 2**32 - 1]),
    gpu_fraction_milli=st.sampled_from([0, 0, 0, 1, 500, 999, 1000, 2**32 - 1]),
    cpu_milli_per_pod=st.sampled_from([0, 1, 2**63, 2**64 - 1]),
    memory_mib_per_pod=st.sampled_from([0, 1, 2**64 - 1]),
    gpu_product=st.sampled_from(["", "H100", "B200"]),
    mig_profile=st.sampled_from(["", "", "1g.10gb", "bogus"]),
    required_level=st.sampled_from(["", "node", "nvlink", "leaf", "spine", "block", "cluster", "rack"]),
    preferred_level=st.sampled_from(["", "node", "leaf", "cluster", "?"]),
    excluded_nodes=st.lists(node_names, max_size=4),
    priority=st.integers(-(2**31), 2**31 - 1),
    preferred_domain=st.sampled_from(["", "leaf-0", "ghost"]),
    tolerations=st.lists(st.builds(pb.Toleration, key=st.text(max_size=5),
                                   operator=st.sampled_from(["", "Equal", "Exists", "Maybe"]),
                                   effect=st.sampled_from(["", "NoSchedule", "Bogus"])), max_size=2),
)
placements = st.builds(
    pb.GangPlacement,
    pods=st.lists(st.builds(pb.PodPlacement, pod_index=st.sampled_from([0, 1, 2, 2**32 - 1]), node=node_names,
                            gpu_indices=st.lists(st.sampled_from([0, 1, 3, 7, 8, 2**32 - 1]), max_size=9),
                            gpu_milli=st.sampled_from([0, 1, 500, 1000, 1001, 2**32 - 1])), max_size=4),
    domain=st.builds(pb.Domain, level=st.sampled_from(["", "leaf", "moon"]), id=st.sampled_from(["", "leaf-0"])),
)


@st.composite
def grpc_calls(draw: st.DrawFn) -> tuple[str, bytes]:
    method = draw(st.sampled_from(["Plan", "Reserve", "Release", "WhatIf", "Repair"]))
    msg: Any
    if method == "Plan":
        msg = pb.PlanRequest(gang=draw(gangs))
    elif method == "Reserve":
        msg = pb.ReserveRequest(gang=draw(gangs), ttl_seconds=draw(st.sampled_from([0, 1, 2**32 - 1])))
        if draw(st.booleans()):
            msg.placement.CopyFrom(draw(placements))
    elif method == "Release":
        msg = pb.ReleaseRequest(job_uid=draw(st.sampled_from(["", "ghost", "bound-uid", "x" * 1000])))
    elif method == "WhatIf":
        huge = draw(st.booleans())
        candidates = [f"ghost-{i}" for i in range(5000)] if huge else draw(
            st.lists(st.sampled_from([HELD, "ghost", "bound-uid", "pod/bound-uid", ""]), max_size=4))
        gone = draw(st.lists(st.sampled_from([HELD, "ghost", "bound-uid", ""]), max_size=2))
        msg = pb.WhatIfRequest(gang=draw(gangs), candidate_job_uids=candidates, gone_job_uids=gone)
    else:
        msg = pb.RepairRequest(gang=draw(gangs), ttl_seconds=draw(st.sampled_from([0, 5])))
    raw = msg.SerializeToString()
    mutation = draw(st.integers(0, 4))
    if mutation == 0 and raw:  # truncated protobuf
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif mutation == 1 and raw:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    elif mutation == 2:
        raw = draw(st.binary(max_size=64))
    return method, raw


# ---- the properties --------------------------------------------------------------------------


@FUZZ
@given(request=http_bodies())
def test_scheduler_verbs_answer_everything_and_never_change_the_ledger(
    served: tuple[SwappableLedger, RunningSite, GrpcSite], loop_thread: LoopThread, pki: PemPaths,
    request: tuple[str, bytes],
) -> None:
    """filter, prioritize and preempt only read the ledger: no answer, accepted or refused, changes it."""
    authority, https, _ = served
    verb, body = request
    before = _state(loop_thread, authority)
    with httpx.Client(verify=client_ssl_context(pki.ca_cert, pki.client_cert, pki.client_key), timeout=30) as c:
        resp = c.post(f"https://127.0.0.1:{https.port}{verb}", content=body)
    assert resp.status_code in (200, 400, 413), f"{verb} answered {resp.status_code}: {resp.text[:300]}"
    if resp.status_code != 200:
        assert resp.text.strip(), "a refusal names its reason"
    assert _state(loop_thread, authority) == before, f"{verb} changed the ledger"


def _refused(method: str, raw: bytes) -> bool:
    """Whether an OK answer still says no (nothing reserved, released or placed)."""
    if method == "Reserve":
        return not pb.ReserveResponse.FromString(raw).reserved
    if method == "Release":
        return not pb.ReleaseResponse.FromString(raw).released
    if method == "Repair":
        return not pb.RepairResponse.FromString(raw).feasible
    return True  # Plan and WhatIf are questions: they never change the ledger


@FUZZ
@given(call=grpc_calls())
def test_placement_service_answers_ok_or_invalid_argument_and_refusals_change_nothing(
    served: tuple[SwappableLedger, RunningSite, GrpcSite], loop_thread: LoopThread, pki: PemPaths,
    call: tuple[str, bytes],
) -> None:
    authority, _, site = served
    method, raw = call
    before = _state(loop_thread, authority)
    creds = channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)
    with grpc.secure_channel(f"127.0.0.1:{site.port}", creds,
                             options=[("grpc.ssl_target_name_override", "localhost")]) as channel:
        try:
            answer = channel.unary_unary(f"/{SERVICE_NAME}/{method}")(raw, timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {exc.code()} {exc.details()}"
            assert exc.details(), "a refusal names its reason"
            refused = True
        else:
            refused = _refused(method, answer)
    after = _state(loop_thread, authority)
    if refused:
        assert after == before, f"a refused {method} changed the ledger"
    elif after != before:
        _reset(loop_thread, authority)


# ---- what the fuzzing found, each as its failing example ---------------------------------------


def test_found_reserve_for_four_billion_pods_with_a_placement_is_refused_not_a_memory_error(
    served: tuple[SwappableLedger, RunningSite, GrpcSite], loop_thread: LoopThread, pki: PemPaths,
) -> None:
    """Was INTERNAL: the pod-index check built ``list(range(2**32 - 1))``."""
    raw = b"\n\x10\n\x06held-1 \xff\xff\xff\xff\x0f(\x01\x12\x08\n\x04\x12\x02n0\x12\x00"
    assert pb.ReserveRequest.FromString(raw).gang.pods == 2**32 - 1
    authority, _, site = served
    before = _state(loop_thread, authority)
    creds = channel_credentials(pki.ca_cert, pki.client_cert, pki.client_key)
    with grpc.secure_channel(f"127.0.0.1:{site.port}", creds,
                             options=[("grpc.ssl_target_name_override", "localhost")]) as channel, \
            pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(f"/{SERVICE_NAME}/Reserve")(raw, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    expected = "placement.pods: expected one entry for each pod index 0..4294967294, got 1 with indices [0]"
    assert expected in info.value.details()
    assert _state(loop_thread, authority) == before
