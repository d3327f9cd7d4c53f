"""One bad job never stops the others: the real admission cycle over the real quota tree and ledger.

The cycle runs with the production adapters (conftest's ``World``: ``QuotaBook`` over ``kubegang.quota``,
``ExtenderPlacement`` over the extender's ``Ledger``, called in process instead of over gRPC), so what
these tests exercise is what the operator runs; only the Kubernetes writes are recorded (``FakeKube``).
"""

from __future__ import annotations

import time
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kubegang.api import GPUJob
from kubegang.operator._admission import AdmitResult
from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._types import WaitReason

from .conftest import World, gpu_node, gpu_queue, make_job_body
from .test_supervisor import counted, restarts  # type: ignore[import-not-found]


def _world(nodes: int = 8) -> World:
    """``org`` (64 GPUs) over ``team-a`` (32, namespace team-a) and ``team-n`` (16, namespace normal);
    ``nodes`` nodes of 8 GPUs, each under its own leaf switch."""
    return World({}, {f"node-{i}": 8 for i in range(nodes)}, leaves={f"node-{i}": f"leaf-{i}" for i in range(nodes)},
                 queues=[gpu_queue("org", 64), gpu_queue("team-a", 32, "org", ["team-a"]),
                         gpu_queue("team-n", 16, "org", ["normal"])])


def _normal() -> dict[str, Any]:
    return make_job_body("normal", namespace="normal", queue="team-n", replicas=1, gpus=8,
                         created="2025-01-01T01:00:00Z")


