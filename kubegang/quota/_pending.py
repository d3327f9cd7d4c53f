"""Pending jobs per leaf queue, and the order in which the admission cycle considers them.

Each leaf keeps a heap ordered by priority, then creation time (FIFO); only its head competes in a
cycle. Heads are ordered across queues by priority, then Kueue's fair-sharing tournament (siblings
compete under their parent by their share after admitting the head, lower first, and the winner
moves up; ``tournament_order``), then creation time. With Q leaves and N jobs, ``push`` is
O(log N) and choosing the next head is O(Q x depth x flavours), independent of N: 10,000 jobs in
100 queues cost no more than 100.

A head that does not fit in quota is *parked* (Kueue's BestEffortFIFO: the next job of its queue
becomes the head) until ``wake`` is called, which the owner does when quota frees up in its tree.
A head that fits in quota but not on the GPUs may *step aside* for the rest of a cycle
(``step_aside`` / ``restore``), so the jobs behind it are considered (backfill, see ``_backfill``).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kubegang.quota._fairshare import Contender, share_path, tournament_order, tournament_winner
from kubegang.quota._tree import QuotaTree


@dataclass(frozen=True)
class PendingJob:
    """A job waiting for admission."""

    job_id: str
    queue: str
    """The leaf queue it was submitted to."""
    usage: Mapping[str, int] = field(default_factory=dict)
    """GPUs per flavour the whole gang needs."""
    priority: int = 0
    """Higher goes first, before fair share is considered."""
    created: float = 0.0
    """Creation time (seconds, any epoch): FIFO among equals."""


def admission_order(tree: QuotaTree, jobs: Iterable[PendingJob]) -> list[PendingJob]:
    """The head of each leaf queue among ``jobs``, in admission order, without keeping state.

    For callers that rebuild the pending set every cycle from a cache; ``PendingQueues`` does the
    same incrementally.
    """
    heads: dict[str, PendingJob] = {}
    for job in jobs:
        best = heads.get(job.queue)
        if best is None or (-job.priority, job.created, job.job_id) < (-best.priority, best.created, best.job_id):
            heads[job.queue] = job
    contenders: list[Contender[PendingJob]] = []
    for job in heads.values():
        try:
            shares: tuple[float, ...] | None = share_path(tree, job.queue, job.usage)
        except KeyError:
            shares = None
        contenders.append(Contender(job, job.queue, job.priority, shares, (job.created, job.job_id)))
    return tournament_order(tree, contenders)


_Entry = tuple[int, float, int, str]  # (-priority, created, sequence, job id)
T = TypeVar("T")
Rank = tuple[str, int, float]
"""A waiting job's (leaf queue, priority, creation time): what orders it within its queue."""


def within_queue_key(priority: int, created: float, sequence: int) -> tuple[int, float, int]:
    """A leaf queue's order, lowest first: higher priority, then older, then pushed earlier."""
    return (-priority, created, sequence)


def leaf_heads(tree: QuotaTree, jobs: Sequence[T], rank: Callable[[T], Rank],
               as_pending: Callable[[T], PendingJob]) -> list[T]:
    """The head of each leaf queue among ``jobs``, in admission order: what ``PendingQueues.heads`` gives
    with every job pushed in turn, for a caller that keeps its waiting jobs itself.

    ``rank`` gives a job's (queue, priority, created), cheaply; ``as_pending`` its ``PendingJob`` with the
    same three, which is built for the heads only. The admission cycle asks once per round with every
    waiting job, and building (and pushing) a ``PendingJob`` for each was most of a cycle's CPU over a
    long queue; a job's position in ``jobs`` is the sequence a push would give it, so the order is the same.
    """
    best: dict[str, tuple[tuple[int, float, int], int]] = {}
    for index, job in enumerate(jobs):
        queue, priority, created = rank(job)
        key = within_queue_key(priority, created, index)
        held = best.get(queue)
        if held is None or key < held[0]:
            best[queue] = (key, index)
    queues = PendingQueues(tree)
    by_id: dict[str, T] = {}
    for _, index in sorted(best.values(), key=lambda head: head[1]):
        pending = as_pending(jobs[index])
        queues.push(pending)
        by_id[pending.job_id] = jobs[index]
    return [by_id[head.job_id] for head in queues.heads()]


