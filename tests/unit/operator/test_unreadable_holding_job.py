"""A GPUJob that holds an admission when its spec becomes unreadable is not forgotten.

An edit the CRD accepts but the operator's model refuses (a template quantity like ``cpu: "two"``: the
schema keeps the template's unknown fields), or an object kept from an older, laxer CRD, used to drop
a running gang from the cache: its quota was not counted once the tree was rebuilt, its failed pods
were not handled, mending the spec did not bring it back, and deleting it left its quota taken. These
tests drive the real cycle, supervisor and report (conftest's ``World``, and the ``Controller`` step)
the way the audit found it (``operator/_cache.py``, ``_unreadable``).
"""

from __future__ import annotations

import copy
from typing import Any

from kubegang.admission import AdmitResult
from kubegang.operator._cache import ClusterCache
from kubegang.operator._controller import Controller
from kubegang.operator._types import WaitReason

from .conftest import World, gpu_queue, make_job_body

CPU_FIELD = "spec.template.spec.containers[0].resources.requests.cpu"


async def _running(w: World, name: str = "a") -> dict[str, Any]:
    """Admit ``name`` (one pod of 8 GPUs), let its pod run, and return its object as the API has it."""
    body = make_job_body(name, replicas=1, gpus=8)
    w.submit(body)
    [outcome] = await w.cycle()
    assert outcome.result is AdmitResult.ADMITTED, outcome
    w.echo_pods("Running")
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert _echo(w, body)["status"]["phase"] == "Running"
    return body


