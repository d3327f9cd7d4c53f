"""Preemption candidates by policy, and the quota what-if the placement-aware planner relies on."""

from __future__ import annotations

from kubegang.quota import (
    BorrowWithinParent,
    CandidateReason,
    FlavorQuota,
    Ok,
    PendingJob,
    PreemptionPolicy,
    QueueSpec,
    QuotaTree,
    ReclaimFromBorrowers,
    RunningJob,
    WithinQueue,
    candidates_for,
    fits_after_eviction,
)

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"

RECLAIM = PreemptionPolicy(reclaim_from_borrowers=ReclaimFromBorrowers.ANY)
WITHIN = PreemptionPolicy(within_queue=WithinQueue.LOWER_PRIORITY)


def tree_of(a: PreemptionPolicy, b: PreemptionPolicy, *, extra: list[QueueSpec] | None = None) -> QuotaTree:
    return QuotaTree(
        [
            QueueSpec("org"),
            QueueSpec("team-a", parent="org", quotas={H100: FlavorQuota(8), A100: FlavorQuota(8)}, preemption=a),
            QueueSpec("team-b", parent="org", quotas={H100: FlavorQuota(8)}, preemption=b),
            *(extra or []),
        ]
    )


def run(
    tree: QuotaTree, job_id: str, queue: str, usage: dict[str, int], priority: int = 0, started: float = 0
) -> RunningJob:
    assert tree.admit(job_id, queue, usage) == Ok()
    return RunningJob(job_id, queue, usage, priority=priority, started=started)


def test_b_reclaims_from_a_borrowing_team_a() -> None:
    tree = tree_of(PreemptionPolicy(), RECLAIM)
    running = [
        run(tree, "a-own", "team-a", {H100: 8}, started=1),
        run(tree, "a-borrow", "team-a", {H100: 6}, started=2),
    ]
    preemptor = PendingJob("b1", "team-b", {H100: 8}, priority=0)
    assert not tree.can_admit("team-b", {H100: 8})
    got = candidates_for(preemptor, tree, running)
    # Both run in a queue that borrows; the latest started comes first.
    assert [c.job.job_id for c in got] == ["a-borrow", "a-own"]
    assert all(c.reason is CandidateReason.RECLAIM_FROM_BORROWERS for c in got)
    assert "team-a" in got[0].message and "b1" in got[0].message
    assert fits_after_eviction(tree, preemptor, ["a-borrow"]) == Ok()
    assert tree.usage("team-a") == {H100: 14}  # the what-if changed nothing


def test_no_reclaim_from_a_queue_within_its_quota() -> None:
    tree = tree_of(PreemptionPolicy(), RECLAIM)
    running = [run(tree, "a1", "team-a", {H100: 8})]
    assert candidates_for(PendingJob("b1", "team-b", {H100: 8}), tree, running) == []


def test_reclaim_never_means_no_candidates_from_other_queues() -> None:
    tree = tree_of(PreemptionPolicy(), PreemptionPolicy())
    running = [run(tree, "a1", "team-a", {H100: 14})]
    assert candidates_for(PendingJob("b1", "team-b", {H100: 8}), tree, running) == []


def test_reclaim_lower_priority_only() -> None:
    policy = PreemptionPolicy(reclaim_from_borrowers=ReclaimFromBorrowers.LOWER_PRIORITY)
    tree = tree_of(PreemptionPolicy(), policy)
    running = [
        run(tree, "hi", "team-a", {H100: 7}, priority=5),
        run(tree, "lo", "team-a", {H100: 7}, priority=0),
    ]
    got = candidates_for(PendingJob("b1", "team-b", {H100: 8}, priority=1), tree, running)
    assert [c.job.job_id for c in got] == ["lo"]


def test_no_reclaim_when_the_preemptor_would_itself_borrow() -> None:
    tree = tree_of(PreemptionPolicy(), RECLAIM)
    running = [run(tree, "a1", "team-a", {H100: 10})]
    assert candidates_for(PendingJob("b1", "team-b", {H100: 9}), tree, running) == []


