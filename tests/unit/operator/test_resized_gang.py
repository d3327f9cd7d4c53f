"""Editing the shape of a gang that holds an admission (``spec.replicas``, the GPUs per replica through the
template, ``gpusPerReplica`` or ``gpuFraction``): nothing makes these fields immutable, and the gang's pods,
placement and quota are those of the admitted shape. The whole gang is requeued at its new size with reason
``Resized``, saying what changed, and it is not a restart (``restartLimit`` is not spent): before, a grown
gang read its new replicas as pods that disappeared ("worker 2 disappeared (pod deleted or node lost)",
restart 1, or Failed with ``restartLimit: 0``), and a shrunk one ran its old pods for ever."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from kubegang.operator import _metrics as metrics
from kubegang.operator._conditions import Phase
from kubegang.operator._job import job_view
from kubegang.operator._lifecycle import Action, PodState, decide

from .conftest import World, make_job_body

NODES = {f"n{i}": 8 for i in range(6)}


async def _running(w: World, body: dict[str, Any]) -> None:
    w.submit(body)
    await w.cycle()
    w.echo_pods("Running")
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/a")["phase"] == "Running"


def _edit(w: World, body: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``kubectl edit`` of the job's spec: a new generation, its status as the API has it."""
    edited = copy.deepcopy(body)
    edited["spec"].update(spec)
    edited["metadata"]["generation"] = 2
    job = w.cache.job("uid-a")
    assert job is not None
    edited["status"] = dict(job.status)
    w.cache.upsert_job(edited)
    return edited