def _echo(w: World, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the watch delivers it now: every status patch written so far merged in."""
    echo = copy.deepcopy(body)
    echo["status"] = {**(body.get("status") or {}), **w.last_status(f"{body['metadata']['namespace']}/"
                                                                    f"{body['metadata']['name']}")}
    return echo


def _unreadable_edit(w: World, body: dict[str, Any], generation: int = 2) -> dict[str, Any]:
    """``kubectl edit``: a typo in the template's CPU request, which the CRD lets through."""
    edited = _echo(w, body)
    edited["metadata"]["generation"] = generation
    edited["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "two"}
    return edited


def _controller(w: World) -> Controller:
    return Controller(w.cache, w.admission, leadership=None, kube=w.kube)  # type: ignore[arg-type]


async def test_an_admitted_job_whose_edit_cannot_be_read_is_still_counted_in_its_queue() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    a = await _running(w)
    assert w.cache.upsert_job(_unreadable_edit(w, a)) is None
    assert CPU_FIELD in w.cache.invalid_jobs["uid-a"].error
    w.cache.upsert_queue(gpu_queue("team-a", 8, weight=2))  # any queue edit (or a new leader) rebuilds the tree
    w.submit(make_job_body("b", replicas=1, gpus=8, created="2025-01-01T00:00:05Z"))
    [b] = await w.cycle()
    assert (b.job, b.result, b.reason) == ("team-a/b", AdmitResult.QUEUED, WaitReason.QUOTA_EXHAUSTED), b
    assert "uid-a" in w.quota.tree and "uid-b" not in w.quota.tree
    assert [job.uid for job in w.cache.holding()] == ["uid-a"]


async def test_a_running_job_whose_edit_cannot_be_read_is_told_by_an_event_and_keeps_its_phase() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    a = await _running(w)
    w.cache.upsert_job(_unreadable_edit(w, a))
    writes = len(w.kube.status["team-a/a"])
    controller = _controller(w)
    await controller.step()
    await w.admission.settle()
    # Its pods run: no Unschedulable/InvalidSpec over it, and no other status write either ...
    assert len(w.kube.status["team-a/a"]) == writes and _echo(w, a)["status"]["phase"] == "Running"
    # ... but a Warning Event that names the field and says what the operator does meanwhile.
    [event] = [e for e in w.kube.events if e[:2] == ("GPUJob/team-a/a", "InvalidSpec")]
    assert event[3] and CPU_FIELD in event[2] and "as generation 1" in event[2], event
    await controller.step()  # once per spec and error
    assert len([e for e in w.kube.events if e[:2] == ("GPUJob/team-a/a", "InvalidSpec")]) == 1


async def test_a_failed_pod_of_an_unreadable_running_job_is_still_handled() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    a = await _running(w)
    w.cache.upsert_job(_unreadable_edit(w, a))
    pod = w.kube.pods()[0]
    w.see_pod({**pod, "status": {"phase": "Failed"}, "spec": {**pod["spec"], "nodeName": "n1"}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert ("Pod", "team-a", "a-0") in w.kube.deleted
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"], status["restarts"]) == ("Queued", "GangRestarting", 1), status
    assert "uid-a" not in w.quota.tree
    # Requeued while its spec is unreadable: it is not admitted again as its old spec ...
    w.drop_deleted_pods()
    assert await w.cycle() == [] and w.kube.pods() == []
    # ... and once the requeue is echoed it holds nothing, so it is reported Unschedulable like any
    # unreadable waiting job (its Event came first, while it ran).
    w.cache.upsert_job(_unreadable_edit(w, a))
    assert w.cache.job("uid-a") is None
    await _controller(w).step()
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"]) == ("Unschedulable", "InvalidSpec"), status


async def test_fixing_the_spec_of_an_unreadable_running_job_resumes_it_normally() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    a = await _running(w)
    controller = _controller(w)
    w.cache.upsert_job(_unreadable_edit(w, a))
    await controller.step()
    await w.admission.settle()
    w.cache.assumed.clear()  # as a new leader would have it: only what the API says
    fixed = _echo(w, a)
    fixed["metadata"]["generation"] = 3
    assert w.cache.upsert_job(fixed) is not None and "uid-a" not in w.cache.invalid_jobs
    job = w.cache.job("uid-a")
    assert job is not None and job.phase.value == "Running" and job.generation == 3
    # Still counted after a rebuild, not waiting, its pod untouched, and the next job waits for its quota.
    w.cache.upsert_queue(gpu_queue("team-a", 8, weight=2))
    w.submit(make_job_body("b", replicas=1, gpus=8, created="2025-01-01T00:00:05Z"))
    await controller.step()
    await w.admission.settle()
    assert "uid-a" in w.quota.tree and "uid-b" not in w.quota.tree
    assert not any(j.uid == "uid-a" for j in w.cache.pending())
    assert ("Pod", "team-a", "a-0") not in w.kube.deleted
    assert w.last_status("team-a/a")["phase"] == "Running"
    # And supervised as any job: its pod fails, the gang is restarted.
    pod = w.kube.pods()[0]
    w.see_pod({**pod, "status": {"phase": "Failed"}, "spec": {**pod["spec"], "nodeName": "n1"}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/a")["reason"] == "GangRestarting"


async def test_deleting_an_unreadable_running_job_frees_its_quota() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    a = await _running(w)
    w.cache.upsert_job(_unreadable_edit(w, a))
    w.delete_job("uid-a")  # the user deletes it; the garbage collector deletes its pod
    assert "uid-a" in w.cache.deleted
    await w.cycle()
    assert w.holds_nothing("uid-a")
    w.submit(make_job_body("b", replicas=1, gpus=8, created="2025-01-01T00:00:09Z"))
    [b] = await w.cycle()
    assert b.result is AdmitResult.ADMITTED, b


async def test_deleting_a_job_first_seen_unreadable_releases_what_it_may_hold() -> None:
    w = World({"team-a": 8}, {"n1": 8})
    bad = make_job_body("old", replicas=1, gpus=8)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "two"}
    assert w.cache.upsert_job(bad) is None
    w.cache.remove_job("uid-old")
    assert w.cache.deleted == {"uid-old"} and not w.cache.invalid_jobs


async def test_a_holding_job_never_read_keeps_its_phase_and_a_finished_one_its_outcome() -> None:
    """An operator upgraded over objects its model refuses has no readable view of them to keep: it
    says so by an Event, never by moving a running (or finished) job to Unschedulable."""
    w = World({"team-a": 8}, {"n1": 8})
    for name, phase in (("running", "Running"), ("done", "Succeeded")):
        body = make_job_body(name, replicas=1, gpus=8, status={"phase": phase, "admittedAt": "2025-01-01T00:00:01Z"})
        body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "two"}
        assert w.cache.upsert_job(body) is None
    await _controller(w).step()
    assert "team-a/running" not in w.kube.status and "team-a/done" not in w.kube.status
    events = {e[0]: e for e in w.kube.events if e[1] == "InvalidSpec"}
    assert "neither counts its quota nor supervises" in events["GPUJob/team-a/running"][2]
    assert "has succeeded" in events["GPUJob/team-a/done"][2]


def test_an_unreadable_job_kept_for_an_admission_that_was_not_recorded_is_reported_as_waiting() -> None:
    """The user's edit races the admission: the fenced write is refused (the edit moved the job's
    resourceVersion), the assumption goes, and no echo will say the job holds nothing."""
    cache = ClusterCache()
    body = make_job_body("a", replicas=1, gpus=8, status={"phase": "Queued"})
    view = cache.upsert_job(body)
    assert view is not None
    cache.assume(view, {"phase": "Admitted", "admittedAt": "2025-01-01T00:00:01Z"})
    edited = copy.deepcopy(body)
    edited["metadata"]["generation"] = 2
    edited["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "two"}
    assert cache.upsert_job(edited) is None
    assert cache.job("uid-a") is not None and cache.invalid_jobs["uid-a"].leave_phase  # held, as assumed
    cache.forget("uid-a")
    assert cache.job("uid-a") is None and cache.pending() == []
    invalid = cache.invalid_jobs["uid-a"]
    assert (invalid.leave_phase, invalid.kept_generation, invalid.generation) == (False, None, 2)
