from __future__ import annotations

from typing import Any

from kubegang.operator._job import job_view
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._types import WaitReason


def queue(name: str, nominal: int, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubegang.io/v1alpha1",
        "kind": "GPUQueue",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"flavor": "nvidia.com/gpu", "nominal": nominal}],
            **({"parent": parent} if parent else {}),
            **spec,
        },
    }


def book() -> QuotaBook:
    b = QuotaBook(priority_of=lambda job: 0)
    problems = b.set_queues(
        [
            queue("org", 0),
            queue("team-a", 16, "org"),
            queue("team-b", 16, "org", preemption={"reclaimFromBorrowers": "Any"}),
        ]
    )
    assert problems == []
    return b


def test_borrowing_then_reclaim_names_the_policy(job_body: Any) -> None:
    b = book()
    borrower = job_view(job_body("a-big", namespace="team-a", queue="team-a", replicas=3, gpus=8))
    assert b.admit(borrower).ok  # 24 > 16 nominal: borrows team-b's idle quota
    usage = b.usage()
    assert usage["team-a"].usage == {"nvidia.com/gpu": 24}
    assert usage["team-a"].borrowed == {"nvidia.com/gpu": 8}

    reclaimer = job_view(job_body("b-job", namespace="team-b", queue="team-b", replicas=2, gpus=8))
    assert not b.can_admit(reclaimer).ok
    [candidate] = b.preemption_candidates(reclaimer)
    assert candidate.job.uid == borrower.uid
    assert "to reclaim nominal quota of queue team-b" in candidate.why
    assert b.can_admit_without(reclaimer, [borrower.uid]).ok
    assert b.usage()["team-a"].usage == {"nvidia.com/gpu": 24}  # the what-if changed nothing


def test_job_larger_than_queue_can_ever_hold_is_never(job_body: Any) -> None:
    b = book()
    verdict = b.can_admit(job_view(job_body("huge", queue="team-a", replicas=8, gpus=8)))
    assert not verdict.ok and verdict.never
    assert "team-a" in verdict.reason


def test_fair_share_order_puts_the_less_served_queue_first(job_body: Any) -> None:
    b = book()
    assert b.admit(job_view(job_body("a-run", queue="team-a", replicas=3, gpus=8))).ok
    a_next = job_view(job_body("a-next", queue="team-a", replicas=1, gpus=8, created="2025-01-01T00:00:00Z"))
    b_next = job_view(job_body("b-next", queue="team-b", replicas=1, gpus=8, created="2025-01-01T00:01:00Z"))
    assert [j.name for j in b.order([a_next, b_next])] == ["b-next", "a-next"]


def test_a_broken_queue_is_left_out_with_its_subtree_and_the_rest_of_the_tree_admits(job_body: Any) -> None:
    b = book()
    good = [queue("org", 0), queue("team-a", 16, "org"), queue("team-b", 16, "org")]
    broken = [queue("loop-a", 8, "loop-b"), queue("loop-b", 8, "loop-a"), queue("under-loop", 8, "loop-a"),
              queue("orphan", 8, "no-such-parent")]
    problems = b.set_queues([*good, *broken])
    assert len(problems) == 4 and any("cycle" in p for p in problems)
    reasons = {name: why.reason.value for name, why in b.left_out.items()}
    assert reasons == {"loop-a": "ParentCycle", "loop-b": "ParentCycle", "under-loop": "ParentInactive",
                       "orphan": "ParentNotFound"}
    assert "parent loop-a is left out" in b.left_out["under-loop"].message
    # One team's mistake does not stop the others: the valid part of the tree is the tree.
    assert b.admit(job_view(job_body("x", queue="team-a", replicas=1, gpus=8))).ok
    stuck = b.can_admit(job_view(job_body("y", queue="under-loop", replicas=1, gpus=8)))
    assert not stuck.ok and stuck.never and stuck.cause is WaitReason.QUEUE_INACTIVE
    assert "left out of the quota tree" in stuck.reason and "cycle" in stuck.reason
    # Fixed, they are back.
    fixed = [queue("loop-a", 8, "org"), queue("loop-b", 8, "loop-a"), queue("under-loop", 8, "loop-a")]
    assert b.set_queues([*good, *fixed]) == [] and b.left_out == {}
    assert b.can_admit(job_view(job_body("y", queue="under-loop", replicas=1, gpus=8))).ok


