"""A GPUJob whose ``spec.priorityClassName`` names no PriorityClass waits, not admissible, and says why.

The operator writes the class on every pod it creates, and the API server refuses a pod whose class
does not exist ("no PriorityClass with name X was found"): the job used to be admitted as priority 0
(preempting others on the way), its quota and GPUs taken for pods that could never be created. Now it
waits Unschedulable with reason ``PriorityClassNotFound``, naming the field and the value, and the
class's creation lets it in without a restart (``operator/_cache.py``, ``waiting_on_priority_class``).
"""

from __future__ import annotations

from kubegang.admission import AdmitResult
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._controller import Controller
from kubegang.operator._types import WaitReason

from .conftest import LOWER_PRIORITY, World, make_job_body


def _controller(w: World) -> Controller:
    return Controller(w.cache, w.admission, leadership=None, kube=w.kube)  # type: ignore[arg-type]


async def test_a_job_naming_a_missing_priority_class_waits_and_is_admitted_once_the_class_is_created() -> None:
    w = World({"team-a": 16}, {"n1": 8, "n2": 8})
    w.cache.set_priority("batch", 10)
    w.cache.set_priority("serving", 1000)
    w.submit(make_job_body("train", replicas=1, gpus=8, priorityClassName="urgent"))
    controller = _controller(w)
    await controller.step()
    await w.admission.settle()
    assert w.kube.pods() == [] and "uid-train" not in w.quota.tree and w.ledger.snapshot()["reservations"] == {}
    status = w.last_status("team-a/train")
    assert (status["phase"], status["reason"]) == ("Unschedulable", WaitReason.PRIORITY_CLASS_NOT_FOUND.value)
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["status"] == "True" and cond["observedGeneration"] == 1, cond
    assert cond["message"].startswith("spec.priorityClassName: no PriorityClass named 'urgent' "
                                      "(PriorityClasses: batch, serving)"), cond
    assert [e[3] for e in w.kube.events if e[:2] == ("GPUJob/team-a/train", "PriorityClassNotFound")] == [True]
    # Written once: neither a later step nor the report's echo writes it again.
    writes = len(w.kube.status["team-a/train"])
    w.cache.upsert_job(make_job_body("train", replicas=1, gpus=8, priorityClassName="urgent", status=status))
    await controller.step()
    assert len(w.kube.status["team-a/train"]) == writes

    # The class is created: the watch's event wakes the leader, and the next step admits the job.
    w.cache.wake.clear()
    w.cache.set_priority("urgent", 100)
    assert w.cache.wake.is_set()
    await controller.step()
    await w.admission.settle()
    assert w.last_status("team-a/train")["phase"] == "Admitted"
    [pod] = w.kube.pods()
    assert pod["spec"]["priorityClassName"] == "urgent"
    cond = get_condition(w.last_status("team-a/train")["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["status"] == "False", cond  # the admission clears the report


async def test_a_job_naming_a_missing_priority_class_preempts_nobody() -> None:
    w = World({"team-a": 8}, {"n1": 8}, preemption=LOWER_PRIORITY)
    w.submit(make_job_body("low", replicas=1, gpus=8, priority=-5))
    [low] = await w.cycle()
    assert low.result is AdmitResult.ADMITTED
    w.echo_pods("Running")
    w.submit(make_job_body("ghost", replicas=1, gpus=8, priorityClassName="urgent", created="2025-01-01T00:01:00Z"))
    assert await w.cycle() == []  # not a candidate: it neither waits in the queue nor evicts "low"
    assert not any(kind == "Pod" for kind, _, _ in w.kube.deleted) and "uid-low" in w.quota.tree
    [ghost] = w.cache.waiting_on_priority_class()
    assert (ghost.uid, ghost.reason) == ("uid-ghost", WaitReason.PRIORITY_CLASS_NOT_FOUND)


async def test_a_deleted_class_stops_the_admission_of_its_waiting_jobs_only() -> None:
    w = World({"team-a": 8}, {"n1": 8, "n2": 8})
    w.cache.set_priority("urgent", 100)
    w.submit(make_job_body("running", replicas=1, gpus=8, priorityClassName="urgent"))
    await w.cycle()
    w.echo_pods("Running")
    w.submit(make_job_body("waiting", replicas=1, gpus=8, priorityClassName="urgent",
                           created="2025-01-01T00:01:00Z"))
    w.cache.set_priority("urgent", None)
    assert [j.uid for j in w.cache.waiting_on_priority_class()] == ["uid-waiting"]
    assert [j.uid for j in w.cache.holding()] == ["uid-running"]  # its pods exist: it keeps running
    assert w.cache.pending() == []


def test_the_report_names_how_many_classes_exist_when_they_are_many() -> None:
    cache = ClusterCache()
    for i in range(12):
        cache.set_priority(f"class-{i:02}", i)
    cache.upsert_job(make_job_body("train", priorityClassName="nope"))
    [report] = cache.waiting_on_priority_class()
    assert "no PriorityClass named 'nope' (12 exist: kubectl get priorityclasses)" in report.error, report.error
    assert cache.pending() == []


def test_priority_classes_not_listed_are_not_checked() -> None:
    """``kubectl gang`` run by a user who may not list PriorityClasses takes the name on trust."""
    cache = ClusterCache(priority_classes_listed=False)
    cache.upsert_job(make_job_body("train", priorityClassName="urgent"))
    assert [j.uid for j in cache.pending()] == ["uid-train"] and cache.waiting_on_priority_class() == []
