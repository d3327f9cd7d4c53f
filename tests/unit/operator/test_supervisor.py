from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.operator._conditions import CondType, get_condition
from kubegang.operator._extender_placement import gang_request
from kubegang.operator._lifecycle import Action
from kubegang.operator._supervisor import READY_REPORT_AFTER_SECONDS
from kubegang.placement import Placement

NODES = {f"node-{i}": 8 for i in range(8)}
LEAVES = {node: f"leaf-{i // 4}" for i, node in enumerate(NODES)}  # two leaf switches of 4 nodes


async def admitted_world(make_world: Any, job_body: Any, **spec: Any) -> Any:
    w = make_world({"team-a": 64}, NODES, leaves=LEAVES)
    job = w.submit(job_body("train", replicas=3, gpus=8, framework="torchrun", **spec))
    await w.cycle()
    return w, job


RESTART_REASONS = ("GangRestarting", "GangTimeout", "GangDisplaced")
"""Every value of kubegang_gang_restarts_total's ``reason`` (docs/metrics.md)."""


def restarts() -> dict[str, float]:
    """kubegang_gang_restarts_total per reason, 0 for a series not there yet."""
    from kubegang.operator._metrics import REGISTRY

    return {reason: REGISTRY.get_sample_value("kubegang_gang_restarts_total", {"reason": reason}) or 0.0
            for reason in RESTART_REASONS}


def counted(before: dict[str, float], **reasons: int) -> dict[str, float]:
    """``before`` with ``reasons`` added (what kubegang_gang_restarts_total should read after)."""
    return {reason: value + reasons.get(reason, 0) for reason, value in before.items()}


def _nodes(w: Any, prefix: str) -> set[str]:
    """The nodes the created pods named ``prefix-*`` are pinned to."""
    return {p["metadata"]["annotations"]["kubegang.io/node"] for p in w.kube.pods()
            if p["metadata"]["name"].startswith(f"{prefix}-")}


async def test_failed_worker_restarts_whole_gang_preferring_its_domain(make_world: Any, job_body: Any) -> None:
    w = make_world({"team-a": 64}, NODES, leaves=LEAVES)
    # A gang pinned to leaf-0 leaves room there for 2 nodes only: train (3 nodes) is placed in leaf-1.
    filler = job_body("filler", replicas=2, gpus=8, created="2024-12-31T00:00:00Z")
    filler["spec"]["template"]["spec"]["nodeSelector"] = {"kubegang.io/leaf": "leaf-0"}
    w.submit(filler)
    job = w.submit(job_body("train", replicas=3, gpus=8, framework="torchrun"))
    await w.cycle()
    assert w.last_status("team-a/train")["placement"]["domain"] == "leaf-1"
    first_nodes = _nodes(w, "train")
    assert {LEAVES[n] for n in first_nodes} == {"leaf-1"}
    w.echo_pods()
    await w.supervise(w.cache.job(job.uid))
    assert w.last_status("team-a/train")["phase"] == "Running"
    w.delete_job("uid-filler")  # leaf-0 is free again
    await w.cycle()

    failed = next(p for p in w.kube.pods() if p["metadata"]["name"] == "train-1")
    w.see_pod(
        {
            **failed,
            "spec": {**failed["spec"], "nodeName": failed["metadata"]["annotations"]["kubegang.io/node"]},
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
            },
        }
    )
    before = restarts()
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.RESTART
    assert restarts() == counted(before, GangRestarting=1)  # a pod failure: {reason="GangRestarting"}
    assert {n for k, _, n in w.kube.deleted if k == "Pod"} >= {"train-0", "train-1", "train-2"}
    status = w.last_status("team-a/train")
    assert (status["phase"], status["restarts"], status["admittedAt"]) == ("Queued", 1, None)
    queued = get_condition(status["conditions"], CondType.QUEUED)
    assert queued is not None and queued["reason"] == "GangRestarting" == status["reason"], status  # operator.md
    assert "worker 1 failed (exit code 1)" in queued["message"], queued
    assert job.uid not in w.quota.tree and w.ledger.reservation_count == 0

    # Re-admission waits until the old pods are gone, then prefers the same domain and relabels pods.
    assert await w.cycle() == []
    w.drop_deleted_pods()
    assert w.holds_nothing(job.uid)
    w.kube.objects.clear()
    # With the whole cluster free, a plan without preference would take leaf-0: the preference decides.
    unpreferred = w.ledger.plan(gang_request(w.cache.job(job.uid)))
    assert isinstance(unpreferred, Placement) and unpreferred.domain == "leaf-0"
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert w.client.last("plan").preferred_domain == "leaf-1"
    assert w.last_status("team-a/train")["placement"]["domain"] == "leaf-1"
    assert {LEAVES[n] for n in _nodes(w, "train")} == {"leaf-1"}
    [attempt] = {p["metadata"]["labels"]["kubegang.io/attempt"] for p in w.kube.pods()}
    assert attempt == w.cache.job(job.uid).attempt != "none"


