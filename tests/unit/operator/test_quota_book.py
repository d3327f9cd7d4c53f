from __future__ import annotations

from typing import Any

from kubegang.operator._job import job_view
from kubegang.operator._quota_book import QuotaBook


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


def test_invalid_tree_keeps_the_previous_one(job_body: Any) -> None:
    b = book()
    problems = b.set_queues([queue("loop-a", 1, "loop-b"), queue("loop-b", 1, "loop-a")])
    assert problems
    assert b.can_admit(job_view(job_body("x", queue="team-a", replicas=1, gpus=8))).ok