def test_a_queue_the_operator_cannot_read_says_so_on_itself_and_its_subtree_is_inactive(job_body: Any) -> None:
    # A value the CRD's enum would refuse, as an older CRD (or a client without the schema) lets through.
    b = book()
    always = queue("team-c", 8, "org")
    always["spec"]["preemption"] = {"withinQueue": "Always"}
    problems = b.set_queues([queue("org", 0), queue("team-a", 16, "org"), always, queue("under-c", 8, "team-c")])
    assert len(problems) == 2
    reasons = {name: why.reason.value for name, why in b.left_out.items()}
    assert reasons == {"team-c": "InvalidSpec", "under-c": "ParentInactive"}
    assert "spec.preemption.withinQueue" in b.left_out["team-c"].message, b.left_out["team-c"]
    for name in ("team-c", "under-c"):
        verdict = b.can_admit(job_view(job_body("z", queue=name, replicas=1, gpus=8)))
        assert not verdict.ok and verdict.cause is WaitReason.QUEUE_INACTIVE, verdict
    assert b.admit(job_view(job_body("x", queue="team-a", replicas=1, gpus=8))).ok


def flavoured(name: str, flavors: list[tuple[str, int]], parent: str | None = None) -> dict[str, Any]:
    body = queue(name, 0, parent)
    body["spec"]["resources"] = [{"flavor": f, "nominal": n} for f, n in flavors]
    return body


H100 = "NVIDIA-H100-80GB-HBM3"
GB200 = "NVIDIA-GB200"


def test_an_unrelated_queue_with_another_flavour_does_not_change_a_jobs_flavour(job_body: Any) -> None:
    b = QuotaBook(priority_of=lambda job: 0, node_products=lambda: {"n1": H100})
    assert b.set_queues([flavoured("mine", [(H100, 64)]), flavoured("theirs", [(GB200, 72)])]) == []
    job = job_view(job_body("j", queue="mine", replicas=2, gpus=8))
    [option] = b.flavor_options(job)
    assert option.flavor == H100 and option.gpu_product == H100  # placed on the GPUs quota counts
    assert b.can_admit(option).ok
    assert b.admit(option).ok
    assert b.usage()["mine"].usage == {H100: 16}


def test_flavours_are_tried_in_the_leafs_order_then_its_ancestors(job_body: Any) -> None:
    b = QuotaBook(priority_of=lambda job: 0, node_products=lambda: {"n1": H100})
    assert (
        b.set_queues([flavoured("org", [("spare", 8)]), flavoured("leaf", [("abstract", 8), (H100, 8)], "org")]) == []
    )
    options = b.flavor_options(job_view(job_body("j", queue="leaf", replicas=1, gpus=8)))
    assert [(o.flavor, o.gpu_product) for o in options] == [("abstract", None), (H100, H100), ("spare", None)]


def test_a_job_naming_a_product_uses_only_that_flavour(job_body: Any) -> None:
    b = QuotaBook(priority_of=lambda job: 0)
    assert b.set_queues([flavoured("mine", [(H100, 64), (GB200, 8)])]) == []
    [option] = b.flavor_options(job_view(job_body("j", queue="mine", gpuProduct=GB200)))
    assert option.flavor == GB200


def test_a_new_leader_recovers_the_flavour_from_the_nodes_the_gang_holds(job_body: Any) -> None:
    b = QuotaBook(priority_of=lambda job: 0, node_products=lambda: {"a-1": "A", "b-1": "B"})
    assert b.set_queues([flavoured("mine", [("A", 8), ("B", 8)])]) == []
    status = {"phase": "Running", "placement": {"pods": [{"index": 0, "node": "b-1", "gpus": []}]}}
    b.record(job_view(job_body("j", queue="mine", replicas=1, gpus=8, status=status)))
    assert b.usage()["mine"].usage == {"B": 8}
    # A leader keeps its own assignment across tree rebuilds, whatever the nodes say.
    held = job_view(job_body("k", queue="mine", replicas=1, gpus=4))
    assert b.admit(b.flavor_options(held)[0]).ok
    b.set_queues([flavoured("mine", [("A", 16), ("B", 8)])])
    b.record(held)
    assert b.usage()["mine"].usage == {"A": 4}


def test_a_shared_gpu_job_is_charged_its_share_in_thousandths(job_body: Any) -> None:
    b = QuotaBook(priority_of=lambda job: 0)
    assert b.set_queues([queue("tiny", 1)]) == []

    def shared(name: str) -> Any:
        body = job_body(name, queue="tiny", replicas=1, gpuFraction=250)
        del body["spec"]["template"]["spec"]["containers"][0]["resources"]
        return job_view(body)

    for i in range(4):
        assert b.admit(shared(f"s{i}")).ok
    assert b.usage()["tiny"].usage == {"nvidia.com/gpu": 1.0}
    refused = b.can_admit(shared("s4"))
    assert not refused.ok and not refused.never
    assert refused.reason.startswith("queue tiny needs 0.25 nvidia.com/gpu but can get 0 now: nominal 1, 1 in use")
    b.release("uid-s0")
    assert b.can_admit(shared("s4")).ok and b.usage()["tiny"].usage == {"nvidia.com/gpu": 0.75}


