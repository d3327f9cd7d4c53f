"""The ``kubegang`` policy: the production core, driven as the operator's admission cycle drives it.

Per pass, in rounds until nothing is left to try: take the heads of the leaf queues in fair-share
order (``PendingQueues.heads``; reservation holders first, ``Backfill.order``), check quota up the
tree (``QuotaTree.can_admit``), ``plan`` the whole gang on the snapshot (nodes reserved for another
job excluded), allocate it and charge the quota; after each admission the heads are re-ordered (fair
share moved). A head that does not fit in quota is parked until quota frees; one that fits in quota
but not on the GPUs steps aside for the rest of the pass so the jobs behind it may start
(``BestEffortFIFO`` backfill, ``kubegang.quota.Backfill``), and once it has been blocked for
``reserve_after_seconds`` it reserves the nodes of the placement it would get once the fewest running
gangs are gone (``plan_preemption`` over all running gangs, waited for instead of evicted). With
``StrictFIFO`` it keeps its place and its queue waits. Within a pass, a gang at least as big (pods and
GPUs per pod, same product) as one that found no room is not planned again. With priorities, a
blocked head asks the quota policy for candidates (``candidates_for``) and the placement-aware
planner (``plan_preemption``) for the fewest whole gangs whose eviction lets it run; victims go back
to their queues and restart from scratch.

Queues: one leaf per team under one root; each leaf's nominal quota is an equal share of every GPU
product, with unlimited borrowing and lending, so quota shapes the order (fair share) but never
idles GPUs. Leaves may preempt lower-priority jobs in their own queue and, while borrowing, in others.
"""

from __future__ import annotations

import dataclasses
import enum
import random

from kubegang import preemption
from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.quota import (
    Backfill,
    BackfillPolicy,
    BorrowWithinParent,
    FlavorQuota,
    PendingJob,
    PendingQueues,
    PreemptionPolicy,
    QueueSpec,
    QuotaTree,
    RunningJob,
    WithinQueue,
    candidates_for,
    fits_after_eviction,
)

from ._cluster import Cluster
from ._engine import Step
from ._metrics import gang_request
from ._workload import Job


class _Outcome(enum.Enum):
    ADMITTED = "admitted"
    NO_QUOTA = "no quota"
    """Parked until quota frees (``PendingQueues.wake``)."""
    NO_ROOM = "no room"
    """Fits in quota, not on the GPUs."""


def _covers(small: Job, job: Job) -> bool:
    """Whether ``job`` needs at least what ``small`` needs (so it cannot fit where ``small`` did not)."""
    return small.product == job.product and small.pods <= job.pods and small.gpus_per_pod <= job.gpus_per_pod

ANY_PRODUCT = "any"
"""Quota flavour for jobs that name no GPU product."""