def test_borrow_within_parent_evicts_lower_priority_borrowers() -> None:
    policy = PreemptionPolicy(borrow_within_parent=BorrowWithinParent.LOWER_PRIORITY)
    tree = tree_of(PreemptionPolicy(), policy)
    running = [
        run(tree, "a1", "team-a", {H100: 10}, priority=0),
        run(tree, "a2", "team-a", {H100: 1}, priority=9),
    ]
    got = candidates_for(PendingJob("b1", "team-b", {H100: 9}, priority=3), tree, running)
    assert [(c.job.job_id, c.reason) for c in got] == [("a1", CandidateReason.BORROW_WITHIN_PARENT)]


def test_within_queue_lower_priority_only_and_lowest_first() -> None:
    tree = tree_of(WITHIN, PreemptionPolicy())
    running = [
        run(tree, "p2", "team-a", {H100: 2}, priority=2),
        run(tree, "p0", "team-a", {H100: 2}, priority=0),
        run(tree, "p5", "team-a", {H100: 2}, priority=5),
        run(tree, "other-flavour", "team-a", {A100: 8}, priority=0),
    ]
    got = candidates_for(PendingJob("x", "team-a", {H100: 16}, priority=3), tree, running)
    assert [c.job.job_id for c in got] == ["p0", "p2"]
    assert all(c.reason is CandidateReason.WITHIN_QUEUE for c in got)


def test_borrowers_come_before_own_queue() -> None:
    policy = PreemptionPolicy(within_queue=WithinQueue.LOWER_PRIORITY, reclaim_from_borrowers=ReclaimFromBorrowers.ANY)
    tree = tree_of(PreemptionPolicy(), policy)
    running = [
        run(tree, "b-own", "team-b", {H100: 2}, priority=0),
        run(tree, "a-borrow", "team-a", {H100: 12}, priority=7),
    ]
    got = candidates_for(PendingJob("b2", "team-b", {H100: 6}, priority=1), tree, running)
    assert [c.job.job_id for c in got] == ["a-borrow", "b-own"]


def test_separate_trees_share_nothing() -> None:
    tree = tree_of(PreemptionPolicy(), RECLAIM, extra=[QueueSpec("lone", quotas={H100: FlavorQuota(8)})])
    running = [run(tree, "a1", "team-a", {H100: 14}), run(tree, "l1", "lone", {H100: 8})]
    got = candidates_for(PendingJob("b1", "team-b", {H100: 8}), tree, running)
    assert [c.job.job_id for c in got] == ["a1"]


def test_a_job_that_can_never_fit_gets_no_candidates() -> None:
    tree = tree_of(WITHIN, PreemptionPolicy())
    running = [run(tree, "a1", "team-a", {H100: 1})]
    assert candidates_for(PendingJob("x", "team-a", {H100: 17}, priority=9), tree, running) == []


def test_deep_tree_reclaim_relative_to_the_common_ancestor() -> None:
    tree = QuotaTree(
        [
            QueueSpec("cluster"),
            QueueSpec("org-1", parent="cluster", quotas={H100: FlavorQuota(8)}),
            QueueSpec("org-2", parent="cluster", quotas={H100: FlavorQuota(8)}),
            QueueSpec("a", parent="org-1"),
            QueueSpec("b", parent="org-1"),
            QueueSpec("c", parent="org-2", preemption=RECLAIM),
        ]
    )
    running = [run(tree, "a1", "a", {H100: 6}), run(tree, "b1", "b", {H100: 6})]
    # org-1 borrows 4 from org-2's share; c reclaims from either of org-1's jobs.
    got = candidates_for(PendingJob("c1", "c", {H100: 8}), tree, running)
    assert sorted(c.job.job_id for c in got) == ["a1", "b1"]
    assert "org-1" in got[0].message
    assert not fits_after_eviction(tree, PendingJob("c1", "c", {H100: 8}), [])
    assert fits_after_eviction(tree, PendingJob("c1", "c", {H100: 8}), ["a1"]) == Ok()
