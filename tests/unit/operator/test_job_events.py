"""The Events the supervisor records on a GPUJob (docs/operator.md, "Events"): a Normal Event when a
gang succeeds or is suspended, a Warning when it fails; each names the reason its condition has."""

from __future__ import annotations

from typing import Any

from kubegang.operator._lifecycle import Action

NODES = {f"node-{i}": 8 for i in range(4)}


async def _admitted(make_world: Any, job_body: Any, **spec: Any) -> tuple[Any, Any]:
    w = make_world({"team-a": 32}, NODES)
    job = w.submit(job_body("train", replicas=3, gpus=8, **spec))
    await w.cycle()
    assert w.last_status("team-a/train")["phase"] == "Admitted"
    return w, job


def _bound(pod: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
            "status": status}


async def test_a_gang_that_succeeds_gets_one_normal_event_all_replicas_succeeded(
    make_world: Any, job_body: Any
) -> None:
    w, job = await _admitted(make_world, job_body)
    assert w.kube.events == []                        # an admission records no Event
    for pod in w.kube.pods():
        w.see_pod(_bound(pod, phase="Succeeded"))
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.SUCCEED
    assert w.kube.events == [("team-a/train", "AllReplicasSucceeded", "all 3 replicas succeeded", False)]


async def test_a_gang_that_fails_for_good_gets_a_warning_event(make_world: Any, job_body: Any) -> None:
    w, job = await _admitted(make_world, job_body, restartLimit=0)
    w.echo_pods()
    pod = next(p for p in w.kube.pods() if p["metadata"]["name"] == "train-1")
    w.see_pod(_bound(pod, phase="Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 2}}}]))
    await w.supervise(w.cache.job(job.uid))
    assert w.kube.events == [("team-a/train", "RestartLimitReached",
                              "restartLimit 0 reached: worker 1 failed (exit code 2)", True)]


async def test_suspending_a_running_gang_gets_one_normal_event_suspended(make_world: Any, job_body: Any) -> None:
    w, job = await _admitted(make_world, job_body)
    w.echo_pods()
    await w.supervise(w.cache.job(job.uid))
    assert w.last_status("team-a/train")["phase"] == "Running" and w.kube.events == []
    w.cache.assumed.clear()
    body = job_body("train", replicas=3, gpus=8, suspend=True)
    body["metadata"]["generation"] = 2                # the edit that suspends it
    w.cache.upsert_job({**body, "status": w.last_status("team-a/train")})
    decision = await w.supervise(w.cache.job(job.uid))
    assert decision.action is Action.SUSPEND
    assert w.kube.events == [("team-a/train", "Suspended",
                              "spec.suspend is true: the gang's pods, reservation and quota are released", False)]
