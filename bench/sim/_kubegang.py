"""The ``kubegang`` policy: the production admission cycle (``kubegang.admission``), in simulated time.

The simulator has no admission loop of its own. Each scheduling pass runs ``AdmissionCycle.schedule``
(the code the operator's leader runs) with ``run_sync`` and answers its effects from the simulated
cluster, as the operator answers them from the extender and the API server:

- ``Plan`` / ``Reserve`` / ``Release``: the core's ``plan`` on the run's snapshot, ``allocate_all``;
- ``WhatIf``: ``kubegang.preemption.plan_preemption`` over the snapshot (the extender's answer);
- ``Evict``: release the victim's GPUs and quota, back to its queue (a requeued job restarts);
- ``Admit``: the gang starts (it holds its GPUs from ``Reserve``).

Quota is the port ``_TreeQuota`` over ``kubegang.quota`` (the same ``leaf_heads`` order, ``candidates_for``
policy and ``quota_victims`` chooser the operator's ``QuotaBook`` uses). Evictions are instantaneous
here, so a pass runs cycles until one admits and preempts nothing.

Queues: ``queues`` leaves under one root (default **one**, so that kubegang is compared with the
baseline models, which have no fair share, under the same order: priority, then arrival); each
leaf's nominal quota is an equal share of every GPU product, with unlimited borrowing and lending,
so with several leaves quota shapes the order (fair share) but never idles GPUs. Leaves may preempt
lower-priority jobs in their own queue and, while borrowing, in others.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from kubegang import preemption
from kubegang.admission import (
    AdmissionCycle,
    Admit,
    AdmitResult,
    CycleSettings,
    Effect,
    Evict,
    Plan,
    PlanAnswer,
    Preemptible,
    Release,
    Reserve,
    Verdict,
    WhatIf,
    WhatIfAnswer,
    quota_verdict,
    run_sync,
)
from kubegang.placement import AllocationError, Placement, Snapshot, plan
from kubegang.quota import (
    BackfillPolicy,
    BorrowWithinParent,
    FlavorQuota,
    PendingJob,
    PreemptionPolicy,
    QueueSpec,
    QuotaTree,
    Rank,
    RunClass,
    RunningJob,
    RunTimeHistory,
    WithinQueue,
    candidates_for,
    fits_after_eviction,
    leaf_heads,
    quota_victims,
)

from ._cluster import Cluster
from ._engine import Step
from ._metrics import gang_request
from ._workload import Job

ANY_PRODUCT = "any"
"""Quota flavour for jobs that name no GPU product."""
MAX_CYCLES_PER_PASS = 16
"""Cycles run back to back in one pass while they admit or preempt (evictions take no time here)."""


@dataclasses.dataclass(frozen=True, eq=False)
class _SimJob:
    """A simulated job as the admission cycle sees it (``kubegang.admission.Workload``)."""

    job: Job
    queue: str
    excluded_nodes: frozenset[str] = frozenset()
    previous_domain: str | None = None
    requests_gpus: bool = True
    generation: int = 1
    use_limits: bool = True
    """Whether the cycle sees the job's time limit (the GPUJob's ``timeLimitSeconds``)."""

    @property
    def uid(self) -> str:
        return self.job.id

    @property
    def key(self) -> str:
        return self.job.id

    @property
    def time_limit(self) -> float | None:
        return self.job.time_limit if self.use_limits else None


def _run_class(job: _SimJob) -> RunClass:
    return RunClass(job.queue, job.job.gpus, job.time_limit)


class _TreeQuota:
    """The cycle's quota port over ``kubegang.quota`` for simulated jobs."""

    def __init__(self, tree: QuotaTree, clock: Any) -> None:
        self.tree = tree
        self.clock = clock
        self.running_jobs: dict[str, tuple[_SimJob, float]] = {}
        """UID -> (job, start time) of admitted jobs."""
        self.history = RunTimeHistory()
        """Run times of the jobs that finished, as the operator records its finished GPUJobs."""

    def pending_job(self, job: _SimJob) -> PendingJob:
        return PendingJob(job.uid, job.queue, {job.job.product or ANY_PRODUCT: job.job.gpus}, job.job.priority,
                          job.job.arrival)

    def _running(self) -> list[RunningJob]:
        return [RunningJob(uid, job.queue, {job.job.product or ANY_PRODUCT: job.job.gpus}, job.job.priority, start)
                for uid, (job, start) in self.running_jobs.items()]

    def order(self, pending: Sequence[_SimJob]) -> list[_SimJob]:
        return leaf_heads(self.tree, pending, self.rank, self.pending_job)

    def rank(self, job: _SimJob) -> Rank:
        return job.queue, job.job.priority, job.job.arrival

    def flavor_options(self, job: _SimJob) -> list[_SimJob]:
        return [job]

    def can_admit(self, job: _SimJob) -> Verdict:
        head = self.pending_job(job)
        return quota_verdict(self.tree.can_admit(head.queue, head.usage))

    def admit(self, job: _SimJob) -> Verdict:
        head = self.pending_job(job)
        verdict = quota_verdict(self.tree.admit(job.uid, head.queue, head.usage))
        if verdict.ok:
            self.running_jobs[job.uid] = (job, self.clock())
        return verdict

    def release(self, job_uid: str) -> None:
        self.tree.release(job_uid)
        self.running_jobs.pop(job_uid, None)

    def claim(self, job: _SimJob) -> Verdict:
        head = self.pending_job(job)
        return quota_verdict(self.tree.admit(job.uid, head.queue, head.usage))

    def preemption_candidates(self, job: _SimJob) -> list[Preemptible[_SimJob]]:
        if not any(other.job.priority < job.job.priority for other, _ in self.running_jobs.values()):
            return []  # the simulator's queues preempt lower priority only (no reclaimFromBorrowers)
        return [Preemptible(self.running_jobs[c.job.job_id][0], c.reason.value)
                for c in candidates_for(self.pending_job(job), self.tree, self._running())]

    def quota_victims(self, job: _SimJob, candidates: Sequence[str]) -> list[str] | None:
        return quota_victims(self.tree, self.pending_job(job), candidates)

    def can_admit_without(self, job: _SimJob, evicted: Sequence[str]) -> Verdict:
        return quota_verdict(fits_after_eviction(self.tree, self.pending_job(job), evicted))

    def reserve_after(self, job: _SimJob) -> float | None:
        return None  # the policy's threshold for every queue

    def running(self) -> list[_SimJob]:
        return [job for job, _ in sorted(self.running_jobs.values(), key=lambda pair: pair[1])]

    def finished(self, job_uid: str, now: float) -> None:
        """``job_uid`` ran to its end at ``now``: its run time joins the history (before ``release``)."""
        held = self.running_jobs.get(job_uid)
        if held is not None:
            self.history.observe(_run_class(held[0]), now - held[1])

    def predicted_run_seconds(self, job: _SimJob) -> float | None:
        return self.history.predict(_run_class(job))

    def ends_at(self, job: _SimJob) -> float | None:
        limit = job.time_limit
        held = self.running_jobs.get(job.uid)
        if limit is None or held is None:
            return None
        return held[1] + limit


