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
    quota_victims,
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


def test_at_equal_priority_the_most_recently_started_go_first_then_by_job_id() -> None:
    """docs/quota.md: "... then most recently started (least work lost), then job id"."""
    tree = tree_of(WITHIN, PreemptionPolicy())
    running = [
        run(tree, "old", "team-a", {H100: 1}, started=10),
        run(tree, "new-b", "team-a", {H100: 1}, started=50),
        run(tree, "new-a", "team-a", {H100: 1}, started=50),
        run(tree, "mid", "team-a", {H100: 1}, started=30),
    ]
    got = candidates_for(PendingJob("x", "team-a", {H100: 8}, priority=3), tree, running)
    assert [c.job.job_id for c in got] == ["new-a", "new-b", "mid", "old"]


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


def _reclaim_tree() -> QuotaTree:
    return QuotaTree(
        [
            QueueSpec("org"),
            QueueSpec("team-a", parent="org", quotas={H100: FlavorQuota(4)}),
            QueueSpec("team-b", parent="org", quotas={H100: FlavorQuota(8)}, preemption=RECLAIM),
            QueueSpec("team-c", parent="org", quotas={H100: FlavorQuota(0)}),
        ]
    )


def test_reclaim_skips_a_candidate_whose_queue_is_back_within_quota() -> None:
    # Kueue's minimalPreemptions: once a2 is gone team-a (3 of nominal 4) no longer borrows, so a1
    # is skipped and team-c's borrower goes instead; a2 and c1 are enough for b1's 8.
    tree = _reclaim_tree()
    running = [
        run(tree, "c1", "team-c", {H100: 2}, started=1),
        run(tree, "a1", "team-a", {H100: 3}, started=2),
        run(tree, "a2", "team-a", {H100: 3}, started=3),
    ]
    preemptor = PendingJob("b1", "team-b", {H100: 8})
    candidates = candidates_for(preemptor, tree, running)
    assert [c.job.job_id for c in candidates] == ["a2", "a1", "c1"]
    before = [(q, tree.usage(q)) for q in tree.queues]
    victims = quota_victims(tree, preemptor, [c.job.job_id for c in candidates])
    assert victims == ["a2", "c1"]
    assert [(q, tree.usage(q)) for q in tree.queues] == before  # asking changes nothing
    assert fits_after_eviction(tree, preemptor, victims) == Ok()
    for victim in victims:
        tree.release(victim)
    assert tree.admit("b1", "team-b", {H100: 8}) == Ok()
    assert tree.usage("team-a") == {H100: 3}  # team-a keeps what is within its nominal


def test_quota_victims_empty_when_quota_is_not_the_problem_and_none_when_nothing_helps() -> None:
    tree = _reclaim_tree()
    run(tree, "a1", "team-a", {H100: 6})
    run(tree, "c1", "team-c", {H100: 2})
    assert quota_victims(tree, PendingJob("b1", "team-b", {H100: 4}), ["c1"]) == []
    # Evicting c1 frees 2 of the 4 missing; a1 is not offered.
    assert quota_victims(tree, PendingJob("b2", "team-b", {H100: 8}), ["c1"]) is None
    assert quota_victims(tree, PendingJob("b3", "team-b", {H100: 13}), ["a1", "c1"]) is None  # can never fit
    assert quota_victims(tree, PendingJob("b4", "team-b", {H100: 8}), ["gone", "c1", "a1"]) == ["a1"]  # c1 filled back


def test_quota_victims_fill_back_drops_victims_a_later_one_made_unnecessary() -> None:
    tree = _reclaim_tree()
    running = [
        run(tree, "small", "team-c", {H100: 1}, started=3),
        run(tree, "big", "team-c", {H100: 8}, started=1),
    ]
    preemptor = PendingJob("b1", "team-b", {H100: 8})
    ids = [c.job.job_id for c in candidates_for(preemptor, tree, running)]
    assert ids == ["small", "big"]
    assert quota_victims(tree, preemptor, ids) == ["big"]


def test_quota_victims_never_skip_the_preemptors_own_queue() -> None:
    tree = tree_of(WITHIN, PreemptionPolicy())
    running = [run(tree, "p0", "team-a", {H100: 6}, priority=0), run(tree, "p1", "team-a", {H100: 4}, priority=1)]
    preemptor = PendingJob("x", "team-a", {H100: 16}, priority=3)
    ids = [c.job.job_id for c in candidates_for(preemptor, tree, running)]
    assert quota_victims(tree, preemptor, ids) == ["p0", "p1"]
