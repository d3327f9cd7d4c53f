"""One bad job never stops the others: the real admission cycle over the real quota tree and ledger.

The cycle runs with the production adapters (``QuotaBook`` over ``kubegang.quota``, ``ExtenderPlacement``
over the extender's ``Ledger``, called in process instead of over gRPC), so what these tests exercise
is what the operator runs; only the Kubernetes writes are recorded by the ``FakeKube`` of conftest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pydantic
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kubegang.api import GPUJob
from kubegang.extender._authority import RepairOutcome, ReserveOutcome, WhatIfOutcome
from kubegang.extender._ledger import Ledger
from kubegang.operator._admission import Admission, AdmitResult
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._extender_placement import ExtenderPlacement
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._supervisor import Supervisor
from kubegang.operator._types import WaitReason
from kubegang.placement import GangRequest, Placement, PlanResult

from .conftest import FakeKube, make_job_body


class InProcessClient:
    """The extender's ``PlacementClient`` surface, answered by a real ``Ledger`` in this process."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.fail_for: set[str] = set()
        """Job names whose Plan raises, as a bug in a conversion would."""

    def _check(self, name: str) -> None:
        if name in self.fail_for:
            raise RuntimeError(f"injected failure planning {name}")

    async def plan(self, gang: GangRequest, *, namespace: str = "", name: str = "") -> PlanResult:
        self._check(name)
        return self.ledger.plan(gang)

    async def reserve(self, gang: GangRequest, plan: Placement | None = None, *, ttl_seconds: int = 0,
                      namespace: str = "", name: str = "") -> ReserveOutcome:
        return self.ledger.reserve(gang, plan, ttl_seconds or 120)

    async def release(self, job_uid: str) -> int:
        return self.ledger.release(job_uid)

    async def what_if(self, gang: GangRequest, candidates: Sequence[str], *, namespace: str = "",
                      name: str = "") -> WhatIfOutcome:
        return self.ledger.what_if(gang, list(candidates))

    async def repair(self, gang: GangRequest, *, ttl_seconds: int = 0, namespace: str = "",
                     name: str = "") -> RepairOutcome:
        return self.ledger.repair(gang, ttl_seconds or 120)


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubegang.io/leaf": f"leaf-{name[-1]}"}}, "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "128", "memory": "1Ti", "pods": "110"}}}


def _queue(name: str, nominal: int, parent: str | None = None, namespaces: Sequence[str] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": [{"flavor": "nvidia.com/gpu", "nominal": nominal}]}
    if parent:
        spec["parent"] = parent
    if namespaces:
        spec["namespaces"] = list(namespaces)
    return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name}, "spec": spec}