class KubegangPolicy:
    """Queue tree + fair share + whole-gang placement + gang preemption + backfill: the operator's cycle."""

    name = "kubegang"
    quota_port: type[_TreeQuota] = _TreeQuota
    """The cycle's quota port over the run's tree (an experiment may give its own subclass)."""

    def __init__(self, queues: int = 1, backfill: BackfillPolicy | None = None, *,
                 max_rounds: int | None = None, use_limits: bool = True) -> None:
        """``max_rounds``: the cycle's ``CycleSettings.max_rounds`` (None: the operator's default);
        other values are experiments (``bench.sim.why_waits``), not what the operator runs.
        ``use_limits``: the jobs carry their time limits (``timeLimitSeconds``), as the baselines that
        plan with them see them; False measures kubegang without them."""
        self.queues = queues
        self.use_limits = use_limits
        self.backfill_policy = backfill or BackfillPolicy()
        defaults = CycleSettings()
        self.settings = CycleSettings(backfill=self.backfill_policy,
                                      max_rounds=defaults.max_rounds if max_rounds is None else max_rounds)
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
        self.quota = self.quota_port(self.tree, lambda: self.now)
        self.cycle: AdmissionCycle[_SimJob, Placement] = AdmissionCycle(
            self.quota, settings=self.settings, clock=lambda: self.now)
        self.waiting_jobs: dict[str, _SimJob] = {}
        self.room = 1
        """The room epoch, as the extender's ledger keeps it (``LedgerState.room``): moved by everything
        that frees GPUs here (a gang that ends, is evicted or gives back its reservation), so the cycle
        answers a refused ``Plan`` from memory as it does in the operator."""
        self._events: list[tuple[bool, str]] = []
        """(started?, job) of the pass so far, in the order the cycle's effects came (``_settled``)."""

    def submit(self, job: Job, now: float) -> None:
        self.now = now
        queue = job.queue if job.queue in self.tree.leaves else "team-0"
        self.waiting_jobs[job.id] = _SimJob(job, queue, use_limits=self.use_limits)

    def finished(self, job: Job, now: float) -> None:
        self.now = now
        self.room += 1
        self.quota.finished(job.id, now)
        self.quota.release(job.id)
        self.cycle.forget(job.id)

    def waiting(self) -> int:
        return len(self.waiting_jobs)

    def partial_gpus(self) -> int:
        return 0  # a gang is allocated whole or not at all

    def next_timer(self) -> float | None:
        return None

    def schedule(self, now: float) -> Step:
        events: list[tuple[bool, str]] = []
        for _ in range(MAX_CYCLES_PER_PASS):
            if not self.waiting_jobs:
                break
            changed = self._run(now)
            events += self._events
            if not changed:
                break
        return _settled(events)

    def run_cycle(self, now: float) -> tuple[Step, bool]:
        """One production cycle at ``now``: what it admitted and evicted, and whether it admitted or
        preempted anything (the operator's loop runs the next cycle at once only then). A driver that
        models the operator's timing (``bench.sim._sweep``) calls this once per loop step."""
        changed = self._run(now)
        return _settled(self._events), changed

    def _run(self, now: float) -> bool:
        self.now = now
        self._events = []
        entries = run_sync(
            self.cycle.schedule(list(self.waiting_jobs.values()), holds_pods=lambda uid: False, room=self.room),
            self._answer)
        return any(e.result in (AdmitResult.ADMITTED, AdmitResult.PREEMPTING) for e in entries)

    def _answer(self, effect: Effect[_SimJob, Placement]) -> Any:
        """The simulated cluster's answer to one effect of the cycle (the extender's and the API's part)."""
        if isinstance(effect, Plan):
            gang = dataclasses.replace(gang_request(effect.job.job), excluded_nodes=effect.excluded_nodes)
            result = plan(gang, self.snapshot)
            if isinstance(result, Placement):
                return PlanAnswer(result)
            return PlanAnswer(None, result.reason, never=result.never, room=self.room)
        if isinstance(effect, Reserve):
            try:
                self.snapshot.allocate_all(effect.placement.allocations(gang_request(effect.job.job)))
            except AllocationError as exc:
                return Verdict(False, str(exc))
            return Verdict(True)
        if isinstance(effect, WhatIf):
            return self._what_if(effect.job, effect.candidates, effect.excluded_nodes, effect.gone)
        if isinstance(effect, Release):
            if self.snapshot.allocations_of(effect.job.uid):
                self.room += 1
                self.snapshot.release(effect.job.uid)
            return None
        if isinstance(effect, Evict):
            victim = effect.victim
            self.room += 1
            self.snapshot.release(victim.uid)
            self.quota.release(victim.uid)
            self.waiting_jobs[victim.uid] = victim
            self._events.append((False, victim.uid))
            return None
        if isinstance(effect, Admit):
            self.waiting_jobs.pop(effect.job.uid, None)
            self._events.append((True, effect.job.uid))
            return None
        raise TypeError(f"unknown effect {effect!r}")

    def _what_if(self, job: _SimJob, candidates: Sequence[_SimJob], excluded: frozenset[str],
                 gone: Sequence[_SimJob]) -> WhatIfAnswer:
        # Earlier in the cycle's list = preferred victim: the planner prefers lower priority, then the
        # most recently started, so the list position becomes the priority. ``gone`` is released by the
        # planner first (the extender's answer).
        offered = [preemption.Candidate(c.uid, priority=i, start_time=0.0) for i, c in enumerate(candidates)]
        gang = dataclasses.replace(gang_request(job.job), excluded_nodes=excluded)
        found = preemption.plan_preemption(gang, self.snapshot, offered, gone=[g.uid for g in gone])
        if found is None:
            return WhatIfAnswer(None)
        return WhatIfAnswer(found.victims, frozenset(found.placement.nodes))


def _settled(events: Sequence[tuple[bool, str]]) -> Step:
    """The ``Step`` the simulator applies (evictions first, then starts) for ``events`` in the order the
    cycles made them: a gang admitted and then evicted in the same pass (a later cycle's, or a later
    round's, preemptor) is evicted, not started; one evicted and admitted again is both. Two lists
    without that order made such a gang run in the simulator while kubegang had requeued it: its GPUs
    counted twice once it was admitted again (allocation above 100%), its completion reported for a
    waiting job."""
    last: dict[str, bool] = {}
    evicted: dict[str, None] = {}
    for started, uid in events:
        last[uid] = started
        if not started:
            evicted[uid] = None
    return Step(started=[uid for uid, started in last.items() if started], evicted=list(evicted))
