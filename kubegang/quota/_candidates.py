"""The policy half of preemption: which running jobs a pending job may evict, by quota policy.

Where the victims must come from is the placement-aware planner's question (kubegang.preemption):
it takes these candidates, in this order, and picks the smallest set of whole gangs that makes the
preemptor placeable, checking with ``fits_after_eviction`` that quota would admit it too. Which of
them quota needs gone is ``quota_victims`` (Kueue's minimalPreemptions). This module says who *may*
be evicted, after Kueue's rules, generalised to a tree:

- same queue: lower priority, when the queue's ``withinQueue`` is ``LowerPriority``;
- another queue of the same tree: only while that queue's side of the tree (the child of the lowest
  common ancestor that holds it) borrows a flavour the preemptor needs from the ancestor, and
  - ``reclaimFromBorrowers`` ``Any`` / ``LowerPriority``: when the preemptor's side stays within its
    quota after admission (it reclaims what its side is entitled to);
  - ``borrowWithinParent`` ``LowerPriority``: lower priority, when the preemptor would itself borrow.

Order: jobs of borrowing queues first (they run on quota that is not theirs), then lower priority,
then the most recently started (least work lost), then job id.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubegang.quota._decision import Decision
from kubegang.quota._pending import PendingJob
from kubegang.quota._spec import BorrowWithinParent, ReclaimFromBorrowers, WithinQueue
from kubegang.quota._tree import QuotaTree, _Node


@dataclass(frozen=True)
class RunningJob:
    """An admitted job, as preemption sees it."""

    job_id: str
    queue: str
    usage: Mapping[str, int] = field(default_factory=dict)
    priority: int = 0
    started: float = 0.0
    """When it was admitted (seconds, any epoch); later-started jobs are evicted first."""


class CandidateReason(enum.StrEnum):
    """Which policy allows the eviction (for the victim's condition and event)."""

    WITHIN_QUEUE = "WithinQueue"
    RECLAIM_FROM_BORROWERS = "ReclaimFromBorrowers"
    BORROW_WITHIN_PARENT = "BorrowWithinParent"


@dataclass(frozen=True)
class Candidate:
    """A running job that policy allows the preemptor to evict."""

    job: RunningJob
    reason: CandidateReason
    message: str
    """Why, for humans: names the preemptor, both queues and the policy."""


def candidates_for(preemptor: PendingJob, tree: QuotaTree, running: Iterable[RunningJob]) -> list[Candidate]:
    """Running jobs the preemptor's queue policy allows it to evict, best victims first."""
    if not tree.can_ever_fit(preemptor.queue, preemptor.usage):
        return []  # evicting anything would not let it run
    node = tree._node(preemptor.queue)
    needed = {f for f, a in preemptor.usage.items() if a > 0}
    steps = tree._extra_along_path(node, preemptor.usage)
    # Only reclaimFromBorrowers: Any may evict a job that does not have lower priority: skipping the
    # others here keeps a blocked head's question O(running) cheap comparisons, not O(running) judgements.
    any_priority = node.spec.preemption.reclaim_from_borrowers is ReclaimFromBorrowers.ANY
    out: list[tuple[tuple[int, int, float, str], Candidate]] = []
    for job in running:
        if job.job_id == preemptor.job_id or (job.priority >= preemptor.priority and not any_priority):
            continue
        if not needed.intersection(f for f, a in job.usage.items() if a > 0):
            continue
        candidate = _judge(preemptor, job, tree, node, needed=needed, steps=steps)
        if candidate is not None:
            same = 1 if job.queue == preemptor.queue else 0
            out.append(((same, job.priority, -job.started, job.job_id), candidate))
    out.sort(key=lambda pair: pair[0])
    return [c for _, c in out]


def fits_after_eviction(tree: QuotaTree, preemptor: PendingJob, victims: Iterable[str]) -> Decision:
    """Whether quota would admit the preemptor once ``victims`` (job ids) are released; changes nothing."""
    with tree.simulate():
        for job_id in victims:
            tree.release(job_id)
        return tree.can_admit(preemptor.queue, preemptor.usage)


def quota_victims(tree: QuotaTree, preemptor: PendingJob, candidates: Iterable[str]) -> list[str] | None:
    """The fewest candidates whose eviction lets quota admit ``preemptor``; changes nothing.

    ``candidates``: job ids in the order to try them, least disruptive first (``candidates_for``'s
    order). Kueue's minimalPreemptions, generalised to the tree:

    1. Walk the candidates, evicting each (inside ``tree.simulate()``) until the preemptor fits.
       A candidate of another queue is *skipped* when, with the victims chosen so far gone, its
       side of the tree (the child of the lowest common ancestor that holds it) no longer borrows
       a flavour the preemptor needs: it is back within its quota, and evicting it would take
       quota the preemptor is not entitled to reclaim. The preemptor's own queue is never skipped.
    2. Fill back: in reverse order, keep every chosen victim except the last whose return still
       lets the preemptor fit. Each remaining victim is needed: without any one of them it does not
       fit (fitting is monotone in what is released).

    Returns the victims in candidate order; ``[]`` when quota admits the preemptor already (quota is
    not the problem), None when it can never fit or the candidates are not enough. Unknown job ids
    and repeats are ignored. Cost: one quota check (O(depth x flavours)) per candidate tried.
    """
    usage = preemptor.usage
    if tree.can_admit(preemptor.queue, usage):
        return []
    if not tree.can_ever_fit(preemptor.queue, usage):
        return None
    needed = {f for f, a in usage.items() if a > 0}
    chosen: list[str] = []
    held: dict[str, tuple[str, dict[str, int]]] = {}
    with tree.simulate():
        fits = False
        for job_id in candidates:
            if job_id not in tree:
                continue  # unknown, or chosen already
            queue, amounts = tree.job_queue(job_id), tree.job_usage(job_id)
            if queue != preemptor.queue and not _still_borrows(tree, preemptor.queue, queue, amounts, needed):
                continue
            tree.release(job_id)
            chosen.append(job_id)
            held[job_id] = (queue, amounts)
            if tree.can_admit(preemptor.queue, usage):
                fits = True
                break
        if not fits:
            return None
        for i in range(len(chosen) - 2, -1, -1):
            job_id = chosen[i]
            queue, amounts = held[job_id]
            tree.record(job_id, queue, amounts)
            if tree.can_admit(preemptor.queue, usage):
                del chosen[i]
            else:
                tree.release(job_id)
    return chosen


def _still_borrows(tree: QuotaTree, preemptor_queue: str, queue: str, usage: Mapping[str, int],
                   needed: set[str]) -> bool:
    """Whether ``queue``'s side below the common ancestor borrows, now, a needed flavour ``usage`` has."""
    lca = tree.lowest_common_ancestor(preemptor_queue, queue)
    if lca is None:
        return False
    return _borrowing_side(tree, queue, lca, needed & {f for f, a in usage.items() if a > 0}) is not None


def _judge(
    preemptor: PendingJob,
    job: RunningJob,
    tree: QuotaTree,
    node: _Node,
    *,
    needed: set[str],
    steps: list[tuple[_Node, dict[str, int]]],
) -> Candidate | None:
    policy = node.spec.preemption
    lower = job.priority < preemptor.priority
    who = f"job {job.job_id} (queue {job.queue}, priority {job.priority})"
    by = f"job {preemptor.job_id} (queue {preemptor.queue}, priority {preemptor.priority})"
    if job.queue == preemptor.queue:
        if policy.within_queue is WithinQueue.LOWER_PRIORITY and lower:
            return Candidate(job, CandidateReason.WITHIN_QUEUE, f"{who} has lower priority than {by} in the same queue")
        return None
    if job.queue not in tree.queues:
        return None
    lca = tree.lowest_common_ancestor(preemptor.queue, job.queue)
    if lca is None:
        return None  # separate trees share no quota
    borrowing = _borrowing_side(tree, job.queue, lca, needed & set(job.usage))
    if borrowing is None:
        return None
    within = _stays_within_quota(steps, lca, needed)
    reclaim = policy.reclaim_from_borrowers
    if within and (reclaim is ReclaimFromBorrowers.ANY or (reclaim is ReclaimFromBorrowers.LOWER_PRIORITY and lower)):
        return Candidate(
            job,
            CandidateReason.RECLAIM_FROM_BORROWERS,
            f"{who} runs on quota borrowed by queue {borrowing}; {by} reclaims quota of its own",
        )
    if not within and policy.borrow_within_parent is BorrowWithinParent.LOWER_PRIORITY and lower:
        return Candidate(
            job,
            CandidateReason.BORROW_WITHIN_PARENT,
            f"{who} runs on quota borrowed by queue {borrowing} and has lower priority than {by}",
        )
    return None


def _borrowing_side(tree: QuotaTree, queue: str, lca: str, flavors: set[str]) -> str | None:
    """The child of ``lca`` holding ``queue``, if it borrows one of ``flavors`` from ``lca``'s pool.

    Borrowing deeper down, from inside that subtree, takes nothing from the preemptor's side.
    """
    side = _child_of(tree._node(queue), lca)
    if any(side.charged.get(f, 0) > side.quota.get(f, 0) for f in flavors):
        return side.name
    return None


def _stays_within_quota(steps: list[tuple[_Node, dict[str, int]]], lca: str, flavors: set[str]) -> bool:
    """Whether, after admission, the preemptor's side below ``lca`` would stay within its quota."""
    for (n, extra), (parent, _) in itertools.pairwise(steps):
        if parent.name == lca:
            return not any(n.charged[f] + extra.get(f, 0) > n.quota[f] for f in flavors if f in n.charged)
    return True


def _child_of(node: _Node, ancestor: str) -> _Node:
    while node.parent is not None and node.parent.name != ancestor:
        node = node.parent
    return node
