"""Jobs that wait but are not offered to the admission cycle yet (``ClusterCache.pending`` leaves them out)
are told why, on the job: a pod group whose controller has not made all its pods (Queued
``WaitingForPods``, naming the group and the label or field its size comes from), and a gang whose earlier
attempt's pods are stuck terminating (Queued ``PreviousPodsTerminating``, naming the pods and what holds
them). Written once, again only when it changes (a new message at most every ``MESSAGE_REFRESH_SECONDS``),
with one Event per wait; before the grace of each (``FORMING_REPORT_SECONDS``,
``TERMINATING_OVERDUE_SECONDS``) nothing is written, so a group that forms in seconds and a requeue whose
pods end in their grace period cost no write and keep the requeue's own reason."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubegang.admission import AdmitResult, Entry
from kubegang.api import PodSourceKind, source_job_name
from kubegang.operator._cache import FORMING_REPORT_SECONDS, TERMINATING_OVERDUE_SECONDS
from kubegang.operator._conditions import Phase
from kubegang.operator._types import WaitReason

from .conftest import World, make_job_body
from .test_scheduling_groups import member, podgroup
from .test_sources import NODES, group_pod, source_job_name_for

CREATED = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
"""The creation time ``World.represented`` gives a source's GPUJob."""


def _clock(world: World, at: dt.datetime) -> list[dt.datetime]:
    now = [at]
    world.admission.clock = lambda: now[0]
    return now


def _queued(world: World, key: str) -> dict[str, Any]:
    [cond] = [c for c in world.last_status(key)["conditions"] if c["type"] == "Queued"]
    return cond


# -- a pod group with pods missing -------------------------------------------------------------------
async def test_a_pod_group_labelled_larger_than_its_pods_says_how_many_pods_it_waits_for_once() -> None:
    w = World({"team-a": 64}, NODES)
    _clock(w, CREATED + dt.timedelta(hours=1))
    for i in range(4):  # a controller with 4 replicas whose label says 40 (a typo)
        w.cache.upsert_source_pod(group_pod(i, size=40))
    await w.admission.sources.sync()
    job = w.represented(source_job_name_for("workers"))
    assert await w.cycle() == []                       # not offered to the cycle: 4 of 40 pods exist
    status = w.last_status(job.key)
    message = ("waiting for 36 more pods of pod group workers (label kubegang.io/group-size=40; 4 exist, not "
               "counting finished or terminating ones): it is admitted once all 40 exist")
    assert (status["phase"], status["reason"]) == ("Queued", "WaitingForPods")
    assert _queued(w, job.key)["message"] == message
    assert w.kube.events == [(job.key, "WaitingForPods", message, False)]

    writes = len(w.kube.status[job.key])
    for _ in range(3):                                 # nothing new: nothing written, no second Event
        await w.admission.sources.sync()
        await w.cycle()
    assert len(w.kube.status[job.key]) == writes and len(w.kube.events) == 1

    w.cache.upsert_source_pod(group_pod(4, size=40))   # one more pod: a new number, not a new reason
    await w.cycle()
    assert len(w.kube.status[job.key]) == writes       # a message refresh waits MESSAGE_REFRESH_SECONDS
    phase, reason, at = w.admission._waiting_written[job.uid]
    w.admission._waiting_written[job.uid] = (phase, reason, at - 31)  # as if 31 s had passed
    await w.cycle()
    assert len(w.kube.status[job.key]) == writes + 1
    assert _queued(w, job.key)["message"].startswith("waiting for 35 more pods of pod group workers")
    assert len(w.kube.events) == 1                     # one Event per wait


