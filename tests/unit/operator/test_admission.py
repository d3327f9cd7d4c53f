from __future__ import annotations

from typing import Any

from kubegang.operator._conditions import CondType, get_condition, is_true

from .conftest import LOWER_PRIORITY, gpu_node, gpu_queue

NODES = {f"node-{i}": 8 for i in range(10)}  # 80 GPUs


def _preempted(w: Any) -> set[str]:
    """Jobs whose status says they were preempted."""
    return {k for k in w.kube.status if "Preempted" in str(w.last_status(k).get("conditions"))}


def _gpus_by_node(w: Any) -> dict[str, list[str]]:
    """GPU indices the ledger holds, by node."""
    out: dict[str, list[str]] = {}
    for gpu in w.held_gpus():
        node, index = gpu.split("/")
        out.setdefault(node, []).append(index)
    return out


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
    # The extender holds the 48 GPUs of the placement written, for the first gang only.
    assert list(w.ledger.snapshot()["reservations"]) == ["uid-first"]
    held = {node: len(gpus) for node, gpus in _gpus_by_node(w).items()}
    assert held == {p["node"]: 8 for p in status["placement"]["pods"]}
    # podsCreatedAt is known once the pods exist, and written with the gang's next status write.
    assert status["podsCreatedAt"] is None
    first = w.cache.job("uid-first")
    assert first is not None and first.status["podsCreatedAt"]

    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/second", "Queued")]
    second = w.last_status("team-a/second")
    cond = get_condition(second["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "InsufficientGPUs"
    assert cond["message"] == (
        "waiting for GPUs: needs 6 nodes x 8 GPUs in the cluster; the cluster has 4 such nodes free"
    )
    assert not any(p["metadata"]["name"].startswith("second") for p in w.kube.pods())
    assert "uid-second" not in w.quota.tree and w.ledger.reservation_count == 1


async def test_quota_refusal_names_the_queue(job_body: Any, make_world: Any) -> None:
    # team-a may borrow up to org's 64, but team-b uses 48 of them now: 16 are left for team-a.
    w = make_world({}, NODES, queues=[gpu_queue("org"), gpu_queue("team-a", 16, "org"), gpu_queue("team-b", 48, "org")])
    w.submit(job_body("other", namespace="team-b", queue="team-b", replicas=6, gpus=8))
    [other] = await w.cycle()
    assert other.result == "Admitted"
    w.submit(job_body("big", replicas=4, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Queued" and outcome.reason == "QuotaExhausted"
    assert outcome.message == (
        "waiting for quota in queue team-a: queue team-a needs 32 nvidia.com/gpu but can get 16 now: nominal 16, "
        "0 in use, 16 free within nominal, can borrow 0 more (16 unused of the 64 shared in org's tree)"
    )
    assert not any(p["metadata"]["name"].startswith("big") for p in w.kube.pods())
    assert "uid-big" not in w.quota.tree


async def test_job_larger_than_queue_ceiling_is_unschedulable(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 32}, NODES)
    w.submit(job_body("huge", replicas=8, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Unschedulable"
    status = w.last_status("team-a/huge")
    assert status["phase"] == "Unschedulable"
    cond = get_condition(status["conditions"], CondType.UNSCHEDULABLE)
    assert cond is not None and cond["reason"] == "ExceedsQueueCapacity"
    assert cond["message"] == (
        "queue team-a can never hold 64 nvidia.com/gpu: at most 32 even with every other queue idle "
        "(team-a's tree has 32 in all)"
    )
    assert any(e[1] == "ExceedsQueueCapacity" and e[3] for e in w.kube.events)


async def test_failed_pod_creation_undoes_every_step(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    w.submit(job_body("train", replicas=3, gpus=8, framework="torchrun"))
    w.kube.fail_create = "train-2"
    # Creation runs after the decision, so the cycle reports the admission; the undo follows it.
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert w.kube.pods() == []  # the pods that were created are deleted again
    assert w.holds_nothing("uid-train")  # quota given back, reservation released
    assert w.held_gpus() == {} and w.ledger.reservation_count == 0
    assert w.quota.usage()["team-a"].usage == {}
    status = w.last_status("team-a/train")
    assert status["phase"] == "Queued" and status["admittedAt"] is None
    cond = get_condition(status["conditions"], CondType.QUEUED)
    assert cond is not None and cond["reason"] == "AdmissionFailed" and "train-2" in cond["message"]
    assert cond["message"].endswith("retrying in 1s"), cond

    # Refused again at once would be refused again: it waits its backoff, doubling while it fails.
    real = w.admission.cycle.clock
    assert await w.cycle() == []
    w.admission.cycle.clock = lambda: real() + 1.5
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted" and w.kube.pods() == []
    cond = get_condition(w.last_status("team-a/train")["conditions"], CondType.QUEUED)
    assert cond is not None and cond["message"].endswith("retrying in 2s"), cond
    assert await w.cycle() == []

    w.kube.fail_create = None
    w.admission.cycle.clock = lambda: real() + 4
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted"
    assert len(w.kube.pods()) == 3
    assert "uid-train" in w.quota.tree and list(w.ledger.snapshot()["reservations"]) == ["uid-train"]


async def test_preemption_evicts_only_what_is_needed_and_names_the_preemptor(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES, preemption=LOWER_PRIORITY)
    w.cache.set_priority("urgent", 100)  # a PriorityClass
    for i in range(5):
        w.submit(job_body(f"low-{i}", replicas=2, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
        await w.cycle()
    w.echo_pods()
    assert all(f"uid-low-{i}" in w.quota.tree for i in range(5))
    assert len(w.held_gpus()) == 80  # the queue and the cluster are full

    high = w.submit(job_body("high", replicas=3, gpus=8, created="2025-01-01T00:01:00Z", priorityClassName="urgent"))
    [outcome] = await w.cycle()
    assert outcome.result == "Preempting"
    evicted = _preempted(w)
    assert len(evicted) == 2 and evicted <= {f"team-a/low-{i}" for i in range(5)}  # 2 gangs free 32; 24 needed
    assert set(outcome.message.split(", ")) == evicted  # the Preempting outcome names its victims
    # docs/operator.md, "Events": a Normal Event on the preemptor naming them.
    assert ("team-a/high", "Preempting", f"evicting 2 gang(s) to make room: {outcome.message}", False) \
        in w.kube.events
    victim_key = sorted(evicted)[0]
    victim = w.last_status(victim_key)
    assert victim["phase"] == "Queued"
    cond = get_condition(victim["conditions"], CondType.PREEMPTED)
    assert cond is not None and cond["message"] == "preempted by team-a/high (higher priority in queue team-a)"
    assert (cond["status"], cond["reason"]) == ("True", "Preempted"), cond  # docs/operator.md's table
    assert is_true(victim["conditions"], CondType.QUEUED)
    assert (victim_key, "Preempted", cond["message"], True) in w.kube.events
    # Whole gangs: every pod of both victims deleted, none of the others; their quota is given back.
    victims = {key.split("/")[1] for key in evicted}
    deleted_pods = {name for kind, _, name in w.kube.deleted if kind == "Pod"}
    assert {f"{v}-{i}" for v in victims for i in range(2)} <= deleted_pods
    assert not any(name.rsplit("-", 1)[0] not in victims for name in deleted_pods)
    assert all((f"uid-{v}" in w.quota.tree) is (f"team-a/{v}" not in evicted) for v in (f"low-{i}" for i in range(5)))

    # While the victims' pods terminate, the preemptor waits and evicts nobody else.
    [outcome] = await w.cycle()
    assert outcome.result == "Queued" and "waiting for preempted gangs" in outcome.message
    assert _preempted(w) == evicted
    w.drop_deleted_pods()
    outcomes = await w.cycle()
    assert ("team-a/high", "Admitted") in [(o.job, o.result) for o in outcomes]
    assert high.uid in w.quota.tree and high.uid in w.ledger.snapshot()["reservations"]


async def test_no_preemption_when_eviction_would_not_let_the_preemptor_run(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 200}, {"node-0": 8, "node-1": 8, "node-2": 8}, preemption=LOWER_PRIORITY)
    w.submit(job_body("low", replicas=1, gpus=8))
    await w.cycle()
    w.echo_pods()
    low_node = next(iter(w.held_gpus())).split("/")[0]
    # A pod kubegang did not place (no candidate) holds another node.
    web = next(n for n in ("node-0", "node-1", "node-2") if n != low_node)
    w.ledger.upsert_pod({"metadata": {"name": "web-0", "namespace": "serving", "uid": "web-uid"},
                         "spec": {"nodeName": web, "containers": [
                             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
                         "status": {"phase": "Running"}})
    # 3 nodes' worth: evicting low frees one node, two are free then, which is not enough.
    w.submit(job_body("high", replicas=3, gpus=8, priority=10))
    outcomes = await w.cycle()
    assert [(o.result, o.reason) for o in outcomes] == [("Queued", "InsufficientGPUs")]
    assert outcomes[0].message == (
        "waiting for GPUs: needs 3 nodes x 8 GPUs in the cluster; the cluster has 1 such nodes free"
    )
    assert not any(kind == "Pod" for kind, _, _ in w.kube.deleted)
    assert "uid-low" in w.quota.tree and _preempted(w) == set()


async def test_deleted_job_gives_back_quota_and_reservation(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 80}, NODES)
    job = w.submit(job_body("train", replicas=2, gpus=8))
    await w.cycle()
    assert job.uid in w.quota.tree and w.ledger.reservation_count == 1
    w.cache.remove_job(job.uid)
    await w.cycle()
    assert w.holds_nothing(job.uid)
    assert w.held_gpus() == {} and w.ledger.reservation_count == 0


async def test_unschedulable_or_refused_head_steps_aside_for_the_next_job(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 32}, NODES)
    w.submit(job_body("huge", replicas=8, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("small", replicas=1, gpus=8, created="2025-01-01T00:00:01Z"))
    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/huge", "Unschedulable"), ("team-a/small", "Admitted")]
    # The Unschedulable job is not re-evaluated (no new writes) until the queue tree changes.
    writes = len(w.kube.status["team-a/huge"])
    assert await w.cycle() == []
    w.cache.upsert_queue(gpu_queue("team-a", 32, weight=2))  # a change that does not make it fit
    outcomes = await w.cycle()
    assert [o.job for o in outcomes] == ["team-a/huge"]
    assert len(w.kube.status["team-a/huge"]) == writes  # same verdict, same message: no write


async def test_quota_bound_preemption_evicts_only_what_quota_needs_when_gpus_are_plentiful(
    job_body: Any, make_world: Any
) -> None:
    # 256 free GPUs: placement never needs an eviction, only the queue's 32-GPU quota does.
    w = make_world({"team-a": 32}, {f"node-{i}": 8 for i in range(32)}, preemption=LOWER_PRIORITY)
    for i in range(4):
        w.submit(job_body(f"low-{i}", replicas=1, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
        await w.cycle()
    w.echo_pods()
    w.submit(job_body("high", replicas=2, gpus=8, created="2025-01-01T00:01:00Z", priority=100))
    outcomes = await w.cycle()
    assert ("team-a/high", "Preempting") in [(o.job, o.result) for o in outcomes]
    evicted = _preempted(w)
    assert len(evicted) == 2 and evicted <= {f"team-a/low-{i}" for i in range(4)}
    assert sum(f"uid-low-{i}" in w.quota.tree for i in range(4)) == 2


async def test_an_admission_is_one_status_write_and_no_event(job_body: Any, make_world: Any) -> None:
    """Events are for what a human must see; the Admitted condition already says where the gang went."""
    w = make_world({"team-a": 16}, {"node-0": 8, "node-1": 8})
    job = w.submit(job_body("train", replicas=2, gpus=8))
    await w.cycle()
    assert [p.get("phase") for p in w.kube.status[job.key]] == ["Admitted"]
    assert [e for e in w.kube.events if e[0] == job.key] == []
    admitted = next(c for c in w.last_status(job.key)["conditions"] if c["type"] == "Admitted")
    assert admitted["message"] == "admitted to queue team-a on 2 nodes in leaf-0; creating 2 pods"


async def test_a_job_held_by_its_quota_reserves_no_nodes_others_could_use(job_body: Any, make_world: Any) -> None:
    # team-a's 16 GPUs are taken by "run" (a time limit, so a reservation's start would be known);
    # "next" waits for team-a's quota, not for GPUs: 16 are free. Reserving them would keep "other"
    # (team-b, no limit) off them for nothing.
    w = make_world({"team-a": 16, "team-b": 16}, {f"n{i}": 8 for i in range(4)})
    w.submit(job_body("run", replicas=2, gpus=8, timeLimitSeconds=600))
    await w.cycle()
    w.echo_pods("Running")
    await w.supervise(w.cache.job("uid-run"))
    assert w.last_status("team-a/run")["phase"] == "Running"
    w.submit(job_body("next", replicas=1, gpus=8, timeLimitSeconds=600, created="2025-01-01T00:00:01Z"))
    outcomes = await w.cycle()
    assert [(o.job, o.result) for o in outcomes] == [("team-a/next", "Queued")]
    assert w.admission.cycle.reservation("uid-next") is None
    w.submit(job_body("other", namespace="team-b", queue="team-b", replicas=2, gpus=8,
                      created="2025-01-01T00:00:02Z"))
    outcomes = await w.cycle()
    assert ("team-b/other", "Admitted") in [(o.job, o.result) for o in outcomes]


async def test_without_a_within_queue_policy_a_higher_priority_job_waits_and_evicts_nothing(
    job_body: Any, make_world: Any
) -> None:
    """docs/api.md: preemption.withinQueue defaults to Never."""
    w = make_world({"team-a": 80}, NODES)
    w.cache.set_priority("urgent", 100)
    for i in range(5):
        w.submit(job_body(f"low-{i}", replicas=2, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
        await w.cycle()
    w.echo_pods()
    w.submit(job_body("high", replicas=3, gpus=8, created="2025-01-01T00:01:00Z", priorityClassName="urgent"))
    [outcome] = await w.cycle()
    assert outcome.result.value == "Queued", outcome
    assert not [k for k, _, _ in w.kube.deleted if k == "Pod"]
    assert all(w.last_status(f"team-a/low-{i}")["phase"] in ("Admitted", "Running") for i in range(5))


def _tree_example_world(make_world: Any) -> Any:
    """examples/gpuqueue-tree.yaml's tree on 16 nodes of 8 GPUs: team-a may borrow 24, team-b lends 24."""
    policy = {"withinQueue": "LowerPriority", "reclaimFromBorrowers": "Any"}
    return make_world({}, {f"node-{i}": 8 for i in range(16)}, queues=[
        gpu_queue("org", 0),
        gpu_queue("team-a", 32, "org", resources=[{"flavor": "nvidia.com/gpu", "nominal": 32, "borrowingLimit": 24}],
                  preemption=policy),
        gpu_queue("team-b", 32, "org", resources=[{"flavor": "nvidia.com/gpu", "nominal": 32, "lendingLimit": 24}],
                  preemption=policy),
    ])


async def _team_b_reclaims(w: Any, job_body: Any) -> None:
    """team-a runs 32 + 24 borrowed and has 8 more waiting; team-b's 32-GPU job evicts the borrower."""
    w.submit(job_body("a-own", replicas=4, gpus=8, created="2025-01-01T00:00:00Z"))
    w.submit(job_body("a-borrow", replicas=3, gpus=8, created="2025-01-01T00:00:01Z"))
    await w.cycle()
    w.echo_pods("Running")
    w.submit(job_body("a-more", replicas=1, gpus=8, created="2025-01-01T00:00:02Z"))
    assert [(o.job, o.result) for o in await w.cycle()] == [("team-a/a-more", "Queued")]
    w.submit(job_body("b-job", namespace="team-b", queue="team-b", replicas=4, gpus=8,
                      created="2025-01-01T00:00:03Z"))
    outcomes = {o.job: o.result for o in await w.cycle()}
    assert outcomes["team-b/b-job"] == "Preempting" and _preempted(w) == {"team-a/a-borrow"}
    assert "Admitted" not in outcomes.values()  # not a-more, not a-borrow: b-job holds what was freed


async def test_a_preemptor_that_leaves_while_its_victims_go_gives_back_the_quota_it_held(
    job_body: Any, make_world: Any
) -> None:
    """docs/quota.md: the claim is released when the preemptor leaves the queue (here: deleted)."""
    w = _tree_example_world(make_world)
    await _team_b_reclaims(w, job_body)
    assert "uid-b-job" in w.quota.tree
    w.cache.remove_job("uid-b-job")
    outcomes = {o.job: o.result for o in await w.cycle()}
    assert "uid-b-job" not in w.quota.tree
    assert outcomes["team-a/a-more"] == "Admitted", outcomes  # team-b's lendable 24 are free again


async def test_a_reclaiming_preemptor_holds_the_freed_quota_so_the_borrowers_do_not_take_turns_for_ever(
    job_body: Any, make_world: Any
) -> None:
    """examples/gpuqueue-tree.yaml: team-a borrows team-b's 24 and has one more job waiting when team-b
    reclaims. The quota its eviction frees was at once taken by team-a's waiting job, which team-b then
    evicted, freeing it for the other: the two gangs took turns, several times a second, and team-b's job
    never ran (found by the e2e tree test). The preemptor now holds that quota until its victims are gone."""
    w = _tree_example_world(make_world)
    await _team_b_reclaims(w, job_body)
    for _ in range(3):  # while a-borrow's pods terminate: no one admitted, no one else evicted
        outcomes = {o.job: o.result for o in await w.cycle()}
        assert "Admitted" not in outcomes.values() and _preempted(w) == {"team-a/a-borrow"}, outcomes
    w.drop_deleted_pods()
    outcomes = {o.job: o.result for o in await w.cycle()}
    assert outcomes["team-b/b-job"] == "Admitted", outcomes
    assert outcomes["team-a/a-more"] != "Admitted" and outcomes["team-a/a-borrow"] != "Admitted"
    assert _preempted(w) == {"team-a/a-borrow"}


async def test_the_next_flavour_is_tried_when_the_first_fits_in_quota_but_not_on_the_gpus(
    job_body: Any, make_world: Any
) -> None:
    """docs/operator.md: the first flavour whose quota admits the job *and* on which the extender places
    the gang wins. Flavour A has quota but its one node is taken by a pod kubegang did not place."""
    queue = gpu_queue("team-a", None, resources=[{"flavor": "A", "nominal": 8}, {"flavor": "B", "nominal": 8}])
    w = make_world({}, {}, queues=[queue])
    for name, product in (("a-0", "A"), ("b-0", "B")):
        node = gpu_node(name, 8)
        node["metadata"]["labels"]["nvidia.com/gpu.product"] = product
        w.ledger.upsert_node(node)
        w.cache.set_node_product(name, product)
    w.ledger.upsert_pod({"metadata": {"name": "web", "namespace": "serving", "uid": "web-uid"},
                         "spec": {"nodeName": "a-0", "containers": [
                             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
                         "status": {"phase": "Running"}})
    w.submit(job_body("train", replicas=1, gpus=8))
    [outcome] = await w.cycle()
    assert outcome.result == "Admitted", outcome
    assert [p["node"] for p in w.last_status("team-a/train")["placement"]["pods"]] == ["b-0"]
    assert w.quota.usage()["team-a"].usage == {"B": 8}


async def test_a_new_jobs_phase_stays_unset_until_the_first_cycle_that_sees_it(job_body: Any, make_world: Any) -> None:
    """docs/api.md, GPUJob status: `phase` is unset (an empty PHASE column) until the first admission
    cycle that sees the job, which admits it or writes why it waits; nothing writes `Pending`."""
    w = make_world({"team-a": 16}, NODES)
    w.submit(job_body("fits", replicas=1, gpus=8))
    w.submit(job_body("waits", replicas=4, gpus=8, created="2025-01-01T00:00:01Z"))
    await w.supervisor.run_pass()            # the supervision pass alone writes nothing for them
    await w.admission.settle()
    assert "team-a/fits" not in w.kube.status and "team-a/waits" not in w.kube.status
    await w.cycle()
    assert w.last_status("team-a/fits")["phase"] == "Admitted"
    assert w.last_status("team-a/waits")["phase"] in ("Queued", "Unschedulable")
    written = [s.get("phase") for writes in w.kube.status.values() for s in writes]
    assert "Pending" not in written, written