def test_the_most_recently_started_borrower_is_the_first_victim_whatever_its_uid(job_body: Any) -> None:
    # The book records a job at admission, before startedAt exists: it must read the start from the
    # job as it is now, or every gang this leader admitted looks equally old and the UID decides.
    for early_uid, late_uid in (("uid-a", "uid-z"), ("uid-z", "uid-a")):
        now: dict[str, Any] = {}
        b = QuotaBook(priority_of=lambda job: 0, job_of=now.get)
        assert b.set_queues([queue("org", 0), queue("team-a", 16, "org"),
                             queue("team-b", 16, "org", preemption={"reclaimFromBorrowers": "Any"})]) == []
        early = job_body("own", uid=early_uid, queue="team-a", replicas=2, gpus=8)
        late = job_body("borrow", uid=late_uid, queue="team-a", replicas=2, gpus=8)
        for body in (early, late):
            assert b.admit(job_view(body)).ok
        # Status times have whole seconds; "late" may have started in the same second as "early"
        # (the e2e tree example did once): the book's admission order decides then, not the UID.
        for late_start in ("2025-01-01T00:05:00Z", "2025-01-01T00:01:00Z"):
            b.begin_cycle()  # each pass of the loop is a new cycle: the starts are read afresh
            for body, started in ((early, "2025-01-01T00:01:00Z"), (late, late_start)):
                now[body["metadata"]["uid"]] = job_view({**body, "status": {
                    "phase": "Running", "admittedAt": started, "startedAt": started}})
            assert [j.uid for j in b.running()] == [early_uid, late_uid], late_start  # longest-running first
            reclaimer = job_view(job_body("b-job", namespace="team-b", queue="team-b", replicas=2, gpus=8))
            victims = b.quota_victims(reclaimer, [c.job.uid for c in b.preemption_candidates(reclaimer)])
            assert victims == [late_uid], (late_start, early_uid)


def test_a_leaf_without_namespaces_serves_every_namespace_and_one_listing_them_refuses_the_rest(
    job_body: Any,
) -> None:
    """docs/api.md: an empty (or unset) ``namespaces`` serves every namespace; a list serves only those."""
    b = QuotaBook(priority_of=lambda job: 0)
    assert b.set_queues([queue("org", 0), queue("open", 16, "org"),
                         queue("team-a", 16, "org", namespaces=["team-a", "ml"])]) == []
    for namespace in ("team-a", "team-z", "default"):
        job = job_view(job_body(f"open-{namespace}", namespace=namespace, queue="open", replicas=1, gpus=1))
        assert b.can_admit(job).ok and b.admit(job).ok, namespace
        assert job.uid in b.tree

    listed = job_view(job_body("listed", namespace="ml", queue="team-a", replicas=1, gpus=1))
    assert b.admit(listed).ok
    other = job_view(job_body("other", namespace="team-b", queue="team-a", replicas=1, gpus=1))
    for verdict in (b.can_admit(other), b.admit(other)):
        assert not verdict.ok and verdict.never  # Unschedulable: no usage change can let it in
        assert verdict.cause is WaitReason.NAMESPACE_NOT_SERVED
        assert verdict.reason == "queue team-a does not serve namespace team-b (it serves: ml, team-a)"
    assert other.uid not in b.tree


def test_a_job_naming_no_queue_in_a_large_tree_is_told_of_a_few_leaves_within_the_status_limit(
    job_body: Any,
) -> None:
    """The QueueNotFound and namespace messages name ten queues or namespaces and count the rest: listing
    all 1,000 leaves made a 35,000-character message, over the CRD's 32,768 for a condition, so the
    job's status write was refused and it showed no reason at all."""
    b = QuotaBook(priority_of=lambda job: 0)
    namespaces = [f"ns-{i:04d}" for i in range(100)]
    leaves = [queue(f"team-{i:04d}-with-a-long-descriptive-name", 8, "org", namespaces=namespaces)
              for i in range(1000)]
    assert b.set_queues([queue("org", 0), *leaves]) == []
    typo = job_view(job_body("typo", namespace="ns-0001", queue="team-0001-with-a-typo", replicas=1, gpus=1))
    verdict = b.can_admit(typo)
    assert not verdict.ok and verdict.cause is WaitReason.QUEUE_NOT_FOUND
    assert verdict.reason.endswith("team-0009-with-a-long-descriptive-name and 990 more)"), verdict.reason
    assert len(verdict.reason) < 1024
    stranger = job_view(job_body("stranger", namespace="elsewhere", queue=leaves[0]["metadata"]["name"],
                                 replicas=1, gpus=1))
    verdict = b.can_admit(stranger)
    assert verdict.cause is WaitReason.NAMESPACE_NOT_SERVED
    assert verdict.reason.endswith("(it serves: ns-0000, ns-0001, ns-0002, ns-0003, ns-0004, ns-0005, ns-0006, "
                                   "ns-0007, ns-0008, ns-0009 and 90 more)"), verdict.reason