async def test_restart_limit_fails_job_with_reason(make_world: Any, job_body: Any) -> None:
    w, job = await admitted_world(make_world, job_body, restartLimit=0)
    w.echo_pods()
    pod = next(p for p in w.kube.pods() if p["metadata"]["name"] == "train-2")
    w.see_pod(
        {
            **pod,
            "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
            "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]},
        }
    )
    before = restarts()
    await w.supervise(w.cache.job(job.uid))
    assert restarts() == before  # failed for good: not a restart
    status = w.last_status("team-a/train")
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "restartLimit 0 reached: worker 2 failed (exit code 1)"
    assert status["finishedAt"]
    assert job.uid not in w.quota.tree and w.ledger.reservation_count == 0
    w.drop_deleted_pods()
    assert w.holds_nothing(job.uid)


async def test_gang_timeout_requeues_with_unbound_nodes_excluded(make_world: Any, job_body: Any) -> None:
    w, job = await admitted_world(make_world, job_body, gangTimeoutSeconds=10)
    first_nodes = _nodes(w, "train")
    w.echo_pods(phase="Pending", bound=False)
    w.admission.clock = lambda: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=11)
    before = restarts()
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.TIMEOUT
    assert restarts() == counted(before, GangTimeout=1)  # what the chart's KubegangGangTimedOut matches
    status = w.last_status("team-a/train")
    assert status["phase"] == "Queued"
    assert status["excludedNodes"] == sorted(first_nodes)
    assert status.get("restarts") is None  # a timeout is not a failure of the workload
    w.drop_deleted_pods()
    w.kube.objects.clear()
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert w.client.last("plan").excluded_nodes == first_nodes
    assert _nodes(w, "train").isdisjoint(first_nodes)


async def test_new_leader_finishes_an_admission_without_duplicates(make_world: Any, job_body: Any) -> None:
    w, job = await admitted_world(make_world, job_body)
    created = len(w.kube.pods())
    # A leader died after step 4: the status records the placement but not podsCreatedAt, no pods seen.
    view = w.cache.job(job.uid)
    w.cache.assumed.clear()
    w.cache.upsert_job(
        {
            **job_body("train", replicas=3, gpus=8, framework="torchrun"),
            "status": {**view.status, "podsCreatedAt": None},
        }
    )
    await w.supervise(w.cache.job(job.uid))
    assert len(w.kube.pods()) == created == 3
    finished = w.cache.job(job.uid)
    assert finished is not None and finished.status["podsCreatedAt"]
    # podsCreatedAt goes out with the gang's next status write.
    w.echo_pods()
    await w.supervise(w.cache.job(job.uid))
    status = w.last_status("team-a/train")
    assert status["phase"] == "Running" and status["podsCreatedAt"] == finished.status["podsCreatedAt"]


async def test_new_leader_creates_only_the_missing_pods_of_a_half_created_gang(
    make_world: Any, job_body: Any
) -> None:
    w, job = await admitted_world(make_world, job_body)
    # The old leader died mid-creation: one pod exists, two were never created, podsCreatedAt unwritten.
    view = w.cache.job(job.uid)
    w.cache.assumed.clear()
    w.cache.upsert_job(
        {
            **job_body("train", replicas=3, gpus=8, framework="torchrun"),
            "status": {**view.status, "podsCreatedAt": None},
        }
    )
    for name in ("train-1", "train-2"):
        del w.kube.objects[("Pod", "team-a", name)]
    w.echo_pods(phase="Pending", bound=False)
    await w.supervise(w.cache.job(job.uid))
    assert sorted(p["metadata"]["name"] for p in w.kube.pods()) == ["train-0", "train-1", "train-2"]