class RealWorld:
    def __init__(self, nodes: int = 8) -> None:
        self.ledger = Ledger()
        for i in range(nodes):
            self.ledger.upsert_node(_node(f"node-{i}"))
        self.client = InProcessClient(self.ledger)
        self.cache = ClusterCache()
        for body in (_queue("org", 64), _queue("team-a", 32, "org", ["team-a"]),
                     _queue("team-n", 16, "org", ["normal"])):
            self.cache.upsert_queue(body)
        self.kube = FakeKube()
        self.quota = QuotaBook(priority_of=self.cache.priority_of)
        self.admission = Admission(self.cache, self.quota, ExtenderPlacement(self.client), self.kube)  # type: ignore[arg-type]
        self.supervisor = Supervisor(self.admission)

    def submit(self, body: dict[str, Any]) -> None:
        self.cache.upsert_job(body)

    async def cycle(self) -> list[Any]:
        outcomes = await self.admission.run_cycle()
        await self.admission.settle()
        return outcomes

    def status(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for patch in self.kube.status.get(key, []):
            merged.update(patch)
        return merged


def _normal() -> dict[str, Any]:
    return make_job_body("normal", namespace="normal", queue="team-n", replicas=1, gpus=8,
                         created="2025-01-01T01:00:00Z")


async def test_a_job_whose_handling_raises_is_marked_and_the_job_behind_it_is_admitted() -> None:
    w = RealWorld()
    w.submit(make_job_body("poison", namespace="team-a", queue="team-a", replicas=1, gpus=8))
    w.submit(_normal())
    w.client.fail_for.add("poison")
    outcomes = {o.job: o for o in await w.cycle()}
    assert outcomes["normal/normal"].result is AdmitResult.ADMITTED
    bad = outcomes["team-a/poison"]
    assert bad.result is AdmitResult.ERROR and bad.reason is WaitReason.ADMISSION_ERROR
    cond = get_condition(w.status("team-a/poison")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "AdmissionError"
    assert "injected failure planning poison" in cond["message"] and "retrying in 1s" in cond["message"]
    assert any(e[:2] == ("team-a/poison", "AdmissionError") and e[3] for e in w.kube.events)
    # It holds nothing while it waits, and it waits out its backoff instead of failing every cycle.
    assert "uid-poison" not in w.quota.tree
    assert [o.job for o in await w.cycle()] == []
    w.client.fail_for.clear()
    w.admission.cycle.clock = lambda: time.monotonic() + 1.5  # the 1 s backoff has passed
    assert [(o.job, o.result) for o in await w.cycle()] == [("team-a/poison", AdmitResult.ADMITTED)]


async def test_a_fractional_job_and_a_whole_gpu_job_are_both_admitted() -> None:
    """The issue's first symptom: gpuFraction raised in the cycle and stopped every queue."""
    w = RealWorld(nodes=1)
    shared = make_job_body("embedder", namespace="team-a", queue="team-a", replicas=1, gpuFraction=250)
    del shared["spec"]["template"]["spec"]["containers"][0]["resources"]
    w.submit(shared)
    w.submit(make_job_body("whole", namespace="team-a", queue="team-a", replicas=1, gpus=7,
                           created="2025-01-01T00:00:01Z"))
    outcomes = {o.job: o.result for o in await w.cycle()}
    outcomes |= {o.job: o.result for o in await w.cycle()}
    assert outcomes == {"team-a/embedder": AdmitResult.ADMITTED, "team-a/whole": AdmitResult.ADMITTED}
    pods = {p["metadata"]["name"]: p for p in w.kube.pods()}
    shared_pod, whole_pod = pods["embedder-0"], pods["whole-0"]
    assert shared_pod["metadata"]["annotations"]["kubegang.io/gpu-milli"] == "250"
    shared_gpu = shared_pod["metadata"]["annotations"]["kubegang.io/gpus"]
    assert shared_gpu not in whole_pod["metadata"]["annotations"]["kubegang.io/gpus"].split(",")
    placement = w.status("team-a/embedder")["placement"]
    assert placement["pods"] == [{"index": 0, "node": "node-0", "gpus": [int(shared_gpu)], "gpuMilli": 250}]
    assert w.status("team-a/embedder")["totalGPUs"] == 0.25


async def test_a_pod_larger_than_every_node_is_unschedulable_naming_the_largest_node() -> None:
    w = RealWorld(nodes=2)
    w.submit(make_job_body("nine", namespace="team-a", queue="team-a", replicas=1, gpus=9))
    [outcome] = await w.cycle()
    assert (outcome.result, outcome.reason) == (AdmitResult.UNSCHEDULABLE, WaitReason.NO_NODE_LARGE_ENOUGH)
    status = w.status("team-a/nine")
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert status["phase"] == "Unschedulable" and cond is not None
    assert cond["reason"] == "NoNodeLargeEnough"
    assert cond["message"] == "each pod needs 9 GPUs, but the largest GPU node (node-0) has 8"
    # A bigger node joins: the job is tried again and admitted (the cluster, not the tree, changed).
    w.ledger.upsert_node(_node("node-9", gpus=16))
    [again] = await w.cycle()
    assert again.result is AdmitResult.ADMITTED


async def test_a_queue_that_does_not_exist_has_its_own_reason() -> None:
    w = RealWorld()
    w.submit(make_job_body("lost", namespace="team-a", queue="no-such-queue", replicas=1, gpus=8))
    [outcome] = await w.cycle()
    assert (outcome.result, outcome.reason) == (AdmitResult.UNSCHEDULABLE, WaitReason.QUEUE_NOT_FOUND)
    cond = get_condition(w.status("team-a/lost")["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["reason"] == "QueueNotFound"
    assert cond["message"] == "queue no-such-queue does not exist (leaf queues: team-a, team-n)"


_LEVELS = st.sampled_from(["node", "nvlink", "leaf", "spine", "block", "cluster"])
_QUANTITY = st.one_of(st.integers(-2, 20), st.sampled_from(["8", "0.5", "1500m", "2k", "1Gi", "x"]))


@st.composite
def _any_job_spec(draw: st.DrawFn) -> dict[str, Any]:
    """A GPUJob spec of any combination of fields the schema knows, in and out of range."""
    limits: dict[str, Any] = {}
    if draw(st.booleans()):
        limits["nvidia.com/gpu"] = draw(_QUANTITY)
    for name in ("cpu", "memory"):
        if draw(st.booleans()):
            limits[name] = draw(_QUANTITY)
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if limits:
        container["resources"] = {draw(st.sampled_from(["limits", "requests"])): limits}
    pod_spec: dict[str, Any] = {"containers": [container]}
    if draw(st.booleans()):
        pod_spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": draw(_QUANTITY)}}}]
    if draw(st.booleans()):
        pod_spec["tolerations"] = [{"key": "k", "operator": draw(st.sampled_from(["Equal", "Exists"]))}]
    if draw(st.booleans()):
        pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    spec: dict[str, Any] = {"queue": draw(st.sampled_from(["team-a", "team-n", "org", "missing"])),
                            "template": {"spec": pod_spec}}
    optional = {
        "replicas": st.integers(0, 12),
        "gpusPerReplica": st.integers(-1, 12),
        "gpuFraction": st.integers(0, 1000),
        "gpuProduct": st.sampled_from(["H100", "NVIDIA-H200"]),
        "priority": st.integers(-5, 5),
        "priorityClassName": st.sampled_from(["high", "unknown"]),
        "topology": st.fixed_dictionaries({}, optional={"required": _LEVELS, "preferred": _LEVELS}),
        "framework": st.sampled_from(["none", "torchrun", "mpi"]),
        "restartLimit": st.integers(0, 3),
        "gangTimeoutSeconds": st.integers(1, 600),
        "suspend": st.booleans(),
        "ttlSecondsAfterFinished": st.integers(0, 100),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_any_job_spec(), min_size=1, max_size=4))
async def test_whatever_jobs_the_schema_accepts_a_normal_job_behind_them_is_admitted(
    specs: list[dict[str, Any]],
) -> None:
    accepted = []
    for i, spec in enumerate(specs):
        body = {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob",
                "metadata": {"name": f"any-{i}", "namespace": "team-a", "uid": f"uid-any-{i}", "generation": 1,
                             "creationTimestamp": "2025-01-01T00:00:00Z"}, "spec": spec}
        try:
            GPUJob.model_validate(body)  # the same rules as the CRD schema: only what kubectl apply accepts
        except pydantic.ValidationError:
            continue
        accepted.append(body)
    assume(accepted)
    w = RealWorld()
    for body in accepted:
        w.submit(body)
    w.submit(_normal())
    outcomes = await w.cycle()
    assert ("normal/normal", AdmitResult.ADMITTED) in [(o.job, o.result) for o in outcomes]
    for outcome in outcomes:
        assert outcome.result is not AdmitResult.ERROR, outcome


async def test_a_pod_kubegang_did_not_place_takes_a_slot_and_the_gang_is_re_placed_within_seconds() -> None:
    """Issue 18: a serving pod bound onto a reserved node held 15 of 16 pods for the whole gang timeout."""
    w = RealWorld()
    w.submit(make_job_body("big", namespace="team-a", queue="team-a", replicas=2, gpus=8))
    [admitted] = await w.cycle()
    assert admitted.result is AdmitResult.ADMITTED
    created = {p["metadata"]["name"]: p for p in w.kube.pods()}
    for i, body in enumerate(created.values()):  # the pods exist, pinned, not bound yet
        echo = {**body, "metadata": {**body["metadata"], "uid": f"pod-uid-{i}"}}
        w.cache.upsert_pod(echo)
        w.ledger.upsert_pod(echo)
    taken = created["big-1"]["metadata"]["annotations"]["kubegang.io/node"]
    intruder = {"metadata": {"name": "web-0", "namespace": "serving", "uid": "web-uid"},
                "spec": {"nodeName": taken, "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}, "status": {"phase": "Running"}}
    w.ledger.upsert_pod(intruder)
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert ("Pod", "team-a", "big-1") in w.kube.deleted
    replaced = next(p for p in w.kube.pods() if p["metadata"]["name"] == "big-1")
    new_node = replaced["metadata"]["annotations"]["kubegang.io/node"]
    assert new_node not in (taken, created["big-0"]["metadata"]["annotations"]["kubegang.io/node"])
    status = w.status("team-a/big")
    assert {p["index"]: p["node"] for p in status["placement"]["pods"]}[1] == new_node
    cond = get_condition(status["conditions"], CondType.ADMITTED)
    assert cond is not None and cond["reason"] == "Repaired" and "serving/web-0" in cond["message"]
    assert any(e[:2] == ("team-a/big", "Repaired") and "serving/web-0" in e[2] for e in w.kube.events)
    assert ("Pod", "team-a", "big-0") not in w.kube.deleted  # the rest of the gang keeps its pods
