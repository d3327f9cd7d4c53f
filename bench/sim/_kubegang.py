"""The ``kubegang`` policy: the production core, driven as the operator's admission cycle drives it.

Per pass, in rounds until a round admits nothing: take the heads of the leaf queues in fair-share
order (``PendingQueues.heads``), check quota up the tree (``QuotaTree.can_admit``), ``plan`` the whole
gang on the snapshot, allocate it and charge the quota. A head that does not fit in quota is parked
until quota frees; one that fits in quota but not in the cluster keeps its place (the operator
retries it next cycle). With priorities, a blocked head asks the quota policy for candidates
(``candidates_for``) and the placement-aware planner (``plan_preemption``) for the fewest whole
gangs whose eviction lets it run; victims go back to their queues and restart from scratch.

Queues: one leaf per team under one root; each leaf's nominal quota is an equal share of every GPU
product, with unlimited borrowing and lending, so quota shapes the order (fair share) but never
idles GPUs. Leaves may preempt lower-priority jobs in their own queue and, while borrowing, in others.
"""

from __future__ import annotations

import random

from kubegang import preemption
from kubegang.placement import Placement, Snapshot, plan
from kubegang.quota import (
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

ANY_PRODUCT = "any"
"""Quota flavour for jobs that name no GPU product."""


class KubegangPolicy:
    """Queue tree + fair share + whole-gang placement (+ gang preemption when priorities differ)."""

    name = "kubegang"

    def __init__(self, queues: int = 4) -> None:
        self.queues = queues
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
        progress = True
        while progress:
            progress = False
            for head in self.pending.heads():
                if self._try_admit(head, step):
                    progress = True
        return step

    def _try_admit(self, head: PendingJob, step: Step) -> bool:
        job = self.jobs[head.job_id]
        self.pending.remove(head.job_id)
        decision = self.tree.can_admit(head.queue, head.usage)
        if not decision:
            if not self.tree.can_ever_fit(head.queue, head.usage):
                raise ValueError(f"job {job.id} can never fit in queue {head.queue}: {decision}")
            if not self._preempt(head, step):
                self.pending.requeue(head, inadmissible=True)
                return False
        gang = gang_request(job)
        result = plan(gang, self.snapshot)
        if not isinstance(result, Placement):
            if not self._preempt(head, step):
                self.pending.requeue(head)
                return False
            result = plan(gang, self.snapshot)
            if not isinstance(result, Placement):
                raise AssertionError(f"preemption for {job.id} was planned but the gang does not fit")
        if not self.tree.admit(job.id, head.queue, head.usage):
            self.pending.requeue(head, inadmissible=True)
            return False
        self.snapshot.allocate_all(result.allocations(gang))
        self.running[job.id] = RunningJob(job.id, head.queue, head.usage, job.priority, self.now)
        step.started.append(job.id)
        return True

    def _preempt(self, head: PendingJob, step: Step) -> bool:
        """Evict the fewest whole gangs that let ``head`` fit, when quota policy allows any."""
        if not any(r.priority < head.priority for r in self.running.values()):
            return False
        allowed = candidates_for(head, self.tree, self.running.values())
        if not allowed:
            return False
        offered = [preemption.Candidate(c.job.job_id, c.job.priority, c.job.started) for c in allowed]
        found = preemption.plan_preemption(gang_request(self.jobs[head.job_id]), self.snapshot, offered)
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