class QueueLanes(Generic[T]):
    """Each queue's waiting jobs in the queue's own order, sorted once, read front by front.

    The admission cycle tries heads in rounds: after a round, the next job of each queue whose head
    was tried becomes that queue's head. Ranking every waiting job again in each round made a cycle
    over N waiting jobs cost rounds x N (64 x 100,000 rank calls at 100,000 jobs); with the lanes
    sorted once, a round reads only the fronts, so it costs the number of queues.

    A job ranked None is in no leaf queue (the quota port refuses it): it is a lane of its own, so it
    is at the front at once, as every such job is a head of ``order``.
    """

    def __init__(self, ranked: Iterable[tuple[T, Rank | None]], uid: Callable[[T], str]) -> None:
        self._uid = uid
        lanes: dict[object, list[tuple[tuple[int, float, int], T]]] = {}
        for index, (job, rank) in enumerate(ranked):
            if rank is None:
                lanes[("", index)] = [((0, 0.0, index), job)]
                continue
            queue, priority, created = rank
            lanes.setdefault(queue, []).append((within_queue_key(priority, created, index), job))
        self._lanes: list[list[tuple[tuple[int, float, int], T]]] = []
        for lane in lanes.values():
            lane.sort(key=lambda entry: entry[0])
            self._lanes.append(lane)
        self._front = [0] * len(self._lanes)

    def fronts(self, done: Container[str]) -> list[T]:
        """The first job of each lane that is not ``done`` (by UID), in the order the jobs were given
        (the sequence ``leaf_heads`` breaks ties by)."""
        heads: list[tuple[int, T]] = []
        for number, lane in enumerate(self._lanes):
            at = self._front[number]
            while at < len(lane) and self._uid(lane[at][1]) in done:
                at += 1
            self._front[number] = at
            if at < len(lane):
                key, job = lane[at]
                heads.append((key[2], job))
        heads.sort(key=lambda head: head[0])
        return [job for _, job in heads]


