from __future__ import annotations

from typing import Any

from kubegang.operator._conditions import CondType, get_condition, is_true

NODES = {f"node-{i}": 8 for i in range(10)}  # 80 GPUs


async def test_two_sixty_percent_gangs_one_runs_whole_other_waits_with_no_pods(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 160}, NODES)
    w.submit(job_body("first", replicas=6, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("second", replicas=6, gpus=8, created="2025-01-01T00:00:01Z"))
    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/first", "Admitted"), ("team-a/second", "Queued")]
    assert sorted(p["metadata"]["name"] for p in w.kube.pods()) == [f"first-{i}" for i in range(6)]
    status = w.last_status("team-a/first")
    assert status["phase"] == "Admitted"
    assert len(status["placement"]["pods"]) == 6
    assert status["admittedAt"] and status["totalGPUs"] == 48
    # podsCreatedAt is known once the pods exist, and written with the gang's next status write.
    assert status["podsCreatedAt"] is None
    first = w.cache.job("uid-first")
    assert first is not None and first.status["podsCreatedAt"]

    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/second", "Queued")]
    second = w.last_status("team-a/second")
    cond = get_condition(second["conditions"], CondType.QUEUED)
    assert cond is not None and "waiting for GPUs: needs 6 x 8 GPUs" in cond["message"]
    assert not any(p["metadata"]["name"].startswith("second") for p in w.kube.pods())


async def test_quota_refusal_names_the_queue(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 16}, NODES, ceiling={"team-a": 64})
    w.submit(job_body("big", replicas=4, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Queued"
    assert outcome.message == "waiting for quota in queue team-a: needs 32 GPUs, 16 free"
    assert w.kube.pods() == []


async def test_job_larger_than_queue_ceiling_is_unschedulable(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 32}, NODES)
    w.submit(job_body("huge", replicas=8, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Unschedulable"
    status = w.last_status("team-a/huge")
    assert status["phase"] == "Unschedulable"
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["message"] == "needs 64 GPUs but queue team-a can never hold more than 32"
    assert any(e[1] == "ExceedsQueueCapacity" and e[3] for e in w.kube.events)


async def test_failed_pod_creation_undoes_every_step(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    w.submit(job_body("train", replicas=3, gpus=8, framework="torchrun"))
    w.kube.fail_create = "train-2"
    # Creation runs after the decision, so the cycle reports the admission; the undo follows it.
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert w.kube.pods() == []  # the pods that were created are deleted again
    assert w.placement.free == NODES and w.placement.reserved == {}
    assert w.quota.held == {}
    status = w.last_status("team-a/train")
    assert status["phase"] == "Queued" and status["admittedAt"] is None
    cond = get_condition(status["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "AdmissionFailed" and "train-2" in cond["message"]

    w.kube.fail_create = None
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert len(w.kube.pods()) == 3


async def test_preemption_evicts_only_what_is_needed_and_names_the_preemptor(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    for i in range(5):
        w.submit(job_body(f"low-{i}", replicas=2, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
        await w.cycle()
    w.echo_pods()
    assert w.quota.held.keys() == {f"uid-low-{i}" for i in range(5)}

    high = w.submit(job_body("high", replicas=3, gpus=8, created="2025-01-01T00:01:00Z"), priority=100)
    [outcome] = await w.cycle()
    assert outcome.result == "Preempting"
    evicted = {k for k in w.kube.status if "Preempted" in str(w.last_status(k).get("conditions"))}
    assert evicted == {"team-a/low-0", "team-a/low-1"}  # 2 gangs free 32 GPUs; 24 needed
    victim = w.last_status("team-a/low-0")
    assert victim["phase"] == "Queued"
    cond = get_condition(victim["conditions"], CondType.PREEMPTED)
    assert cond is not None and cond["message"] == "preempted by team-a/high to make room for a higher-priority job"
    assert is_true(victim["conditions"], CondType.QUEUED)
    assert ("team-a/low-0", "Preempted", cond["message"], True) in w.kube.events
    # Whole gangs: every pod of both victims deleted, none of the others.
    deleted_pods = {name for kind, _, name in w.kube.deleted if kind == "Pod"}
    assert {"low-0-0", "low-0-1", "low-1-0", "low-1-1"} <= deleted_pods
    assert not any(name.startswith(("low-2", "low-3", "low-4")) for name in deleted_pods)

    # While the victims' pods terminate, the preemptor waits and evicts nobody else.
    [outcome] = await w.cycle()
    assert outcome.result == "Queued" and "waiting for preempted gangs" in outcome.message
    w.drop_deleted_pods()
    outcomes = await w.cycle()
    assert ("team-a/high", "Admitted") in [(o.job, o.result) for o in outcomes]
    assert high.uid in w.quota.held


async def test_no_preemption_when_eviction_would_not_let_the_preemptor_run(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 200}, {"node-0": 8, "node-1": 8})
    w.submit(job_body("low", replicas=1, gpus=8))
    await w.cycle()
    w.submit(job_body("high", replicas=3, gpus=8), priority=10)
    outcomes = await w.cycle()
    assert [o.result for o in outcomes] == ["Queued"]
    assert not any(kind == "Pod" for kind, _, _ in w.kube.deleted)


async def test_deleted_job_gives_back_quota_and_reservation(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    job = w.submit(job_body("train", replicas=2, gpus=8))
    await w.cycle()
    assert job.uid in w.quota.held
    w.cache.remove_job(job.uid)
    await w.cycle()
    assert w.quota.held == {} and w.placement.free == NODES


async def test_unschedulable_or_refused_head_steps_aside_for_the_next_job(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 32}, NODES)
    w.submit(job_body("huge", replicas=8, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("small", replicas=1, gpus=8, created="2025-01-01T00:00:01Z"))
    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/huge", "Unschedulable"), ("team-a/small", "Admitted")]
    # The Unschedulable job is not re-evaluated (no new writes) until the queue tree changes.
    writes = len(w.kube.status["team-a/huge"])
    assert await w.cycle() == []
    w.cache.upsert_queue({"metadata": {"name": "team-a"}, "spec": {"changed": True}})
    outcomes = await w.cycle()
    assert [o.job for o in outcomes] == ["team-a/huge"]
    assert len(w.kube.status["team-a/huge"]) == writes  # same verdict, same message: no write


async def test_quota_bound_preemption_evicts_only_what_quota_needs_when_gpus_are_plentiful(
    job_body: Any, make_world: Any
) -> None:
    # 256 free GPUs: placement never needs an eviction, only the queue's 32-GPU quota does.
    w = make_world({"team-a": 32}, {f"node-{i}": 8 for i in range(32)})
    for i in range(4):
        w.submit(job_body(f"low-{i}", replicas=1, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
        await w.cycle()
    w.echo_pods()
    w.submit(job_body("high", replicas=2, gpus=8, created="2025-01-01T00:01:00Z"), priority=100)
    outcomes = await w.cycle()
    assert ("team-a/high", "Preempting") in [(o.job, o.result) for o in outcomes]
    evicted = {k for k in w.kube.status if "Preempted" in str(w.last_status(k).get("conditions"))}
    assert len(evicted) == 2 and evicted <= {f"team-a/low-{i}" for i in range(4)}