async def test_a_job_whose_handling_raises_is_marked_and_the_job_behind_it_is_admitted() -> None:
    w = _world()
    w.submit(make_job_body("poison", namespace="team-a", queue="team-a", replicas=1, gpus=8))
    w.submit(_normal())
    w.client.fail_for.add("poison")
    outcomes = {o.job: o for o in await w.cycle()}
    assert outcomes["normal/normal"].result is AdmitResult.ADMITTED
    bad = outcomes["team-a/poison"]
    assert bad.result is AdmitResult.ERROR and bad.reason is WaitReason.ADMISSION_ERROR
    cond = get_condition(w.last_status("team-a/poison")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "AdmissionError"
    assert "injected failure planning poison" in cond["message"] and "retrying in 1s" in cond["message"]
    assert any(e[:2] == ("team-a/poison", "AdmissionError") and e[3] for e in w.kube.events)
    # It holds nothing while it waits, and it waits out its backoff instead of failing every cycle.
    assert "uid-poison" not in w.quota.tree
    assert [o.job for o in await w.cycle()] == []
    # docs/operator.md: doubling per failure while the spec stays the same ...
    w.admission.cycle.clock = lambda: time.monotonic() + 1.5  # the 1 s backoff has passed
    [again] = await w.cycle()
    assert again.result is AdmitResult.ERROR and again.message.endswith("retrying in 2s"), again
    w.admission.cycle.clock = lambda: time.monotonic() + 3.0  # within the 2 s after 1.5 s
    assert [o.job for o in await w.cycle()] == []
    # ... and at once when the spec changes (a new generation), whatever the backoff left.
    edited = make_job_body("poison", namespace="team-a", queue="team-a", replicas=1, gpus=8)
    edited["metadata"]["generation"] = 2
    w.submit(edited)
    w.client.fail_for.clear()
    assert [(o.job, o.result) for o in await w.cycle()] == [("team-a/poison", AdmitResult.ADMITTED)]


async def test_a_fractional_job_and_a_whole_gpu_job_are_both_admitted() -> None:
    """The issue's first symptom: gpuFraction raised in the cycle and stopped every queue."""
    w = _world(nodes=1)
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
    placement = w.last_status("team-a/embedder")["placement"]
    assert placement["pods"] == [{"index": 0, "node": "node-0", "gpus": [int(shared_gpu)], "gpuMilli": 250}]
    assert w.last_status("team-a/embedder")["totalGPUs"] == 0.25


async def test_a_pod_larger_than_every_node_is_unschedulable_naming_the_largest_node() -> None:
    w = _world(nodes=2)
    w.submit(make_job_body("nine", namespace="team-a", queue="team-a", replicas=1, gpus=9))
    [outcome] = await w.cycle()
    assert (outcome.result, outcome.reason) == (AdmitResult.UNSCHEDULABLE, WaitReason.EXCEEDS_CLUSTER)
    status = w.last_status("team-a/nine")
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert status["phase"] == "Unschedulable" and cond is not None
    assert cond["reason"] == "ExceedsCluster"
    assert cond["message"] == "each pod needs 9 GPUs, but the largest GPU node (node-0) has 8"
    # A bigger node joins: the job is tried again and admitted (the cluster, not the tree, changed).
    w.ledger.upsert_node(gpu_node("node-9", 16, "leaf-9"))
    [again] = await w.cycle()
    assert again.result is AdmitResult.ADMITTED


async def test_a_queue_that_does_not_exist_has_its_own_reason() -> None:
    w = _world()
    w.submit(make_job_body("lost", namespace="team-a", queue="no-such-queue", replicas=1, gpus=8))
    [outcome] = await w.cycle()
    assert (outcome.result, outcome.reason) == (AdmitResult.UNSCHEDULABLE, WaitReason.QUEUE_NOT_FOUND)
    cond = get_condition(w.last_status("team-a/lost")["conditions"], CondType.UNSCHEDULABLE)
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
    w = _world()
    for body in accepted:
        w.cache.upsert_job(body)  # the cache refuses what the operator cannot read
    w.submit(_normal())
    outcomes = await w.cycle()
    assert ("normal/normal", AdmitResult.ADMITTED) in [(o.job, o.result) for o in outcomes]
    for outcome in outcomes:
        assert outcome.result is not AdmitResult.ERROR, outcome


async def test_a_pod_kubegang_did_not_place_takes_a_slot_and_the_gang_is_re_placed_within_seconds() -> None:
    """Issue 18: a serving pod bound onto a reserved node held 15 of 16 pods for the whole gang timeout."""
    w = _world()
    w.submit(make_job_body("big", namespace="team-a", queue="team-a", replicas=2, gpus=8))
    [admitted] = await w.cycle()
    assert admitted.result is AdmitResult.ADMITTED
    created = {p["metadata"]["name"]: p for p in w.kube.pods()}
    w.echo_pods(phase="Pending", bound=False)  # the pods exist, pinned, not bound yet
    taken = created["big-1"]["metadata"]["annotations"]["kubegang.io/node"]
    intruder = {"metadata": {"name": "web-0", "namespace": "serving", "uid": "web-uid"},
                "spec": {"nodeName": taken, "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}, "status": {"phase": "Running"}}
    w.ledger.upsert_pod(intruder)
    moved = _repairs("moved")
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert _repairs("moved") == moved + 1  # kubegang_gang_repairs_total{outcome="moved"} (metrics.md)
    assert ("Pod", "team-a", "big-1") in w.kube.deleted
    replaced = next(p for p in w.kube.pods() if p["metadata"]["name"] == "big-1")
    new_node = replaced["metadata"]["annotations"]["kubegang.io/node"]
    assert new_node not in (taken, created["big-0"]["metadata"]["annotations"]["kubegang.io/node"])
    status = w.last_status("team-a/big")
    assert {p["index"]: p["node"] for p in status["placement"]["pods"]}[1] == new_node
    cond = get_condition(status["conditions"], CondType.ADMITTED)
    assert cond is not None and cond["reason"] == "Repaired" and "serving/web-0" in cond["message"]
    assert any(e[:2] == ("team-a/big", "Repaired") and "serving/web-0" in e[2] for e in w.kube.events)
    assert ("Pod", "team-a", "big-0") not in w.kube.deleted  # the rest of the gang keeps its pods


def _repairs(outcome: str) -> float:
    from kubegang.operator._metrics import REGISTRY

    return REGISTRY.get_sample_value("kubegang_gang_repairs_total", {"outcome": outcome}) or 0.0


async def test_a_gang_whose_slot_was_taken_and_has_no_other_place_is_requeued_whole_as_displaced() -> None:
    """docs/extender.md: no place near the gang, so it is requeued whole at once (``GangDisplaced``)."""
    w = _world(nodes=2)
    w.submit(make_job_body("big", namespace="team-a", queue="team-a", replicas=2, gpus=8))
    [admitted] = await w.cycle()
    assert admitted.result is AdmitResult.ADMITTED
    w.echo_pods(phase="Pending", bound=False)
    taken = next(p for p in w.kube.pods() if p["metadata"]["name"] == "big-1")["metadata"]["annotations"][
        "kubegang.io/node"]
    w.ledger.upsert_pod({"metadata": {"name": "web-0", "namespace": "serving", "uid": "web-uid"},
                         "spec": {"nodeName": taken, "containers": [
                             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
                         "status": {"phase": "Running"}})
    requeued = _repairs("requeued")
    before = restarts()
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert _repairs("requeued") == requeued + 1
    assert restarts() == counted(before, GangDisplaced=1)  # kubegang_gang_restarts_total{reason="GangDisplaced"}
    status = w.last_status("team-a/big")
    assert (status["phase"], status["reason"], status["admittedAt"]) == ("Queued", "GangDisplaced", None), status
    cond = get_condition(status["conditions"], CondType.QUEUED)
    assert cond is not None and "serving/web-0" in cond["message"] and "requeued whole" in cond["message"], cond
    # docs/operator.md, "Events": a Warning Event with the condition's reason.
    assert [e for e in w.kube.events if e[1] == "GangDisplaced"] == [
        ("team-a/big", "GangDisplaced", cond["message"], True)], w.kube.events
    assert {("Pod", "team-a", "big-0"), ("Pod", "team-a", "big-1")} <= set(w.kube.deleted)  # whole, at once
    assert "uid-big" not in w.quota.tree


async def test_status_times_another_client_wrote_unreadable_stop_no_supervision_pass() -> None:
    # RFC 3339 allows a lowercase z (the API server keeps it as written); a day that does not exist and
    # a time without a zone are not RFC 3339, yet a client without the schema's format check can write them.
    w = World({"team-a": 64}, {f"node-{i}": 8 for i in range(4)})
    bodies = {name: make_job_body(name, replicas=1, gpus=8) for name in ("lower-z", "no-day", "no-zone", "good")}
    for body in bodies.values():
        w.submit(body)
    await w.cycle()
    written = {"lower-z": "2025-01-01T00:00:00z", "no-day": "2025-02-30T00:00:00Z", "no-zone": "2025-01-01T00:00:00"}
    for name, stamp in written.items():
        key = f"team-a/{name}"
        w.submit({**bodies[name], "status": {**w.last_status(key), "podsCreatedAt": stamp}})
        w.cache.forget(bodies[name]["metadata"]["uid"])  # what the leader assumed gives way to what is read
    w.echo_pods("Running")
    w.supervisor.look_at_everything()
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert {name: w.last_status(f"team-a/{name}")["phase"] for name in bodies} == dict.fromkeys(bodies, "Running")


async def test_a_job_whose_supervision_raises_is_skipped_and_the_others_are_supervised(monkeypatch: Any) -> None:
    from kubegang.operator import _supervisor

    w = World({"team-a": 64}, {f"node-{i}": 8 for i in range(4)})
    for name in ("broken", "good"):
        w.submit(make_job_body(name, replicas=1, gpus=8))
    await w.cycle()
    real = _supervisor.decide

    def decide(job: Any, pods: Any, now: Any) -> Any:
        if job.name == "broken":
            raise KeyError("a field no test thought of")
        return real(job, pods, now)

    monkeypatch.setattr(_supervisor, "decide", decide)
    w.echo_pods("Running")
    w.supervisor.look_at_everything()
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/good")["phase"] == "Running"
    assert w.last_status("team-a/broken")["phase"] == "Admitted"
    monkeypatch.setattr(_supervisor, "decide", real)  # mended: the next pass that looks at it acts
    w.supervisor.look_at_everything()
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/broken")["phase"] == "Running"


async def test_a_job_the_operator_cannot_read_is_told_so_once_naming_the_field_and_the_others_run() -> None:
    from kubegang.operator._controller import Controller

    w = World({"team-a": 64}, {f"node-{i}": 8 for i in range(4)})
    # The schema keeps the template's unknown fields, so this toleration reaches the operator as written;
    # a CPU beyond any resource is a quantity the template's schema does not bound either.
    toleration = make_job_body("exist", replicas=1, gpus=8)
    toleration["spec"]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exist"}]
    huge = make_job_body("huge", replicas=1, gpus=8)
    huge["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1e999999999"}
    for body in (toleration, huge):
        assert w.cache.upsert_job(body) is None
    w.submit(make_job_body("good", replicas=1, gpus=8))
    controller = Controller(w.cache, w.admission, leadership=None, kube=w.kube)  # type: ignore[arg-type]
    await controller.step()
    await w.admission.settle()
    assert w.last_status("team-a/good")["phase"] == "Admitted"
    reports = {name: w.last_status(f"team-a/{name}") for name in ("exist", "huge")}
    for name, field in (("exist", "spec.template.spec.tolerations[0]"), ("huge", "1e999999999")):
        status = reports[name]
        assert (status["phase"], status["reason"]) == ("Unschedulable", "InvalidSpec"), status
        [cond] = [c for c in status["conditions"] if c["type"] == "Unschedulable"]
        assert cond["status"] == "True" and field in cond["message"] and cond["observedGeneration"] == 1, cond
        assert any(e[:2] == (f"GPUJob/team-a/{name}", "InvalidSpec") and e[3] for e in w.kube.events), w.kube.events
    # Written once: neither a later step nor the report's own echo writes it again ...
    writes = len(w.kube.status["team-a/exist"])
    await controller.step()
    w.cache.upsert_job({**toleration, "status": reports["exist"]})
    await controller.step()
    assert len(w.kube.status["team-a/exist"]) == writes
    # ... and once mended (a new generation), the job is read and admitted like any other.
    toleration["spec"]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    toleration["metadata"]["generation"] = 2
    w.submit({**toleration, "status": reports["exist"]})
    await controller.step()
    await w.admission.settle()
    assert w.last_status("team-a/exist")["phase"] == "Admitted" and not w.cache.invalid_jobs.get("uid-exist")


async def test_an_unreachable_extender_is_the_queued_reason_and_nothing_is_admitted_or_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    import grpc

    w = World({"team-a": 64}, {f"node-{i}": 8 for i in range(2)})
    w.submit(make_job_body("train", replicas=1, gpus=8))

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details="connection refused")

    real_plan, real_room = w.client.plan_at, w.client.room
    w.client.plan_at = unreachable  # type: ignore[method-assign]
    w.client.room = unreachable  # type: ignore[method-assign]
    for _ in range(2):
        [outcome] = await w.cycle()
        assert outcome.result.value == "Queued" and "extender unavailable (UNAVAILABLE)" in outcome.message, outcome
    assert w.kube.pods() == [] and "uid-train" not in w.quota.tree
    # Without a room epoch every question is asked (none kept), and the failure is logged once per outage.
    assert sum("room epoch failed" in r.getMessage() for r in caplog.records) == 1
    w.client.plan_at, w.client.room = real_plan, real_room  # type: ignore[method-assign]
    [outcome] = await w.cycle()
    assert outcome.result.value == "Admitted", outcome


async def test_deleting_a_queue_whose_job_runs_stops_no_other_queue() -> None:
    """docs/api.md: a queue out of the tree leaves its own jobs waiting; every other queue admits."""
    w = _world()
    w.submit(make_job_body("a1", namespace="team-a", queue="team-a", replicas=1, gpus=8))
    [admitted] = await w.cycle()
    assert admitted.result is AdmitResult.ADMITTED
    w.echo_pods()
    w.cache.remove_queue("team-a")  # kubectl delete gq team-a, its job still running
    w.submit(_normal())
    outcomes = {o.job: o.result for o in await w.cycle()}
    assert outcomes == {"normal/normal": AdmitResult.ADMITTED}, outcomes
    assert w.kube.objects.get(("Pod", "team-a", "a1-0")) is not None  # the running gang is left alone
    w.cache.upsert_queue(gpu_queue("team-a", 32, "org", ["team-a"]))  # back: counted again
    await w.cycle()
    assert "uid-a1" in w.quota.tree