class KubegangPolicy:
    """Queue tree + fair share + whole-gang placement (+ gang preemption when priorities differ)."""

    name = "kubegang"

    def __init__(self, queues: int = 4, backfill: BackfillPolicy | None = None) -> None:
        self.queues = queues
        self.backfill_policy = backfill or BackfillPolicy()
        self.now = 0.0

    def reset(self, cluster: Cluster, snapshot: Snapshot, rng: random.Random) -> None:
        self.snapshot = snapshot
        flavours = [*cluster.products, ANY_PRODUCT]
        share = -(-cluster.gpus // self.queues)
        specs = [QueueSpec("cluster")]
        specs += [
            QueueSpec(
                f"team-{i}", parent="cluster",
                quotas={f: FlavorQuota(nominal=share) for f in flavours},
                preemption=PreemptionPolicy(within_queue=WithinQueue.LOWER_PRIORITY,
                                            borrow_within_parent=BorrowWithinParent.LOWER_PRIORITY),
            )
            for i in range(self.queues)
        ]
        self.tree = QuotaTree(specs, clock=lambda: self.now)
        self.pending = PendingQueues(self.tree)
        self.backfill = Backfill(self.backfill_policy)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, RunningJob] = {}

    def _pending_job(self, job: Job) -> PendingJob:
        return PendingJob(job.id, self._queue(job), {job.product or ANY_PRODUCT: job.gpus}, job.priority, job.arrival)

    def _queue(self, job: Job) -> str:
        return job.queue if job.queue in self.tree.leaves else "team-0"

    def submit(self, job: Job, now: float) -> None:
        self.now = now
        self.jobs[job.id] = job
        self.pending.push(self._pending_job(job))

    def finished(self, job: Job, now: float) -> None:
        self.now = now
        self.running.pop(job.id, None)
        self.backfill.forget(job.id)
        self.tree.release(job.id)
        self.pending.wake()

    def waiting(self) -> int:
        return len(self.pending)

    def partial_gpus(self) -> int:
        return 0  # a gang is allocated whole or not at all

    def next_timer(self) -> float | None:
        return None

    def schedule(self, now: float) -> Step:
        self.now = now
        step = Step()
        no_room: list[Job] = []
        try:
            while True:
                progress = False
                for head in self.backfill.order(self.pending.heads()):
                    outcome = self._try_admit(head, step, no_room)
                    if outcome is _Outcome.ADMITTED:
                        progress = True
                        break  # fair share moved: re-order the heads
                    if outcome is _Outcome.NO_ROOM and self.backfill.steps_aside:
                        self.pending.step_aside(head.job_id)
                        progress = True  # the job behind it is the new head
                if not progress:
                    break
        finally:
            self.pending.restore()
        return step

    def _request(self, job: Job) -> GangRequest:
        """The job's gang, kept off the nodes reserved for other jobs."""
        excluded = self.backfill.excluded_for(job.id)
        gang = gang_request(job)
        return dataclasses.replace(gang, excluded_nodes=excluded) if excluded else gang

    def _try_admit(self, head: PendingJob, step: Step, no_room: list[Job]) -> _Outcome:
        job = self.jobs[head.job_id]
        holder = self.backfill.reservation(head.job_id) is not None
        if not holder and any(_covers(small, job) for small in no_room):
            self.backfill.blocked(job.id, self.now)
            return _Outcome.NO_ROOM  # a smaller gang found no room in this pass: neither will this one
        self.pending.remove(head.job_id)
        decision = self.tree.can_admit(head.queue, head.usage)
        if not decision:
            if not self.tree.can_ever_fit(head.queue, head.usage):
                raise ValueError(f"job {job.id} can never fit in queue {head.queue}: {decision}")
            if not self._preempt(head, step):
                self.pending.requeue(head, inadmissible=True)
                self._blocked(job, None)  # a gang bigger than the free GPUs is refused by quota first
                return _Outcome.NO_QUOTA
            no_room.clear()  # evictions freed GPUs
        gang = self._request(job)
        result = plan(gang, self.snapshot)
        if not isinstance(result, Placement):
            if not self._preempt(head, step):
                self.pending.requeue(head)
                self._blocked(job, None if holder else no_room)
                return _Outcome.NO_ROOM
            no_room.clear()
            result = plan(gang, self.snapshot)
            if not isinstance(result, Placement):
                raise AssertionError(f"preemption for {job.id} was planned but the gang does not fit")
        if not self.tree.admit(job.id, head.queue, head.usage):
            self.pending.requeue(head, inadmissible=True)
            return _Outcome.NO_QUOTA
        self.snapshot.allocate_all(result.allocations(gang))
        self.running[job.id] = RunningJob(job.id, head.queue, head.usage, job.priority, self.now)
        self.backfill.forget(job.id)
        step.started.append(job.id)
        return _Outcome.ADMITTED

    def _blocked(self, job: Job, no_room: list[Job] | None) -> None:
        """``job`` waits for GPUs or quota: note it, and reserve its nodes once it is due."""
        if no_room is not None:
            no_room.append(job)
        self.backfill.blocked(job.id, self.now)
        if not self.backfill.reservation_due(job.id, self.now):
            return
        # The gangs to wait for: the fewest whose end lets it run (oldest first on ties), not evicted.
        waited = [preemption.Candidate(r.job_id, 0, -r.started) for r in self.running.values()]
        found = preemption.plan_preemption(gang_request(job), self.snapshot, waited)
        if found is not None:
            self.backfill.reserve(job.id, found.placement.nodes)

    def _preempt(self, head: PendingJob, step: Step) -> bool:
        """Evict the fewest whole gangs that let ``head`` fit, when quota policy allows any."""
        if not any(r.priority < head.priority for r in self.running.values()):
            return False
        allowed = candidates_for(head, self.tree, self.running.values())
        if not allowed:
            return False
        offered = [preemption.Candidate(c.job.job_id, c.job.priority, c.job.started) for c in allowed]
        found = preemption.plan_preemption(self._request(self.jobs[head.job_id]), self.snapshot, offered)
        if found is None or not found.victims:
            return False
        if not fits_after_eviction(self.tree, head, found.victims):
            return False
        for victim in found.victims:
            self.snapshot.release(victim)
            self.tree.release(victim)
            self.running.pop(victim)
            self.pending.push(self._pending_job(self.jobs[victim]))
            step.evicted.append(victim)
        self.pending.wake()
        return True