def _restarts_counted(reason: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("kubegang_gang_restarts_total", {"reason": reason})


async def test_growing_a_running_gang_requeues_it_whole_at_its_new_size_without_spending_a_restart() -> None:
    w = World({"team-a": 64}, NODES)
    body = make_job_body("a", replicas=2, gpus=8, restartLimit=0)
    await _running(w, body)
    resized_before = _restarts_counted("Resized")
    _edit(w, body, replicas=4)
    await w.supervisor.run_pass()
    await w.admission.settle()

    message = "spec.replicas changed 2 -> 4 while Running: the whole gang is requeued at its new size " \
              "(not counted as a restart)"
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"], status.get("restarts")) == ("Queued", "Resized", None)
    assert [c["message"] for c in status["conditions"] if c["type"] == "Queued"] == [message]
    assert w.kube.events == [("team-a/a", "Resized", message, True)]
    assert {"a-0", "a-1"} <= {n for k, _, n in w.kube.deleted if k == "Pod"} and w.kube.pods() == []
    assert _restarts_counted("Resized") == resized_before  # not a restart in the metric either

    w.drop_deleted_pods()
    assert w.holds_nothing("uid-a")                     # quota and reservation released with the pods
    await w.cycle()
    job = w.cache.job("uid-a")
    assert job is not None and job.phase is Phase.ADMITTED and job.restarts == 0
    assert job.placement is not None and len(job.placement.pods) == 4
    assert sorted(p["metadata"]["name"] for p in w.kube.pods()) == ["a-0", "a-1", "a-2", "a-3"]
    assert w.quota._held["uid-a"].total_gpus == 32


async def test_shrinking_a_running_gang_requeues_it_instead_of_running_its_old_pods() -> None:
    w = World({"team-a": 64}, NODES)
    body = make_job_body("a", replicas=4, gpus=8)
    await _running(w, body)
    _edit(w, body, replicas=2)
    await w.supervisor.run_pass()
    await w.admission.settle()
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"]) == ("Queued", "Resized")
    assert sorted(n for k, _, n in w.kube.deleted if k == "Pod") == ["a-0", "a-1", "a-2", "a-3"]


async def test_changing_the_gpus_per_replica_of_a_running_gang_through_its_template_requeues_it() -> None:
    w = World({"team-a": 64}, NODES)
    body = make_job_body("a", replicas=2, gpus=8)
    await _running(w, body)
    template = copy.deepcopy(body["spec"]["template"])
    template["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    _edit(w, body, template=template)
    await w.supervisor.run_pass()
    await w.admission.settle()
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"], status.get("restarts")) == ("Queued", "Resized", None)
    assert w.kube.events == [("team-a/a", "Resized", "GPUs per replica (the template's nvidia.com/gpu limit) "
                              "changed 8 -> 4 while Running: the whole gang is requeued at its new size "
                              "(not counted as a restart)", True)]


async def test_an_edit_that_keeps_the_gangs_shape_leaves_the_running_gang_alone() -> None:
    w = World({"team-a": 64}, NODES)
    body = make_job_body("a", replicas=2, gpus=8)
    await _running(w, body)
    _edit(w, body, timeLimitSeconds=3600, restartLimit=5)
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/a")["phase"] == "Running" and w.kube.deleted == [] and w.kube.events == []


# -- the rule, on its own -------------------------------------------------------------------------
T0 = dt.datetime(2025, 1, 1, 0, 1, tzinfo=dt.UTC)


def _admitted(replicas: int, gpus_per_pod: list[int], total: float, phase: str = "Running",
              **spec: Any) -> Any:
    body = make_job_body("a", replicas=replicas, **spec)
    if "gpusPerReplica" in spec or "gpuFraction" in spec:
        del body["spec"]["template"]["spec"]["containers"][0]["resources"]
    body["status"] = {
        "phase": phase, "admittedAt": "2025-01-01T00:00:00Z", "podsCreatedAt": "2025-01-01T00:00:00Z",
        "totalGPUs": total,
        "placement": {"domain": "leaf-0", "pods": [{"index": i, "node": f"n{i}", "gpus": list(range(g))}
                                                   for i, g in enumerate(gpus_per_pod)]},
    }
    return job_view(body)


def _pods(n: int) -> list[PodState]:
    return [PodState(name=f"a-{i}", index=i, attempt="20250101T000000Z", phase="Running", planned_node=f"n{i}",
                     bound_node=f"n{i}", ready=True) for i in range(n)]


@pytest.mark.parametrize(("job", "pods", "message"), [
    (_admitted(3, [8, 8, 8], 24, gpusPerReplica=4), 3,
     "GPUs per replica (spec.gpusPerReplica) changed 8 -> 4 while Running"),
    (_admitted(1, [1], 0.25, gpuFraction=500), 1,
     "GPUs per replica (spec.gpuFraction) changed 0.25 -> 0.5 while Running"),
    (_admitted(3, [8, 8], 16, gpusPerReplica=4), 2,
     "spec.replicas changed 2 -> 3 and GPUs per replica (spec.gpusPerReplica) changed 8 -> 4 while Running"),
    (_admitted(3, [8, 8], 16, phase="Admitted", gpus=8), 2,
     "spec.replicas changed 2 -> 3 while Admitted"),
])
def test_a_gang_whose_shape_differs_from_its_admission_is_resized(job: Any, pods: int, message: str) -> None:
    decision = decide(job, _pods(pods), T0)
    assert decision.action is Action.RESIZE and decision.reason == "Resized"
    assert decision.message == f"{message}: the whole gang is requeued at its new size (not counted as a restart)"


def test_a_gang_admitted_as_it_is_or_without_a_recorded_shape_is_not_resized() -> None:
    assert decide(_admitted(3, [4, 4, 4], 12, gpusPerReplica=4), _pods(3), T0).action is Action.PROGRESS
    unrecorded = _admitted(3, [8, 8], 16, gpus=8)
    unrecorded = job_view({"metadata": {"name": "a", "namespace": "team-a", "uid": "uid-a", "generation": 2,
                                        "creationTimestamp": "2025-01-01T00:00:00Z"},
                           "spec": make_job_body("a", replicas=3)["spec"],
                           "status": {k: v for k, v in unrecorded.status.items() if k != "placement"}})
    # No placement recorded (an object from before it was): the rule cannot tell, and leaves it to the others.
    assert decide(unrecorded, _pods(3), T0).action is Action.PROGRESS