async def test_a_pod_group_that_forms_within_the_grace_writes_nothing_and_is_admitted() -> None:
    w = World({"team-a": 64}, NODES)
    now = _clock(w, CREATED + dt.timedelta(seconds=FORMING_REPORT_SECONDS - 5))
    for i in range(2):
        w.cache.upsert_source_pod(group_pod(i, size=4))
    await w.admission.sources.sync()
    job = w.represented(source_job_name_for("workers"))
    await w.cycle()
    assert job.key not in w.kube.status and w.kube.events == []  # its controller is still making them

    now[0] = CREATED + dt.timedelta(seconds=FORMING_REPORT_SECONDS + 1)
    await w.cycle()
    assert w.last_status(job.key)["reason"] == "WaitingForPods"
    assert _queued(w, job.key)["message"].startswith(
        "waiting for 2 more pods of pod group workers (label kubegang.io/group-size=4; 2 exist")

    for i in range(2, 4):
        w.cache.upsert_source_pod(group_pod(i, size=4))
    await w.cycle()
    admitted = w.cache.job(job.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED


async def test_a_native_podgroup_with_pods_missing_names_its_min_count() -> None:
    w = World({"team-a": 64}, NODES)
    _clock(w, CREATED + dt.timedelta(hours=1))
    w.cache.record_scheduling_object("PodGroup", podgroup(min_count=4, **{"kubegang.io/queue": "team-a"}))
    for i in range(3):
        w.cache.upsert_source_pod(member(i))
    await w.admission.sources.sync()
    job = w.represented(source_job_name(PodSourceKind.SCHEDULING_GROUP, "pg"))
    await w.cycle()
    assert w.last_status(job.key)["reason"] == "WaitingForPods"
    assert _queued(w, job.key)["message"] == (
        "waiting for 1 more pod of PodGroup pg (its spec.schedulingPolicy.gang.minCount is 4; 3 exist, not "
        "counting finished or terminating ones): it is admitted once all 4 exist")


async def test_an_unschedulable_pod_group_that_loses_a_pod_keeps_its_unschedulable_report() -> None:
    w = World({"team-a": 24}, NODES)                   # 4 x 8 GPUs exceed the queue's 24
    _clock(w, CREATED + dt.timedelta(hours=1))
    for i in range(4):
        w.cache.upsert_source_pod(group_pod(i))
    await w.admission.sources.sync()
    job = w.represented(source_job_name_for("workers"))
    await w.cycle()
    assert w.last_status(job.key)["reason"] == WaitReason.EXCEEDS_QUEUE_CAPACITY
    writes = len(w.kube.status[job.key])
    w.cache.remove_source_pod(group_pod(3))
    await w.cycle()
    assert len(w.kube.status[job.key]) == writes       # it can never fit as is: that report stands


# -- pods of the previous attempt stuck terminating ---------------------------------------------------
T0 = dt.datetime(2025, 1, 1, 1, tzinfo=dt.UTC)


async def _restarted(w: World) -> dict[str, Any]:
    """Gang ``a`` (2 x 8 GPUs) runs, worker 1 fails, the gang restarts; returns worker 0's pod."""
    w.submit(make_job_body("a", replicas=2, gpus=8))
    await w.cycle()
    w.echo_pods("Running")
    await w.supervisor.run_pass()
    await w.admission.settle()
    pod0, pod1 = sorted(w.kube.pods(), key=lambda p: p["metadata"]["name"])
    w.see_pod({**pod1, "status": {"phase": "Failed"}, "spec": {**pod1["spec"], "nodeName": "n2"}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert (w.last_status("team-a/a")["reason"], w.last_status("team-a/a")["restarts"]) == ("GangRestarting", 1)
    w.drop_deleted_pods()                              # worker 1 is gone; worker 0 comes back below as stuck
    return pod0


def _stuck(pod: dict[str, Any], deadline: dt.datetime, finalizers: list[str]) -> dict[str, Any]:
    meta = {**pod["metadata"], "deletionTimestamp": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if finalizers:
        meta["finalizers"] = finalizers
    return {**pod, "metadata": meta, "status": {"phase": "Running"}, "spec": {**pod["spec"], "nodeName": "n1"}}


@pytest.mark.parametrize(("finalizers", "why"), [
    (["example.com/keep"], "but finalizer example.com/keep keeps it (its controller has not removed it); "),
    ([], "but node n1 has not confirmed that it stopped (the node is down, unreachable or gone); once the node is "
         "gone for good, `kubectl delete pod -n team-a --force a-0` removes it; "),
])
async def test_a_gang_whose_previous_pod_is_stuck_terminating_says_which_pod_and_why(
        finalizers: list[str], why: str) -> None:
    w = World({"team-a": 16}, {"n1": 8, "n2": 8})
    now = _clock(w, T0)
    pod0 = await _restarted(w)
    deadline = T0 + dt.timedelta(seconds=30)           # deleted at T0 with a 30 s grace period
    w.see_pod(_stuck(pod0, deadline, finalizers))
    writes, events = len(w.kube.status["team-a/a"]), len(w.kube.events)

    now[0] = deadline + dt.timedelta(seconds=TERMINATING_OVERDUE_SECONDS - 5)
    assert await w.cycle() == []
    assert len(w.kube.status["team-a/a"]) == writes    # the normal end of a requeue: its reason stays
    assert w.last_status("team-a/a")["reason"] == "GangRestarting"

    now[0] = deadline + dt.timedelta(seconds=TERMINATING_OVERDUE_SECONDS + 1)
    await w.cycle()
    message = ("waiting for pod a-0 of the previous attempt to finish terminating: its grace period ended at "
               f"2025-01-01T01:00:30Z, {why}the gang is placed again once it is gone")
    status = w.last_status("team-a/a")
    assert (status["phase"], status["reason"], status["restarts"]) == ("Queued", "PreviousPodsTerminating", 1)
    assert _queued(w, "team-a/a")["message"] == message
    assert w.kube.events[events:] == [("team-a/a", "PreviousPodsTerminating", message, True)]

    for _ in range(3):
        await w.cycle()
    assert len(w.kube.status["team-a/a"]) == writes + 1 and len(w.kube.events) == events + 1

    w.drop_deleted_pods()                              # it is gone at last: the gang is placed again
    await w.cycle()
    again = w.cache.job("uid-a")
    assert again is not None and again.phase is Phase.ADMITTED and again.restarts == 1


async def test_several_stuck_pods_are_each_named_with_what_holds_them() -> None:
    w = World({"team-a": 16}, {"n1": 8, "n2": 8})
    now = _clock(w, T0)
    pod0 = await _restarted(w)
    deadline = T0 + dt.timedelta(seconds=30)
    w.see_pod(_stuck(pod0, deadline, ["example.com/keep"]))
    other = {**pod0, "metadata": {**pod0["metadata"], "name": "a-1"}}
    w.see_pod({**_stuck(other, deadline, []), "spec": {**other["spec"], "nodeName": "n2"}})
    now[0] = deadline + dt.timedelta(seconds=TERMINATING_OVERDUE_SECONDS)
    await w.cycle()
    assert _queued(w, "team-a/a")["message"] == (
        "waiting for pods a-0, a-1 of the previous attempt to finish terminating: their grace period ended at "
        "2025-01-01T01:00:30Z, but a-0: finalizer example.com/keep keeps it (its controller has not removed it); "
        "a-1: node n2 has not confirmed that it stopped (the node is down, unreachable or gone); once the node is "
        "gone for good, `kubectl delete pod -n team-a --force a-1` removes it; the gang is placed again once they "
        "are gone")


async def test_a_held_back_reason_is_replaced_once_the_job_waits_in_its_queue() -> None:
    """The cycle leaves a job it did not reach with its more specific reason, but not one that said why it
    was not offered to the cycle at all: its pods exist (or are gone) by then."""
    w = World({"team-a": 16}, {"n1": 8, "n2": 8})
    conditions = [{"type": "Queued", "status": "True", "reason": "WaitingForPods", "message": "36 more pods",
                   "lastTransitionTime": "2025-01-01T00:00:00Z"}]
    held = w.submit(make_job_body("a", status={"phase": "Queued", "reason": "WaitingForPods",
                                               "conditions": conditions}))
    restarted = w.submit(make_job_body("b", status={"phase": "Queued", "reason": "GangRestarting",
                                                    "conditions": [{**conditions[0], "reason": "GangRestarting"}]}))
    for job in (held, restarted):
        w.admission._report(Entry(job, AdmitResult.QUEUED, WaitReason.WAITING_IN_QUEUE, "behind team-a/c"))
    await w.admission.settle()
    assert w.last_status("team-a/a")["reason"] == "WaitingInQueue"
    assert "team-a/b" not in w.kube.status             # keeps which worker failed
