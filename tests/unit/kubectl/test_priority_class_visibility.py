"""A job's ``spec.priorityClassName`` as ``kubectl gang`` explains it, by what the user may read.

The operator lists every PriorityClass and holds back a job naming one that does not exist
(``PriorityClassNotFound``). A user who may not list PriorityClasses has none in the plugin's cache:
taking that for "none exists" made every job with a priorityClassName look not admissible, and hid
its real reason (quota, GPUs). Where they are readable, a missing class is said as such."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.kubectl import ClusterObjects, Engine, why_report
from kubegang.kubectl._render import Style
from kubegang.kubectl._why import why_lines

from .conftest import cluster, job

NOW = dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)
CLASSES = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
           for n, v in (("batch", 10), ("serving", 1000))]


class Plain(Style):
    def __init__(self) -> None:
        self.on = False


def _objects(class_name: str) -> ClusterObjects:
    """team-a (16 of its own, 16 to borrow) runs 16 GPUs; ``first`` asks 24 more: quota refuses it."""
    running = job("run", "a", "team-a", 2, phase="Running", reason="Running", on=["n0", "n1"])
    return cluster(running, job("first", "a", "team-a", 3, priorityClassName=class_name))


def _why(objects: ClusterObjects) -> tuple[dict[str, Any], list[str]]:
    engine = Engine(objects)
    view = engine.find("a", "first")
    assert view is not None
    report = why_report(engine, view, NOW)
    return report, why_lines(report, Plain())


def test_a_user_who_cannot_list_priority_classes_sees_a_job_s_real_reason() -> None:
    objects = _objects("serving")
    objects.hidden = {"priorityclasses": 'priorityclasses.scheduling.k8s.io is forbidden: User "dev" cannot list'}
    report, lines = _why(objects)
    assert "priorityClassNotFound" not in report
    assert report["position"]["inQueue"] == 1
    assert report["nextCycle"]["considered"] is True
    assert (report["nextCycle"]["result"], report["nextCycle"]["reason"]) == ("Queued", "QuotaExhausted")
    assert report["quota"]["fits"] is False
    assert not any("PriorityClass" in line for line in lines if not line.startswith("Note:")), lines
    assert any(line.startswith("Next cycle: Queued (QuotaExhausted): waiting for quota in queue team-a")
               for line in lines), lines
    assert "Note: priorityclasses: priorityclasses.scheduling.k8s.io is forbidden" in "\n".join(lines)


def test_with_priority_classes_readable_a_job_naming_a_missing_class_is_explained_as_such() -> None:
    objects = _objects("urgent")
    objects.priority_classes = CLASSES
    report, lines = _why(objects)
    expected = "spec.priorityClassName: no PriorityClass named 'urgent' (PriorityClasses: batch, serving)"
    assert report["priorityClassNotFound"].startswith(expected)
    assert report["nextCycle"] == {"considered": False, "result": "Unschedulable",
                                   "reason": "PriorityClassNotFound", "message": report["priorityClassNotFound"]}
    assert report["estimate"]["known"] is False and "priorityClassName" in report["estimate"]["why"]
    assert any(line.startswith(f"Next cycle: not considered (PriorityClassNotFound): {expected}")
               for line in lines), lines


def test_with_priority_classes_readable_a_job_naming_an_existing_class_waits_for_its_real_reason() -> None:
    objects = _objects("serving")
    objects.priority_classes = CLASSES
    report, _ = _why(objects)
    assert "priorityClassNotFound" not in report and report["priority"] == 1000
    assert (report["nextCycle"]["result"], report["nextCycle"]["reason"]) == ("Queued", "QuotaExhausted")


def test_the_operator_s_written_report_is_not_said_twice() -> None:
    objects = _objects("urgent")
    objects.priority_classes = CLASSES
    report, _ = _why(objects)
    first = objects.jobs[1]
    first["status"] = {"phase": "Unschedulable", "reason": "PriorityClassNotFound",
                       "conditions": [{"type": "Unschedulable", "status": "True", "reason": "PriorityClassNotFound",
                                       "message": report["priorityClassNotFound"],
                                       "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
    _, lines = _why(objects)
    assert lines[0].startswith("GPUJob a/first: Unschedulable (PriorityClassNotFound)")
    assert "Next cycle: not considered (PriorityClassNotFound), as above" in lines
