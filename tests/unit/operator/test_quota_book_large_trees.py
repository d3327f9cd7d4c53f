"""The quota book over large queue trees: 10,000 leaves, 2,000 levels, and a leaf's MIG profile quota.

Speed belongs in bench/; these tests pin behaviour, and the one thing that made a cycle of 10,000 jobs
over 10,000 leaves take half a minute: a walk over every queue of the tree for every job (``job.queue in
tree.leaves`` built the list of leaves each time). It counts those walks instead of timing them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from kubegang.admission import (
    AdmissionCycle,
    AdmitResult,
    Effect,
    Plan,
    PlanAnswer,
    Reserve,
    Verdict,
    WhatIf,
    WhatIfAnswer,
    run_sync,
)
from kubegang.operator._job import JobView, job_view
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._types import WaitReason
from kubegang.quota import QuotaTree
from kubegang.quota._tree import _Node

from .conftest import gpu_queue, make_job_body

CONDITION_MESSAGE_LIMIT = 32_768
"""The CRD's limit on a condition's message: a longer one makes the job's status write fail."""

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
H100 = "NVIDIA-H100-80GB-HBM3"


class _TooManyWalks(AssertionError):
    pass


class _CountingNodes(dict[str, _Node]):
    """A tree's queues by name, counting each walk over all of them (each costs O(queues)).

    Past ``budget`` a walk raises, so code that walks the tree once per job fails within a few jobs
    instead of taking minutes; the admission cycle turns the raise into failed entries, which the
    test's assertions then see.
    """

    def __init__(self, nodes: dict[str, _Node], budget: int) -> None:
        super().__init__(nodes)
        self.walks = 0
        self.budget = budget

    def _walk(self) -> None:
        self.walks += 1
        if self.walks > self.budget:
            raise _TooManyWalks(f"{self.walks} walks over all {len(self)} queues")

    def __iter__(self) -> Iterator[str]:
        self._walk()
        return super().__iter__()

    def keys(self) -> Any:
        self._walk()
        return super().keys()

    def values(self) -> Any:
        self._walk()
        return super().values()

    def items(self) -> Any:
        self._walk()
        return super().items()


def _count_walks(tree: QuotaTree, budget: int) -> _CountingNodes:
    counting = _CountingNodes(tree._nodes, budget)
    tree._nodes = counting
    return counting


def _answer(effect: Effect[JobView, Any]) -> Any:
    """The placement side: every gang fits at once."""
    if isinstance(effect, Plan):
        return PlanAnswer(placement=object())
    if isinstance(effect, Reserve):
        return Verdict(True)
    if isinstance(effect, WhatIf):
        return WhatIfAnswer(None)
    return None


def _job(name: str, queue: str, *, replicas: int = 1, gpus: int = 1, second: int = 0, **spec: Any) -> JobView:
    created = f"2025-01-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
    return job_view(make_job_body(name, uid=f"uid-{name}", namespace="ns", queue=queue, replicas=replicas,
                                  gpus=gpus, created=created, **spec))


LEAVES = 10_000
RECLAIM = {"reclaimFromBorrowers": "Any"}


def _leaf(i: int) -> str:
    return f"leaf-{i:05d}"