def _reclaim_book(now: dict[str, Any], priority_of: Any = lambda job: 0) -> QuotaBook:
    b = QuotaBook(priority_of=priority_of, job_of=now.get)
    assert b.set_queues([queue("org", 0), queue("team-a", 400, "org"),
                         queue("team-b", 400, "org", preemption={"reclaimFromBorrowers": "Any"})]) == []
    return b


def _started(body: dict[str, Any], at: str) -> Any:
    return job_view({**body, "status": {"phase": "Running", "admittedAt": at, "startedAt": at}})


def test_a_cycle_reads_each_held_gang_once_however_many_heads_are_blocked(job_body: Any) -> None:
    """Every blocked head of a cycle asks for its preemption candidates; the held gangs are read once a
    cycle (and as they change), not once per head: at 1,000 held gangs and 1,000 blocked heads that was
    3.5 s of CPU per cycle. Counted by the PriorityClass look-ups a held gang's priority makes."""
    looked_up: list[str] = []

    def priority_of(job: Any) -> int:
        looked_up.append(job.uid)
        return 0

    now: dict[str, Any] = {}
    b = _reclaim_book(now, priority_of)
    held = [job_body(f"held-{i}", uid=f"held-{i}", queue="team-a", replicas=1, gpus=8, priorityClassName="batch")
            for i in range(60)]  # 480 GPUs: team-a borrows 80 of team-b's
    for body in held:
        assert b.admit(job_view(body)).ok
    heads = [job_view(job_body(f"head-{i}", uid=f"head-{i}", namespace="team-b", queue="team-b", replicas=8, gpus=8))
             for i in range(25)]
    for cycle in range(2):
        b.begin_cycle()
        looked_up.clear()
        for head in heads:
            assert len(b.preemption_candidates(head)) == 60
        assert sorted(looked_up) == sorted(f"held-{i}" for i in range(60)), cycle  # once each, not 25 times


def test_the_held_gangs_follow_admissions_and_releases_within_a_cycle_and_their_starts_from_the_next(
        job_body: Any) -> None:
    now: dict[str, Any] = {}
    b = _reclaim_book(now)
    own = job_body("own", uid="uid-own", queue="team-a", replicas=50, gpus=8)  # all of team-a's 400
    old = job_body("old", uid="uid-old", queue="team-a", replicas=1, gpus=8)
    new = job_body("new", uid="uid-new", queue="team-a", replicas=1, gpus=8)
    for body, at in ((own, "2025-01-01T00:00:00Z"), (old, "2025-01-01T00:01:00Z"), (new, "2025-01-01T00:05:00Z")):
        assert b.admit(job_view(body)).ok
        now[body["metadata"]["uid"]] = _started(body, at)
    reclaimer = job_view(job_body("b-job", namespace="team-b", queue="team-b", replicas=50, gpus=8))
    b.begin_cycle()

    def first_victim() -> str:
        candidates = [c.job.uid for c in b.preemption_candidates(reclaimer)]
        victims = b.quota_victims(reclaimer, candidates)
        assert victims, candidates
        return victims[0]

    assert first_victim() == "uid-new"  # the most recently started borrower goes first
    late = job_body("late", uid="uid-late", queue="team-a", replicas=1, gpus=8)
    assert b.admit(job_view(late)).ok  # admitted in this cycle: no start yet, the most recent of all
    assert first_victim() == "uid-late"
    b.release("uid-late")
    assert first_victim() == "uid-new"
    # "old" is restarted and starts again after "new": the cycle keeps what it read, the next one sees it.
    now["uid-old"] = _started(old, "2025-01-01T00:09:00Z")
    assert first_victim() == "uid-new"
    b.begin_cycle()
    assert first_victim() == "uid-old"
