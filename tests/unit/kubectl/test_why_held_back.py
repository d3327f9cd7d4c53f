"""``kubectl gang why`` for a job the operator leaves out of its cycle (``ClusterCache.held_back``): a pod
group whose controller has not made all its pods (``WaitingForPods``) and a gang whose earlier attempt's
pods are stuck Terminating (``PreviousPodsTerminating``). The page says what the operator says (the
reason and its words), once, and gives no "could start" estimate: the job is not admitted until that
is resolved, whatever quota and GPUs say."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.kubectl import ClusterObjects, Engine, why_report
from kubegang.kubectl._why import why_lines

from .conftest import cluster, job, queue
from .test_why_text import NOW, Plain

FORMING = ("waiting for 2 more pods of pod group workers (label kubegang.io/group-size=4; 2 exist, not counting "
           "finished or terminating ones): it is admitted once all 4 exist")
STUCK = ("waiting for pod stuck-0 of the previous attempt to finish terminating: its grace period ended at "
         "2026-12-01T10:00:00Z, but finalizer example.com/hold keeps it (its controller has not removed it); "
         "the gang is placed again once it is gone")


def _runner() -> dict[str, Any]:
    """A gang on n3 that ends at 10:40 (started 10:25, runs 15 minutes): an estimate could count on it."""
    body = job("run", "a", "big", 1, phase="Running", reason="Running", on=["n3"], created="2026-12-01T10:25:00Z")
    body["spec"]["template"]["metadata"] = {"annotations": {"kubegang.io/fake-runtime": "15m"}}
    return body


def _group_pod(i: int) -> dict[str, Any]:
    """A pod of pod group ``workers`` (4 pods, as its label says) made by the user's controller."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"workers-{i}", "namespace": "a", "uid": f"pod-workers-{i}",
                         "labels": {"kubegang.io/pod-group": "workers", "kubegang.io/group-size": "4",
                                    "kubegang.io/queue": "big"}},
            "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending"}}


def _forming(**condition: Any) -> ClusterObjects:
    """Pod group ``workers`` (its GPUJob ``podgroup-workers``, 4 x 8 GPUs) with 2 of its 4 pods."""
    group = job("podgroup-workers", "a", "big", 4, podSource={"kind": "PodGroup", "name": "workers"}, **condition)
    objects = cluster(_runner(), group, queues=[queue("big", 64)])
    objects.pods += [_group_pod(0), _group_pod(1)]
    return objects


def _stuck() -> ClusterObjects:
    """Gang ``stuck`` requeued for a restart, its earlier pod still Terminating 30 minutes past its grace."""
    gang = job("stuck", "a", "big", 1, reason="GangRestarting", message="restarting the whole gang")
    objects = cluster(_runner(), gang, queues=[queue("big", 64)])
    objects.pods.append({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stuck-0", "namespace": "a", "uid": "pod-stuck-0",
                     "deletionTimestamp": "2026-12-01T10:00:00Z", "finalizers": ["example.com/hold"],
                     "labels": {"kubegang.io/job-uid": "uid-stuck", "kubegang.io/job-name": "stuck",
                                "kubegang.io/replica-index": "0"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "trainer:1",
                                                   "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"}})
    return objects


def _report(objects: ClusterObjects, name: str) -> dict[str, Any]:
    engine = Engine(objects)
    view = engine.find("a", name)
    assert view is not None
    return why_report(engine, view, NOW)


def _line(lines: list[str], start: str) -> str:
    found = [line for line in lines if line.startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def test_a_pod_group_missing_pods_is_not_considered_and_gets_no_estimate() -> None:
    report = _report(_forming(), "podgroup-workers")
    assert report["heldBack"] == {"reason": "WaitingForPods", "message": FORMING, "missingPods": 2, "replicas": 4}
    assert report["nextCycle"] == {"considered": False, "result": "Queued", "reason": "WaitingForPods",
                                   "message": FORMING}
    assert report["estimate"] == {"known": False, "why": "it is not admitted until the 2 missing pods of its pod "
                                  "group exist (2 of 4 do)"}
    lines = why_lines(report, Plain())
    assert _line(lines, "Next cycle:") == f"Next cycle: not considered (WaitingForPods): {FORMING}"
    assert _line(lines, "Estimate:") == ("Estimate: none (it is not admitted until the 2 missing pods of its pod "
                                         "group exist (2 of 4 do))")
    assert not any("could start" in line or "would not be a head" in line for line in lines), lines


def test_a_pod_group_whose_condition_says_it_already_says_it_once() -> None:
    report = _report(_forming(reason="WaitingForPods", message=FORMING), "podgroup-workers")
    lines = why_lines(report, Plain())
    assert lines[:2] == ["GPUJob a/podgroup-workers: Queued (WaitingForPods), 32 GPUs, priority 0, queue big",
                         f"  {FORMING}"]
    assert _line(lines, "Next cycle:") == "Next cycle: not considered (WaitingForPods), as above"
    assert sum(FORMING in line for line in lines) == 1, lines


def test_a_gang_waiting_on_a_stuck_pod_names_the_pod_and_gets_no_estimate() -> None:
    report = _report(_stuck(), "stuck")
    assert report["heldBack"] == {"reason": "PreviousPodsTerminating", "message": STUCK, "pods": ["stuck-0"]}
    assert report["nextCycle"] == {"considered": False, "result": "Queued", "reason": "PreviousPodsTerminating",
                                   "message": STUCK}
    assert report["estimate"] == {"known": False, "why": "it is not admitted until pod stuck-0 of its previous "
                                  "attempt is gone"}
    lines = why_lines(report, Plain())
    assert lines[1] == "  restarting the whole gang"
    assert _line(lines, "Next cycle:") == f"Next cycle: not considered (PreviousPodsTerminating): {STUCK}"
    assert _line(lines, "Estimate:") == ("Estimate: none (it is not admitted until pod stuck-0 of its previous "
                                         "attempt is gone)")
    assert not any("could start" in line or "would not be a head" in line for line in lines), lines


def test_a_gang_whose_old_pod_is_within_its_grace_is_not_held_back() -> None:
    """The operator's grace (``TERMINATING_OVERDUE_SECONDS``): a pod that ends in time is a requeue's
    normal end, not a report."""
    engine = Engine(_stuck())
    view = engine.find("a", "stuck")
    assert view is not None
    early = why_report(engine, view, dt.datetime(2026, 12, 1, 10, 0, 10, tzinfo=dt.UTC))
    assert "heldBack" not in early
    assert "heldBack" in why_report(engine, view, NOW)


def test_a_held_back_job_says_so_where_the_user_may_not_list_nodes() -> None:
    """Placement is unknown then, but what holds the job back does not depend on it."""
    objects = _stuck()
    objects.nodes, objects.hidden["nodes"] = [], "forbidden"
    report = _report(objects, "stuck")
    assert report["placementNow"] == {"unknown": "nodes are not visible to you (forbidden)"}
    assert report["nextCycle"]["reason"] == "PreviousPodsTerminating"
    lines = why_lines(report, Plain())
    assert _line(lines, "Next cycle:") == f"Next cycle: not considered (PreviousPodsTerminating): {STUCK}"
    assert _line(lines, "Estimate:").startswith("Estimate: none (it is not admitted until pod stuck-0")
