"""Admission order: priority first, then fair share (lower first), then FIFO; parking and waking."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.quota import (
    FairSharing,
    FlavorQuota,
    PendingJob,
    PendingQueues,
    QueueSpec,
    QuotaTree,
    admission_order,
    dominant_share,
    share_path,
)

H100 = "NVIDIA-H100-80GB-HBM3"


def siblings(nominals: list[int], weights: list[float], root: int = 0) -> QuotaTree:
    specs = [QueueSpec("org", quotas={H100: FlavorQuota(root)})]
    for i, (nominal, weight) in enumerate(zip(nominals, weights, strict=True)):
        specs.append(QueueSpec(f"t{i}", parent="org", weight=weight, quotas={H100: FlavorQuota(nominal)}))
    return QuotaTree(specs)


def test_winners_of_different_trees_meet_by_priority_then_creation_time_not_share() -> None:
    """docs/quota.md: queues of different trees share no quota; their winners meet by priority, then
    creation time. Tree x's leaf borrows heavily (a large share), tree y's does not: still the older head
    goes first at equal priority, and a higher priority first whatever its age."""
    tree = QuotaTree([
        QueueSpec("x", quotas={H100: FlavorQuota(16)}),
        QueueSpec("x-leaf", parent="x", quotas={H100: FlavorQuota(0)}),
        QueueSpec("y", quotas={H100: FlavorQuota(16)}),
        QueueSpec("y-leaf", parent="y", quotas={H100: FlavorQuota(16)}),
    ])
    tree.admit("x-run", "x-leaf", {H100: 12})  # x-leaf borrows 12 of its root's 16
    pending = PendingQueues(tree)
    pending.push(PendingJob("x-old", "x-leaf", {H100: 1}, created=1.0))
    pending.push(PendingJob("y-new", "y-leaf", {H100: 1}, created=2.0))
    assert [j.job_id for j in pending.heads()] == ["x-old", "y-new"]
    pending.push(PendingJob("y-urgent", "y-leaf", {H100: 1}, priority=5, created=3.0))
    assert pending.peek().job_id == "y-urgent"  # type: ignore[union-attr]


def test_lower_share_goes_first_at_equal_priority() -> None:
    tree = siblings([4, 4, 4], [1, 1, 1], root=24)
    tree.admit("x0", "t0", {H100: 12})  # borrows 8
    tree.admit("x1", "t1", {H100: 6})  # borrows 2
    pending = PendingQueues(tree)
    for i in range(3):
        pending.push(PendingJob(f"p{i}", f"t{i}", {H100: 1}, created=float(i)))
    assert [j.queue for j in pending.heads()] == ["t2", "t1", "t0"]


def test_priority_dominates_fair_share() -> None:
    tree = siblings([4, 4], [1, 1], root=24)
    tree.admit("x0", "t0", {H100: 12})
    pending = PendingQueues(tree)
    pending.push(PendingJob("low", "t1", {H100: 1}, priority=0))
    pending.push(PendingJob("high", "t0", {H100: 1}, priority=5))
    assert pending.pop().job_id == "high"  # type: ignore[union-attr]
    assert pending.pop().job_id == "low"  # type: ignore[union-attr]
    assert pending.pop() is None


def test_a_weight_of_zero_borrows_last() -> None:
    """docs/quota.md: a share is 0 while the queue would not borrow, infinite for weight 0 when it would."""
    tree = siblings([2, 0], [0, 1], root=16)
    assert dominant_share(tree, "t0", {H100: 2}) == 0.0  # within its own nominal
    assert dominant_share(tree, "t0", {H100: 3}) == math.inf
    tree.admit("x1", "t1", {H100: 12})  # t1 borrows 12 of 16: a large but finite share
    pending = PendingQueues(tree)
    pending.push(PendingJob("zero-weight", "t0", {H100: 4}))
    pending.push(PendingJob("heavy", "t1", {H100: 1}))
    assert pending.peek().job_id == "heavy"  # type: ignore[union-attr]


def test_weight_halves_the_share() -> None:
    tree = siblings([0, 0], [1, 2], root=16)
    tree.admit("x0", "t0", {H100: 4})
    tree.admit("x1", "t1", {H100: 6})
    assert dominant_share(tree, "t0") == 4 / 16
    assert dominant_share(tree, "t1") == 6 / 16 / 2
    pending = PendingQueues(tree)
    pending.push(PendingJob("a", "t0", {H100: 1}))
    pending.push(PendingJob("b", "t1", {H100: 1}))
    assert pending.peek().job_id == "b"  # type: ignore[union-attr]


def test_share_counts_the_job_being_admitted() -> None:
    # Equal usage; the larger request would borrow more, so the smaller one goes first.
    tree = siblings([2, 2], [1, 1], root=16)
    pending = PendingQueues(tree)
    pending.push(PendingJob("big", "t0", {H100: 10}, created=0))
    pending.push(PendingJob("small", "t1", {H100: 3}, created=1))
    assert [j.job_id for j in pending.heads()] == ["small", "big"]


def test_order_follows_admissions_between_decisions() -> None:
    tree = siblings([4, 4], [1, 1], root=16)
    pending = PendingQueues(tree)
    pending.push(PendingJob("a", "t0", {H100: 1}, created=0))
    pending.push(PendingJob("b", "t1", {H100: 1}, created=1))
    assert [j.job_id for j in pending.heads()] == ["a", "b"]
    tree.admit("x", "t0", {H100: 8})  # t0 now borrows
    assert [j.job_id for j in pending.heads()] == ["b", "a"]
    tree.release("x")
    tree.admit("y", "t1", {H100: 8})
    assert [j.job_id for j in pending.heads()] == ["a", "b"]


def test_fifo_within_a_queue_and_priority_within_a_queue() -> None:
    tree = siblings([4], [1])
    pending = PendingQueues(tree)
    pending.push(PendingJob("second", "t0", {H100: 1}, created=2))
    pending.push(PendingJob("first", "t0", {H100: 1}, created=1))
    pending.push(PendingJob("urgent", "t0", {H100: 1}, priority=1, created=3))
    order = [pending.pop().job_id for _ in range(3)]  # type: ignore[union-attr]
    assert order == ["urgent", "first", "second"]


def test_hierarchical_order_compares_the_subtrees_below_the_common_ancestor() -> None:
    tree = QuotaTree(
        [
            QueueSpec("root", quotas={H100: FlavorQuota(32)}),
            QueueSpec("org-1", parent="root"),
            QueueSpec("org-2", parent="root"),
            QueueSpec("a", parent="org-1"),
            QueueSpec("b", parent="org-1"),
            QueueSpec("c", parent="org-2"),
        ]
    )
    tree.admit("x", "a", {H100: 10})  # org-1 borrows 10 of the root's 32
    tree.admit("y", "c", {H100: 4})  # org-2 borrows 4
    pending = PendingQueues(tree)
    pending.push(PendingJob("pb", "b", {H100: 1}))  # b itself borrows nothing, but org-1 does
    pending.push(PendingJob("pc", "c", {H100: 1}))
    assert share_path(tree, "b", {H100: 1})[0] > share_path(tree, "c", {H100: 1})[0]
    assert [j.job_id for j in pending.heads()] == ["pc", "pb"]


def test_requeue_keeps_the_place_and_parking_waits_for_wake() -> None:
    tree = siblings([4, 4], [1, 1])
    pending = PendingQueues(tree)
    pending.push(PendingJob("a1", "t0", {H100: 1}, created=1))
    pending.push(PendingJob("a2", "t0", {H100: 1}, created=2))
    job = pending.pop()
    assert job is not None and job.job_id == "a1"
    pending.requeue(job)
    assert pending.peek().job_id == "a1"  # type: ignore[union-attr]
    pending.requeue(pending.pop(), inadmissible=True)  # type: ignore[arg-type]
    assert pending.peek().job_id == "a2"  # type: ignore[union-attr]
    assert len(pending) == 2 and pending.pending("t0") == 2 and "a1" in pending
    assert pending.wake("t1") == 1  # same tree
    assert pending.peek().job_id == "a1"  # type: ignore[union-attr]


def test_wake_reaches_only_the_same_tree() -> None:
    tree = QuotaTree([QueueSpec("r1"), QueueSpec("a", parent="r1"), QueueSpec("r2"), QueueSpec("b", parent="r2")])
    pending = PendingQueues(tree)
    pending.requeue(PendingJob("pa", "a", {H100: 1}), inadmissible=True)
    pending.requeue(PendingJob("pb", "b", {H100: 1}), inadmissible=True)
    pending.requeue(PendingJob("px", "gone", {H100: 1}), inadmissible=True)
    assert pending.wake("a") == 1 and [j.job_id for j in pending.parked()] == ["pb", "px"]
    assert pending.wake("gone") == 1 and [j.job_id for j in pending.parked()] == ["pb"]


def test_admission_order_without_state_matches_pending_queues() -> None:
    tree = siblings([4, 4, 4], [1, 1, 1], root=24)
    tree.admit("x0", "t0", {H100: 12})
    tree.admit("x1", "t1", {H100: 6})
    jobs = [
        PendingJob("a", "t0", {H100: 1}, created=0),
        PendingJob("b", "t1", {H100: 1}, created=1),
        PendingJob("c", "t2", {H100: 1}, created=2),
        PendingJob("d", "t2", {H100: 1}, created=3, priority=1),
        PendingJob("e", "t1", {H100: 1}, created=0.5),
    ]
    pending = PendingQueues(tree)
    for job in jobs:
        pending.push(job)
    assert [j.job_id for j in admission_order(tree, jobs)] == [j.job_id for j in pending.heads()] == ["d", "e", "a"]


def test_remove_forgets_live_and_parked_jobs() -> None:
    tree = siblings([4], [1])
    pending = PendingQueues(tree)
    pending.push(PendingJob("a", "t0", {H100: 1}))
    pending.requeue(PendingJob("b", "t0", {H100: 1}), inadmissible=True)
    assert pending.remove("a") is not None and pending.remove("b") is not None
    assert pending.remove("a") is None
    assert len(pending) == 0 and pending.heads() == [] and pending.pending("t0") == 0


def test_decayed_usage_keeps_a_recent_heavy_user_behind_for_a_while() -> None:
    now = [0.0]
    specs = [
        QueueSpec("org", quotas={H100: FlavorQuota(16)}),
        QueueSpec("t0", parent="org"),
        QueueSpec("t1", parent="org"),
    ]
    tree = QuotaTree(specs, fair_sharing=FairSharing(half_life_seconds=60), clock=lambda: now[0])
    tree.admit("x", "t0", {H100: 16})
    now[0] = 600.0  # ten half-lives at 16 GPUs: the decayed charge is about 16
    tree.release("x")
    assert dominant_share(tree, "t0") > 0.99
    now[0] = 660.0  # one half-life after the release
    assert dominant_share(tree, "t0") == 0.5 * (1 - 2**-10)
    assert dominant_share(tree, "t1") == 0.0
    # Without decay the share is back to zero at once.
    plain = QuotaTree(specs)
    plain.admit("x", "t0", {H100: 16})
    plain.release("x")
    assert dominant_share(plain, "t0") == 0.0


@settings(max_examples=100, deadline=None)
@given(
    used=st.lists(st.integers(0, 20), min_size=2, max_size=6),
    data=st.data(),
)
def test_pop_order_follows_priority_then_share(used: list[int], data: st.DataObject) -> None:
    n = len(used)
    nominals = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    weights = data.draw(st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=n, max_size=n))
    tree = siblings(nominals, weights, root=200)
    for i, amount in enumerate(used):
        if amount:
            tree.admit(f"x{i}", f"t{i}", {H100: amount})
    pending = PendingQueues(tree)
    request = data.draw(st.integers(1, 4))
    for i in range(n):
        pending.push(PendingJob(f"p{i}", f"t{i}", {H100: request}, priority=data.draw(st.integers(0, 1))))

    def oracle_share(i: int) -> float:
        # Sibling share by hand: borrowed (after the request) over the parent's pool, over the weight.
        parent_pool = 200 + sum(nominals)
        return max(0, used[i] + request - nominals[i]) / parent_pool / weights[i]

    popped = []
    while (job := pending.pop()) is not None:
        i = int(job.queue[1:])
        popped.append((-job.priority, oracle_share(i)))
    assert len(popped) == n
    assert popped == sorted(popped, key=lambda p: (p[0], p[1]))  # priority dominates, then lower share


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["push", "pop", "park", "remove", "wake"]), st.integers(0, 9)), max_size=60)
)
def test_no_pending_job_is_lost_or_duplicated(ops: list[tuple[str, int]]) -> None:
    tree = siblings([4, 4, 4], [1, 1, 1])
    pending = PendingQueues(tree)
    model: set[str] = set()
    popped: list[str] = []
    for op, n in ops:
        job = PendingJob(f"j{n}", f"t{n % 3}", {H100: 1 + n % 2}, priority=n % 2, created=float(n))
        if op == "push" and job.job_id not in model:
            pending.push(job)
            model.add(job.job_id)
        elif op == "pop" and (head := pending.pop()) is not None:
            model.remove(head.job_id)
            popped.append(head.job_id)
        elif op == "park" and (head := pending.pop()) is not None:
            pending.requeue(head, inadmissible=True)
        elif op == "remove":
            assert (pending.remove(job.job_id) is not None) == (job.job_id in model)
            model.discard(job.job_id)
        elif op == "wake":
            pending.wake()
        assert len(pending) == len(model)
        assert sum(pending.pending(q) for q in tree.leaves) == len(model)
        assert all(j in pending for j in model)
    pending.wake()
    rest = []
    while (head := pending.pop()) is not None:
        rest.append(head.job_id)
    assert sorted(rest) == sorted(model) and len(rest) == len(set(rest))


def test_tournament_siblings_compete_under_their_own_parent_first() -> None:
    # Kueue's fair-sharing tournament: d and e compete under B first, and only B's winner meets
    # C's under A. e1 is within e's nominal and beats d1 (55 over d's nominal) under B, although
    # B would borrow less from A with d1 than with e1.
    tree = QuotaTree(
        [
            QueueSpec("A"),
            QueueSpec("B", parent="A"),
            QueueSpec("C", parent="A"),
            QueueSpec("d", parent="B", quotas={H100: FlavorQuota(50)}),
            QueueSpec("e", parent="B", quotas={H100: FlavorQuota(50)}),
            QueueSpec("f", parent="C", quotas={H100: FlavorQuota(100)}),
        ]
    )
    tree.admit("d-run", "d", {H100: 100})
    tree.admit("f-run", "f", {H100: 70})
    assert tree.available("e") == {H100: 30}
    d1 = PendingJob("d1", "d", {H100: 5}, created=1.0)
    e1 = PendingJob("e1", "e", {H100: 30}, created=2.0)
    pending = PendingQueues(tree)
    pending.push(d1)
    pending.push(e1)
    assert pending.peek() == e1
    assert [j.job_id for j in pending.heads()] == ["e1", "d1"]
    assert [j.job_id for j in admission_order(tree, [d1, e1])] == ["e1", "d1"]


def test_tournament_winner_of_a_subtree_meets_the_other_subtrees_higher_up() -> None:
    # Under root: org-1 (a, b) and org-2 (c). org-1 borrows more than org-2, so org-2's head goes
    # first; then org-1's heads in the order a/b compete under org-1 (b within its nominal first).
    tree = QuotaTree(
        [
            QueueSpec("root", quotas={H100: FlavorQuota(40)}),
            QueueSpec("org-1", parent="root"),
            QueueSpec("org-2", parent="root"),
            QueueSpec("a", parent="org-1", quotas={H100: FlavorQuota(4)}),
            QueueSpec("b", parent="org-1", quotas={H100: FlavorQuota(4)}),
            QueueSpec("c", parent="org-2"),
        ]
    )
    tree.admit("x", "a", {H100: 12})  # a borrows 8; org-1 borrows 4 of the root's pool
    tree.admit("y", "c", {H100: 2})  # org-2 borrows 2
    jobs = [
        PendingJob("pa", "a", {H100: 1}, created=0),
        PendingJob("pb", "b", {H100: 1}, created=1),
        PendingJob("pc", "c", {H100: 1}, created=2),
    ]
    pending = PendingQueues(tree)
    for job in jobs:
        pending.push(job)
    assert [j.job_id for j in pending.heads()] == ["pc", "pb", "pa"]
    assert [j.job_id for j in admission_order(tree, jobs)] == ["pc", "pb", "pa"]


def test_share_under_a_parent_without_quota_divides_by_what_the_parent_can_reach() -> None:
    # org has no quota of its own: its children borrow from the root through it. Shares divide by
    # what org can reach (64), not by org's quota (0), so t1 (60 in use) is behind t2 (idle).
    tree = QuotaTree(
        [
            QueueSpec("root", quotas={H100: FlavorQuota(64)}),
            QueueSpec("org", parent="root"),
            QueueSpec("t1", parent="org"),
            QueueSpec("t2", parent="org"),
        ]
    )
    tree.admit("big", "t1", {H100: 60})
    assert dominant_share(tree, "t1") == 60 / 64
    assert dominant_share(tree, "t2", {H100: 4}) == 4 / 64
    pending = PendingQueues(tree)
    first = PendingJob("t1-next", "t1", {H100: 4}, created=0)
    second = PendingJob("t2-first", "t2", {H100: 4}, created=1)
    pending.push(first)
    pending.push(second)
    assert pending.pop() == second
    assert tree.admit("t2-first", "t2", {H100: 4})
    assert tree.available("t1") == {H100: 0}


def test_share_divides_by_the_parents_reach_capped_by_its_borrowing_limit() -> None:
    tree = QuotaTree(
        [
            QueueSpec("root", quotas={H100: FlavorQuota(64)}),
            QueueSpec("org", parent="root", quotas={H100: FlavorQuota(0, borrowing_limit=16)}),
            QueueSpec("t1", parent="org"),
            QueueSpec("t2", parent="org"),
        ]
    )
    tree.admit("x", "t1", {H100: 8})
    assert dominant_share(tree, "t1") == 8 / 16


def _kueue_tournament(tree: QuotaTree, heads: list[PendingJob]) -> list[PendingJob]:
    """Kueue's runTournament, restated: recurse from each root, the best child entry wins at each
    queue by (priority, its child's share after admission, creation time); pop it, run again."""
    left = list(heads)
    out: list[PendingJob] = []

    def share_under(job: PendingJob, queue: str) -> float:
        path = tree.path(job.queue)  # leaf first
        depth = len(tree.path(queue)) - 1
        return share_path(tree, job.queue, job.usage)[depth] if depth < len(path) - 1 else 0.0

    def run(queue: str) -> PendingJob | None:
        entries = [j for j in left if j.queue == queue]
        for child in (q for q in tree.queues if tree.path(q)[1:2] == [queue]):
            winner = run(child)
            if winner is not None:
                entries.append(winner)
        return min(entries, key=lambda j: (-j.priority, share_under(j, queue), j.created), default=None)

    roots = [q for q in tree.queues if len(tree.path(q)) == 1]
    while left:
        winners = [w for w in (run(r) for r in roots) if w is not None]
        best = min(winners, key=lambda j: (-j.priority, j.created))
        out.append(best)
        left.remove(best)
    return out


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_order_is_kueues_tournament(data: st.DataObject) -> None:
    specs = [QueueSpec("r", quotas={H100: FlavorQuota(data.draw(st.integers(0, 40)))})]
    leaves: list[str] = []
    for i in range(data.draw(st.integers(1, 3))):
        mid = f"m{i}"
        n_children = data.draw(st.integers(0, 3))
        nominal = data.draw(st.integers(0, 10))
        limit = data.draw(st.none() | st.integers(0, 10))
        specs.append(QueueSpec(mid, parent="r", weight=data.draw(st.sampled_from([0.5, 1.0, 2.0])),
                               quotas={H100: FlavorQuota(nominal, borrowing_limit=limit)}))
        if n_children == 0:
            leaves.append(mid)
        for j in range(n_children):
            specs.append(QueueSpec(f"{mid}l{j}", parent=mid, quotas={H100: FlavorQuota(data.draw(st.integers(0, 8)))}))
            leaves.append(f"{mid}l{j}")
    tree = QuotaTree(specs)
    for k in range(data.draw(st.integers(0, 8))):
        tree.admit(f"run{k}", data.draw(st.sampled_from(leaves)), {H100: data.draw(st.integers(1, 12))})
    heads = [
        PendingJob(f"p{i}", leaf, {H100: data.draw(st.integers(1, 8))}, priority=data.draw(st.integers(0, 1)),
                   created=float(data.draw(st.integers(0, 5))) + i / 100)
        for i, leaf in enumerate(leaves)
        if data.draw(st.booleans())
    ]
    expected = [j.job_id for j in _kueue_tournament(tree, heads)]
    assert [j.job_id for j in admission_order(tree, heads)] == expected
    pending = PendingQueues(tree)
    for job in heads:
        pending.push(job)
    assert [j.job_id for j in pending.heads()] == expected
    assert (pending.peek().job_id if heads else None) == (expected[0] if expected else None)  # type: ignore[union-attr]