async def test_gang_timeout_counts_from_admission_when_pod_creation_time_was_not_written(
    make_world: Any, job_body: Any
) -> None:
    w, job = await admitted_world(make_world, job_body, gangTimeoutSeconds=10)
    view = w.cache.job(job.uid)
    w.cache.assumed.clear()
    w.cache.upsert_job(
        {
            **job_body("train", replicas=3, gpus=8, framework="torchrun", gangTimeoutSeconds=10),
            "status": {**view.status, "podsCreatedAt": None},
        }
    )
    w.echo_pods(phase="Pending", bound=False)
    w.admission.clock = lambda: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=11)
    before = restarts()
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.TIMEOUT
    assert restarts() == counted(before, GangTimeout=1)  # what the chart's KubegangGangTimedOut matches


async def test_suspend_releases_everything(make_world: Any, job_body: Any) -> None:
    w, job = await admitted_world(make_world, job_body)
    w.cache.assumed.clear()
    body = job_body("train", replicas=3, gpus=8, framework="torchrun", suspend=True)
    body["metadata"]["generation"] = 2  # the edit that suspends it
    w.cache.upsert_job({**body, "status": w.last_status("team-a/train")})
    await w.supervise(w.cache.job(job.uid))
    assert w.last_status("team-a/train")["phase"] == "Suspended"
    assert w.kube.status["team-a/train"][-1]["observedGeneration"] == 2  # the write acknowledges the edit
    assert w.holds_nothing(job.uid) and w.held_gpus() == {}
    assert w.kube.pods() == []


async def test_a_gang_that_forms_in_seconds_writes_its_ready_count_once_with_running(
    make_world: Any, job_body: Any
) -> None:
    w, job = await admitted_world(make_world, job_body)
    writes = len(w.kube.status[job.key])                      # the Admitted record
    pods = sorted(w.kube.pods(), key=lambda p: p["metadata"]["name"])

    def run(some: list[dict[str, Any]]) -> None:
        for pod in some:
            w.see_pod({**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
                       "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    run(pods[:2])                                             # two of three ready, just created
    await w.supervise(w.cache.job(job.uid))
    assert len(w.kube.status[job.key]) == writes              # no write of the partial count
    real = w.admission.clock
    w.admission.clock = lambda: real() + dt.timedelta(seconds=READY_REPORT_AFTER_SECONDS - 1)
    await w.supervise(w.cache.job(job.uid))
    assert len(w.kube.status[job.key]) == writes              # not yet
    w.admission.clock = lambda: real() + dt.timedelta(seconds=READY_REPORT_AFTER_SECONDS + 1)
    await w.supervise(w.cache.job(job.uid))                   # still forming: say how far it got
    created = w.cache.job(job.uid).pods_created_at
    assert w.kube.status[job.key][writes:] == [{"readyReplicas": 2, "podsCreatedAt": created, "observedGeneration": 1}]
    w.admission.clock = real
    run(pods[2:])
    await w.supervise(w.cache.job(job.uid))
    last = w.kube.status[job.key][-1]
    assert last["phase"] == "Running" and last["readyReplicas"] == 3


async def test_the_ready_count_of_a_quick_gang_travels_only_with_its_running_write(
    make_world: Any, job_body: Any
) -> None:
    w, job = await admitted_world(make_world, job_body)
    w.echo_pods("Running")
    for pod in w.kube.pods():  # ready as kwok reports them
        body = {**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        w.see_pod(body)
    await w.supervise(w.cache.job(job.uid))
    phases = [p.get("phase") for p in w.kube.status[job.key]]
    assert phases == ["Admitted", "Running"]                  # one write per phase transition
    assert w.kube.status[job.key][-1]["readyReplicas"] == 3


async def test_a_gang_that_finished_before_a_pass_saw_it_running_still_records_when_its_pods_were_made(
    make_world: Any, job_body: Any
) -> None:
    w, job = await admitted_world(make_world, job_body)
    created = w.cache.job(job.uid).pods_created_at
    assert created and w.kube.status[job.key][-1].get("podsCreatedAt") is None  # assumed, not yet written
    for pod in w.kube.pods():
        w.see_pod({**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
                   "status": {"phase": "Succeeded"}})
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.SUCCEED
    last = w.kube.status[job.key][-1]
    assert (last["phase"], last["podsCreatedAt"]) == ("Succeeded", created), last