def test_ten_thousand_leaves_admit_and_preempt_without_walking_every_queue_per_job() -> None:
    book = QuotaBook(priority_of=lambda job: 0)
    assert book.set_queues([gpu_queue("org", 0)]
                           + [gpu_queue(_leaf(i), 1, "org", preemption=RECLAIM) for i in range(LEAVES)]) == []
    # 1,250 gangs of 8 GPUs in leaves 1..1250, each borrowing 7 of its idle siblings' GPUs: the pool
    # of 10,000 is full.
    jobs = [_job(f"j{k:04d}", _leaf(k + 1), gpus=8, second=k) for k in range(1_250)]
    walks = _count_walks(book.tree, budget=20)

    entries = run_sync(AdmissionCycle(book).schedule(jobs, holds_pods=lambda uid: False), _answer)

    assert [(e.job.uid, e.result) for e in entries] == [(j.uid, AdmitResult.ADMITTED) for j in jobs]
    usage = book.usage()
    assert len(usage) == LEAVES + 1
    assert usage["org"].usage == {GPU: 10_000.0}
    assert usage[_leaf(1)].usage == {GPU: 8.0} and usage[_leaf(1)].borrowed == {GPU: 7.0}
    assert usage[_leaf(0)].usage == {} and usage[_leaf(2_000)].usage == {}

    # Leaf 0 wants its one nominal GPU back: every gang borrows, any of them may go, one must.
    reclaimer = _job("reclaimer", _leaf(0), second=9_000)
    refused = book.can_admit(reclaimer)
    assert not refused.ok and not refused.never
    candidates = book.preemption_candidates(reclaimer)
    assert {c.job.uid for c in candidates} == {j.uid for j in jobs}
    assert all("to reclaim nominal quota of queue leaf-00000" in c.why for c in candidates)
    victims = book.quota_victims(reclaimer, [c.job.uid for c in candidates])
    assert victims == [candidates[0].job.uid]  # one gang is enough: the first the order offers
    assert book.can_admit_without(reclaimer, victims).ok

    # Where the waiting jobs stand, and jobs of queues that take none.
    waiting = [reclaimer, _job("also", _leaf(0), second=9_001), _job("other", _leaf(9_999), second=9_002)]
    positions = book.positions(waiting)
    assert (positions["uid-reclaimer"].in_queue, positions["uid-also"].in_queue) == (1, 2)
    assert {p.root for p in positions.values()} == {"org"}
    assert [j.uid for j in book.order([*waiting, _job("stray", "nowhere")])] == [
        "uid-reclaimer", "uid-other", "uid-stray"]
    # The cycle sorts each queue once by rank; a job of no leaf queue has none (a lane of its own).
    assert book.rank(reclaimer) == (_leaf(0), 0, reclaimer.created.timestamp())
    assert book.rank(_job("stray", "nowhere")) is None and book.rank(_job("parent", "org")) is None
    missing = book.can_admit(_job("stray", "nowhere"))
    assert missing.never and missing.cause is WaitReason.QUEUE_NOT_FOUND and "and 9990 more" in missing.reason
    parent = book.can_admit(_job("parent", "org"))
    assert parent.never and parent.cause is WaitReason.NOT_A_LEAF_QUEUE
    assert "leaf-00000, leaf-00001" in parent.reason and "and 9990 more" in parent.reason

    # Not one walk over every queue per job: the names are known from the tree's construction.
    assert walks.walks <= 2, walks.walks


def test_a_parent_of_a_thousand_leaves_refuses_a_job_with_a_message_a_condition_can_hold() -> None:
    book = QuotaBook(priority_of=lambda job: 0)
    names = [f"team-{i:04d}-with-a-long-descriptive-name" for i in range(1_000)]
    assert book.set_queues([gpu_queue("org", 0)] + [gpu_queue(n, 8, "org") for n in names]) == []
    verdict = book.can_admit(_job("x", "org"))
    assert not verdict.ok and verdict.never and verdict.cause is WaitReason.NOT_A_LEAF_QUEUE
    assert len(verdict.reason) < CONDITION_MESSAGE_LIMIT // 10
    assert verdict.reason == ("queue org is not a leaf queue; jobs enter leaf queues only (under it: "
                              + ", ".join(names[:10]) + " and 990 more)")


DEPTH = 2_000


def _chain(depth: int) -> list[dict[str, Any]]:
    """A root with 8 GPUs and a chain of ``depth - 1`` queues of 1 GPU under it, children first (as a
    list from the API may come)."""
    queues = [gpu_queue("q0", 8)] + [gpu_queue(f"q{i}", 1, f"q{i - 1}") for i in range(1, depth)]
    return queues[::-1]


def test_a_two_thousand_level_tree_builds_and_admits_in_its_deepest_leaf(caplog: pytest.LogCaptureFixture) -> None:
    book = QuotaBook(priority_of=lambda job: 0)
    assert book.set_queues([*_chain(DEPTH), gpu_queue("other", 8)]) == []
    deepest = f"q{DEPTH - 1}"
    assert book.tree.path(deepest)[-1] == "q0" and len(book.tree.path(deepest)) == DEPTH
    assert book.tree.leaves == (deepest, "other")

    deep = _job("deep", deepest, gpus=8)
    middle = _job("middle", "q10", gpus=1, second=1)
    other = _job("other", "other", gpus=1, second=2)
    assert [j.uid for j in book.order([deep, middle, other])] == ["uid-deep", "uid-other", "uid-middle"]
    positions = book.positions([deep, other])
    assert positions["uid-deep"].root == "q0" and positions["uid-deep"].cohort == 1

    with caplog.at_level(logging.ERROR):
        entries = run_sync(AdmissionCycle(book).schedule([deep, middle, other], holds_pods=lambda uid: False),
                           _answer)
    results = {e.job.name: (e.result, e.reason) for e in entries}
    assert results["deep"] == (AdmitResult.ADMITTED, None)
    assert results["other"] == (AdmitResult.ADMITTED, None)
    assert results["middle"] == (AdmitResult.UNSCHEDULABLE, WaitReason.NOT_A_LEAF_QUEUE)
    assert "RecursionError" not in caplog.text
    usage = book.usage()
    assert usage[deepest].usage == {GPU: 8.0} and usage["q0"].usage == {GPU: 8.0}

    # A gang the whole chain can never hold says how much there is (summed over the 2,000 queues).
    huge = book.can_admit(_job("huge", deepest, replicas=1_000, gpus=8))
    assert huge.never and "q0's tree has 2007 in all" in huge.reason