class PendingQueues:
    """The pending jobs of every leaf queue of a tree."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self._heaps: dict[str, list[_Entry]] = {}
        self._live: dict[str, tuple[PendingJob, int]] = {}
        self._parked: dict[str, PendingJob] = {}
        self._aside: dict[str, tuple[PendingJob, int]] = {}
        self._per_queue: Counter[str] = Counter()
        self._seq = itertools.count()
        # queue -> (head's sequence, path version, contender): a head's shares change only when a
        # charge on its path does, so most heads keep their match keys from one decision to the next.
        self._contended: dict[str, tuple[int, int, Contender[PendingJob]]] = {}

    def __len__(self) -> int:
        return len(self._live) + len(self._parked) + len(self._aside)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._live or job_id in self._parked or job_id in self._aside

    def pending(self, queue: str) -> int:
        """Jobs waiting in this leaf queue, parked ones included (for the GPUQueue status)."""
        return self._per_queue[queue]

    def push(self, job: PendingJob) -> None:
        """Add a job; a ValueError if a job with that id is already pending."""
        if job.job_id in self:
            raise ValueError(f"job {job.job_id!r} is already pending")
        self._enqueue(job)
        self._per_queue[job.queue] += 1

    def remove(self, job_id: str) -> PendingJob | None:
        """Forget a pending job (it was deleted or suspended); None if it was not pending."""
        entry = self._live.pop(job_id, None) or self._aside.pop(job_id, None)
        job = entry[0] if entry else self._parked.pop(job_id, None)
        if job is not None:
            self._per_queue[job.queue] -= 1
        return job

    def heads(self) -> list[PendingJob]:
        """The head of every leaf queue with a waiting job, in admission order."""
        return tournament_order(self.tree, self._contenders())

    def peek(self) -> PendingJob | None:
        """The job the admission cycle should consider next."""
        return tournament_winner(self.tree, self._contenders())

    def pop(self) -> PendingJob | None:
        """Take the next job out of the queues (``requeue`` it if it is not admitted)."""
        job = self.peek()
        if job is not None:
            self.remove(job.job_id)
        return job

    def requeue(self, job: PendingJob, *, inadmissible: bool = False) -> None:
        """Put back a job taken with ``pop``, keeping its place; parked until ``wake`` if inadmissible."""
        if inadmissible:
            if job.job_id in self:
                raise ValueError(f"job {job.job_id!r} is already pending")
            self._parked[job.job_id] = job
            self._per_queue[job.queue] += 1
        else:
            self.push(job)

    def wake(self, queue: str | None = None) -> int:
        """Return parked jobs to their queues: all, or those that share a tree with ``queue``."""
        if queue is None:
            woken = list(self._parked.values())
        else:
            root = self._root(queue)
            woken = [j for j in self._parked.values() if self._root(j.queue) == root]
        for job in woken:
            del self._parked[job.job_id]
            self._enqueue(job)
        return len(woken)

    def step_aside(self, job_id: str) -> None:
        """Hide a waiting job until ``restore``, so the next job of its queue becomes the head.

        For a head that fits in quota but not on the GPUs: the rest of this cycle backfills behind
        it. It keeps its place (priority, creation time, sequence) for the next cycle.
        """
        entry = self._live.pop(job_id, None)
        if entry is None:
            raise ValueError(f"job {job_id!r} is not a waiting job of any queue (parked, aside or unknown)")
        self._aside[job_id] = entry

    def restore(self) -> int:
        """Return every job that stepped aside to its place in its queue; how many there were."""
        restored = len(self._aside)
        for job, seq in self._aside.values():
            self._push(job, seq)
        self._aside.clear()
        return restored

    def parked(self) -> list[PendingJob]:
        return list(self._parked.values())

    def _enqueue(self, job: PendingJob) -> None:
        self._push(job, next(self._seq))

    def _push(self, job: PendingJob, seq: int) -> None:
        self._live[job.job_id] = (job, seq)
        heapq.heappush(self._heaps.setdefault(job.queue, []),
                       (*within_queue_key(job.priority, job.created, seq), job.job_id))

    def _head(self, queue: str) -> PendingJob | None:
        heap = self._heaps[queue]
        while heap:
            _, _, seq, job_id = heap[0]
            live = self._live.get(job_id)
            if live is not None and live[1] == seq:
                return live[0]
            heapq.heappop(heap)  # removed or re-pushed since: a stale entry
        del self._heaps[queue]
        return None

    def _contenders(self) -> list[Contender[PendingJob]]:
        heads = [h for h in (self._head(q) for q in list(self._heaps)) if h is not None]
        return [self._contender(h) for h in heads]

    def _contender(self, job: PendingJob) -> Contender[PendingJob]:
        seq = self._live[job.job_id][1]
        version = self.tree._path_version(job.queue)
        cacheable = version is not None and not self.tree.fair_sharing.half_life_seconds
        cached = self._contended.get(job.queue)
        if cacheable and cached is not None and cached[0] == seq and cached[1] == version:
            return cached[2]
        # An unknown queue (version None) has no shares: admission refuses it; it competes last.
        shares = None if version is None else share_path(self.tree, job.queue, job.usage)
        contender = Contender(job, job.queue, job.priority, shares, (job.created, seq))
        if cacheable and version is not None:
            self._contended[job.queue] = (seq, version, contender)
        return contender

    def _root(self, queue: str) -> str | None:
        try:
            return self.tree.path(queue)[-1]
        except KeyError:
            return None