# -- MIG profile flavours ---------------------------------------------------------------------------


def _flavoured(name: str, flavors: list[tuple[str, int]], parent: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = gpu_queue(name, None, parent)
    body["spec"]["resources"] = [{"flavor": f, "nominal": n} for f, n in flavors]
    return body


def _shared(name: str, queue: str, thousandths: int) -> JobView:
    body = make_job_body(name, uid=f"uid-{name}", queue=queue, replicas=1, gpuFraction=thousandths)
    del body["spec"]["template"]["spec"]["containers"][0]["resources"]
    return job_view(body)


def test_whole_and_shared_gpu_jobs_are_never_charged_to_a_mig_profiles_quota() -> None:
    book = QuotaBook(priority_of=lambda job: 0, node_products=lambda: {"n1": H100})
    both = [(MIG, 7), (H100, 8)]
    assert book.set_queues([_flavoured("root", []), _flavoured("leaf", both, "root")]) == []
    whole = _job("whole", "leaf", gpus=4)
    assert [(o.flavor, o.gpu_product) for o in book.flavor_options(whole)] == [(H100, H100)]
    assert book.path_flavors("leaf") == [H100]
    for name in ("a", "b"):
        [option] = book.flavor_options(_job(name, "leaf", gpus=4))
        assert book.admit(option).ok
    assert book.usage()["leaf"].usage == {H100: 8.0}
    # The leaf's 8 H100s are used: the 7 MIG slices are no whole GPUs to run a third gang on.
    [third] = book.flavor_options(_job("c", "leaf", gpus=4))
    refused = book.can_admit(third)
    assert not refused.ok and not refused.never and "needs 4 NVIDIA-H100-80GB-HBM3" in refused.reason
    assert not book.can_admit(book.flavor_options(_shared("s", "leaf", 500))[0]).ok
    assert [o.flavor for o in book.flavor_options(_shared("s", "leaf", 500))] == [H100]


def test_a_new_leader_never_counts_a_running_gang_against_a_mig_profile() -> None:
    book = QuotaBook(priority_of=lambda job: 0)  # no node products known: the first flavour of the path
    assert book.set_queues([_flavoured("leaf", [(MIG, 7), (H100, 8)])]) == []
    running = make_job_body("run", uid="uid-run", queue="leaf", replicas=1, gpus=4, status={"phase": "Running"})
    assert book.record(job_view(running))
    assert book.usage()["leaf"].usage == {H100: 4.0}


def test_a_path_listing_only_mig_profiles_falls_back_like_one_listing_nothing() -> None:
    book = QuotaBook(priority_of=lambda job: 0)
    assert book.set_queues([
        _flavoured("org", [(MIG, 14)]),
        _flavoured("mig-team", [(MIG, 7)], "org"),
        _flavoured("gpu-team", [(H100, 8)], "org"),
        _flavoured("lone", [(MIG, 7)]),
    ]) == []
    # The tree's whole-GPU flavour is its sibling's: borrowed from, as with a path that lists nothing.
    assert book.path_flavors("mig-team") == [H100]
    assert book.admit(book.flavor_options(_job("x", "mig-team", gpus=4))[0]).ok
    assert book.usage()["mig-team"].usage == {H100: 4.0}
    # A tree with MIG quota only has no quota for whole GPUs: such a job can never run there.
    assert book.path_flavors("lone") == [GPU]
    never = book.can_admit(book.flavor_options(_job("y", "lone", gpus=1))[0])
    assert not never.ok and never.never
