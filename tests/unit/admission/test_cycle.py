"""The admission cycle itself (``kubegang.admission.AdmissionCycle``), the code the operator and the
simulator both run, over a quota port on the real ``kubegang.quota`` tree and a small placement port:
nodes of 8 GPUs, a gang takes whole nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kubegang.admission import (
    AdmissionCycle,
    Admit,
    AdmitResult,
    CycleSettings,
    Effect,
    Entry,
    Evict,
    Plan,
    PlanAnswer,
    Preemptible,
    Release,
    Reserve,
    Verdict,
    WaitReason,
    WhatIf,
    WhatIfAnswer,
    quota_verdict,
    run_sync,
)
from kubegang.quota import (
    BackfillPolicy,
    FlavorQuota,
    PendingJob,
    QueueingStrategy,
    QueueSpec,
    QuotaTree,
    fits_after_eviction,
    leaf_heads,
)

NODE_GPUS = 8
Placed = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Job:
    uid: str
    queue: str
    gpus: int
    priority: int = 0
    created: float = 0.0
    time_limit: float | None = None
    generation: int = 1
    excluded_nodes: frozenset[str] = frozenset()
    previous_domain: str | None = None
    requests_gpus: bool = True

    @property
    def key(self) -> str:
        return f"ns/{self.uid}"


class Quota:
    """The cycle's quota port over a ``QuotaTree`` (one flavour, ``gpu``)."""

    def __init__(self, specs: Sequence[QueueSpec]) -> None:
        self.tree = QuotaTree(list(specs))
        self.admitted: dict[str, Job] = {}

    def pending_job(self, job: Job) -> PendingJob:
        return PendingJob(job.uid, job.queue, {"gpu": job.gpus}, job.priority, job.created)

    def order(self, pending: Sequence[Job]) -> list[Job]:
        return leaf_heads(self.tree, pending, self.rank, self.pending_job)

    def rank(self, job: Job) -> tuple[str, int, float]:
        return job.queue, job.priority, job.created

    def flavor_options(self, job: Job) -> list[Job]:
        return [job]

    def can_admit(self, job: Job) -> Verdict:
        return quota_verdict(self.tree.can_admit(job.queue, {"gpu": job.gpus}))

    def admit(self, job: Job) -> Verdict:
        verdict = quota_verdict(self.tree.admit(job.uid, job.queue, {"gpu": job.gpus}))
        if verdict.ok:
            self.admitted[job.uid] = job
        return verdict

    def release(self, job_uid: str) -> None:
        self.tree.release(job_uid)
        self.admitted.pop(job_uid, None)

    def claim(self, job: Job) -> Verdict:
        return quota_verdict(self.tree.admit(job.uid, job.queue, {"gpu": job.gpus}))

    def preemption_candidates(self, job: Job) -> list[Preemptible[Job]]:
        return []

    def quota_victims(self, job: Job, candidates: Sequence[str]) -> list[str] | None:
        return []

    def can_admit_without(self, job: Job, evicted: Sequence[str]) -> Verdict:
        return quota_verdict(fits_after_eviction(self.tree, self.pending_job(job), evicted))

    def reserve_after(self, job: Job) -> float | None:
        return None

    def running(self) -> list[Job]:
        return list(self.admitted.values())

    def ends_at(self, job: Job) -> float | None:
        return None

    def predicted_run_seconds(self, job: Job) -> float | None:
        return None


class Cluster:
    """The placement port: ``nodes`` nodes of 8 GPUs; a gang takes the first free whole nodes."""

    def __init__(self, nodes: int) -> None:
        self.on: dict[str, str | None] = {f"n{i}": None for i in range(nodes)}
        self.effects: list[Effect[Job, Placed]] = []

    def fit(self, job: Job, excluded: frozenset[str], gone: frozenset[str] = frozenset()) -> Placed | None:
        free = [n for n, uid in self.on.items() if (uid is None or uid in gone) and n not in excluded]
        need = -(-job.gpus // NODE_GPUS)
        return tuple(free[:need]) if len(free) >= need else None

    def run(self, job: Job, quota: Quota) -> None:
        """``job`` runs already (admitted before the test's cycle)."""
        placed = self.fit(job, frozenset())
        assert placed is not None and quota.admit(job).ok
        for node in placed:
            self.on[node] = job.uid

    def answer(self, effect: Effect[Job, Placed]) -> Any:
        self.effects.append(effect)
        if isinstance(effect, Plan):
            placed = self.fit(effect.job, effect.excluded_nodes)
            if placed is None:
                never = -(-effect.job.gpus // NODE_GPUS) > len(self.on)
                return PlanAnswer(None, "no room", never=never)
            return PlanAnswer(placed)
        if isinstance(effect, Reserve):
            return Verdict(True)
        if isinstance(effect, Admit):
            for node in effect.placement:
                self.on[node] = effect.job.uid
            return None
        if isinstance(effect, WhatIf):
            for k in range(len(effect.candidates) + 1):
                evicted = frozenset(c.uid for c in effect.candidates[:k])
                placed = self.fit(effect.job, effect.excluded_nodes, evicted | {g.uid for g in effect.gone})
                if placed is not None:
                    return WhatIfAnswer(tuple(uid for uid in evicted if uid in {self.on[n] for n in placed}),
                                        frozenset(placed))
            return WhatIfAnswer(None)
        if isinstance(effect, Evict | Release):
            return None
        raise AssertionError(effect)

    def tried(self) -> list[str]:
        """The jobs the cycle planned, in the order it asked."""
        return [e.job.uid for e in self.effects if isinstance(e, Plan)]


def flat(**nominals: int) -> list[QueueSpec]:
    """Root ``org`` (no nominal of its own) over leaves with these nominals."""
    return [QueueSpec("org"), *(QueueSpec(q, parent="org", quotas={"gpu": FlavorQuota(n)})
                                for q, n in nominals.items())]


def schedule(cycle: AdmissionCycle[Job, Placed], cluster: Cluster,
             pending: Sequence[Job]) -> dict[str, Entry[Job, Placed]]:
    entries = run_sync(cycle.schedule(pending, holds_pods=lambda uid: False), cluster.answer)
    return {entry.job.uid: entry for entry in entries}


# -- order: reservation holders first among their priority -----------------------------------------------------------

def test_a_higher_priority_head_goes_before_a_reservation_holder_of_lower_priority() -> None:
    # "hi" (priority 100, team-a) and "holder" (priority 0, team-b, holding a reservation) share org's
    # 8 GPUs of quota: whichever is tried first is admitted. Priority comes first (docs/quota.md).
    quota = Quota(flat(**{"team-a": 4, "team-b": 4}))
    cluster = Cluster(nodes=2)
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota)
    hi, holder = Job("hi", "team-a", 8, priority=100, created=2.0), Job("holder", "team-b", 8, created=1.0)
    cycle.backfill.reserve("holder", ["n1"])
    entries = schedule(cycle, cluster, [holder, hi])
    assert cluster.tried()[0] == "hi"
    assert entries["hi"].result is AdmitResult.ADMITTED
    assert entries["holder"].reason is WaitReason.QUOTA_EXHAUSTED


def test_a_holder_goes_first_among_its_priority_and_the_rest_keep_the_fair_share_order() -> None:
    # Priority 0: team-a's head is older than team-c's and both before the holder's (team-b, newest);
    # "hi" (priority 5) goes first whatever. Every job fits on its own nodes: the cycle plans them in
    # its order.
    quota = Quota(flat(**{"team-a": 8, "team-b": 8, "team-c": 8, "team-d": 8}))
    cluster = Cluster(nodes=4)
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota)
    jobs = [Job("a", "team-a", 8, created=1.0), Job("c", "team-c", 8, created=2.0),
            Job("holder", "team-b", 8, created=3.0), Job("hi", "team-d", 8, priority=5, created=4.0)]
    assert [job.uid for job in quota.order(jobs)] == ["hi", "a", "c", "holder"]
    cycle.backfill.reserve("holder", ["n3"])
    schedule(cycle, cluster, jobs)
    assert cluster.tried() == ["hi", "holder", "a", "c"]


# -- StrictFIFO: a blocked head holds its queue ----------------------------------------------------------------------

def blocked_head(strategy: QueueingStrategy) -> dict[str, Entry[Job, Placed]]:
    """team-a may use 24 GPUs; "run" holds 8 of the 16 on the nodes, so "big" (16) is blocked on the GPUs
    and "small" (8, behind it in team-a) fits on the free node."""
    quota = Quota(flat(**{"team-a": 24}))
    cluster = Cluster(nodes=2)
    cluster.run(Job("run", "team-a", 8), quota)
    settings = CycleSettings(backfill=BackfillPolicy(strategy=strategy, reserve_after_seconds=None))
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota, settings=settings)
    return schedule(cycle, cluster, [Job("big", "team-a", 16, created=1.0), Job("small", "team-a", 8, created=2.0)])


def test_under_strict_fifo_a_small_job_behind_a_blocked_head_stays_queued() -> None:
    entries = blocked_head(QueueingStrategy.STRICT_FIFO)
    assert (entries["big"].result, entries["big"].reason) == (AdmitResult.QUEUED, WaitReason.INSUFFICIENT_GPUS)
    assert (entries["small"].result, entries["small"].reason) == (AdmitResult.QUEUED, WaitReason.WAITING_IN_QUEUE)
    assert entries["small"].message == "waiting in queue team-a behind ns/big (InsufficientGPUs)"


def test_under_best_effort_fifo_the_small_job_behind_a_blocked_head_starts() -> None:
    entries = blocked_head(QueueingStrategy.BEST_EFFORT_FIFO)
    assert entries["big"].reason is WaitReason.INSUFFICIENT_GPUS
    assert entries["small"].result is AdmitResult.ADMITTED


# -- a reservation without time limits -------------------------------------------------------------------------------

def test_a_reservation_without_time_limits_says_later_jobs_may_not_use_its_nodes() -> None:
    # "run" (no time limit) holds n0; "big" needs two nodes and reserves at once: n0 (once "run" is
    # gone) and the free n1. Its start is unknown, so no later job may use them.
    quota = Quota(flat(**{"team-a": 24}))
    cluster = Cluster(nodes=3)
    cluster.on["n2"] = "elsewhere"  # a node kubegang does not place on now
    cluster.run(Job("run", "team-a", 8), quota)
    settings = CycleSettings(backfill=BackfillPolicy(reserve_after_seconds=0.0))
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota, settings=settings, clock=lambda: 0.0)
    entries = schedule(cycle, cluster, [Job("big", "team-a", 16, created=1.0)])
    big = entries["big"]
    assert (big.result, big.reason) == (AdmitResult.QUEUED, WaitReason.INSUFFICIENT_GPUS)
    assert big.reservation == frozenset({"n0", "n1"})
    assert big.message == ("waiting for GPUs: no room; holds a backfill reservation of 2 nodes "
                           "that later jobs may not use")
    # And a later job is placed without them: an 8-GPU job fits on n1 but waits.
    later = schedule(cycle, cluster, [Job("big", "team-a", 16, created=1.0), Job("later", "team-a", 8, created=2.0)])
    assert later["later"].reason is WaitReason.INSUFFICIENT_GPUS


# -- rounds read each queue's next job, not every waiting job again --------------------------------------------------

class CountingQuota(Quota):
    """Counts the jobs ``rank`` and ``order`` are asked about; ``rank`` fails for the job named ``broken``."""

    def __init__(self, specs: Sequence[QueueSpec]) -> None:
        super().__init__(specs)
        self.ranked = 0
        self.ordered: list[int] = []

    def rank(self, job: Job) -> tuple[str, int, float]:
        self.ranked += 1
        if job.uid == "broken":
            raise ValueError("no rank for you")
        return super().rank(job)

    def order(self, pending: Sequence[Job]) -> list[Job]:
        self.ordered.append(len(pending))
        return super().order(pending)


def test_a_cycle_ranks_each_waiting_job_once_and_its_rounds_order_only_the_queues_heads() -> None:
    # Two queues of 30 jobs; none fits beside the running job, so each round tries both heads and steps
    # aside (BestEffortFIFO) until max_rounds. Ranking every waiting job once per round was 64 x 60.
    quota = CountingQuota(flat(**{"team-a": 800, "team-b": 800}))
    cluster = Cluster(nodes=2)
    cluster.run(Job("run", "team-a", 8), quota)
    settings = CycleSettings(max_rounds=8, backfill=BackfillPolicy(reserve_after_seconds=None))
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota, settings=settings)
    jobs = [Job(f"{team}-{i}", f"team-{team}", 16, created=float(i)) for i in range(30) for team in "ab"]
    entries = schedule(cycle, cluster, jobs)
    assert quota.ordered == [2] * 8
    assert quota.ranked == len(jobs) + sum(quota.ordered)  # once to sort the lanes, and by order for the heads
    # The rounds tried the 8 oldest of each queue in order; the rest wait behind the last tried.
    assert cluster.tried()[:4] == ["a-0", "b-0", "a-1", "b-1"]
    assert [uid for uid in cluster.tried() if uid.startswith("a-")] == [f"a-{i}" for i in range(8)]
    assert entries["a-8"].reason is WaitReason.WAITING_IN_QUEUE
    assert entries["a-8"].message == "waiting in queue team-a behind ns/a-7 (InsufficientGPUs)"
    assert len(entries) == len(jobs)


def test_a_job_that_cannot_be_ranked_fails_alone() -> None:
    quota = CountingQuota(flat(**{"team-a": 16}))
    cluster = Cluster(nodes=2)
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(quota)
    entries = schedule(cycle, cluster, [Job("broken", "team-a", 8, created=1.0), Job("ok", "team-a", 8, created=2.0)])
    assert (entries["broken"].result, entries["broken"].reason) == (AdmitResult.ERROR, WaitReason.ADMISSION_ERROR)
    assert "no rank for you" in entries["broken"].message
    assert entries["ok"].result is AdmitResult.ADMITTED


# -- refusals kept by the placement side's room epoch ---------------------------------------------------------------

class RoomCluster(Cluster):
    """``Cluster`` with a room epoch, moved by :meth:`free` (what an ended gang does to the extender's)."""

    def __init__(self, nodes: int) -> None:
        super().__init__(nodes)
        self.room = 7

    def answer(self, effect: Effect[Job, Placed]) -> Any:
        answer = super().answer(effect)
        if isinstance(answer, PlanAnswer) and answer.placement is None:
            return dataclasses.replace(answer, room=self.room)
        return answer

    def free(self, uid: str, quota: Quota) -> None:
        for node, holder in self.on.items():
            if holder == uid:
                self.on[node] = None
        quota.release(uid)
        self.room += 1


def schedule_at(cycle: AdmissionCycle[Job, Placed], cluster: Cluster, pending: Sequence[Job],
                room: int | None) -> dict[str, Entry[Job, Placed]]:
    cluster.effects.clear()
    entries = run_sync(cycle.schedule(pending, holds_pods=lambda uid: False, room=room), cluster.answer)
    return {entry.job.uid: entry for entry in entries}


def blocked_on_gpus() -> tuple[Quota, RoomCluster, AdmissionCycle[Job, Placed], Job]:
    """team-a may use 24 GPUs; "run" holds one of the two nodes, so "big" (16) is refused a place."""
    quota = Quota(flat(**{"team-a": 24}))
    cluster = RoomCluster(nodes=2)
    cluster.run(Job("run", "team-a", 8), quota)
    settings = CycleSettings(backfill=BackfillPolicy(reserve_after_seconds=None))
    return quota, cluster, AdmissionCycle(quota, settings=settings), Job("big", "team-a", 16)


def test_a_refusal_at_the_same_room_epoch_is_not_asked_again_and_is_once_room_was_freed() -> None:
    quota, cluster, cycle, big = blocked_on_gpus()
    first = schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == ["big"] and first["big"].reason is WaitReason.INSUFFICIENT_GPUS
    again = schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == [] and cycle.plans_remembered == 1
    assert (again["big"].result, again["big"].reason, again["big"].message) == (
        first["big"].result, first["big"].reason, first["big"].message)
    cluster.free("run", quota)
    after = schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == ["big"] and after["big"].result is AdmitResult.ADMITTED


def test_without_a_room_epoch_every_refusal_is_asked_again() -> None:
    _, cluster, cycle, big = blocked_on_gpus()
    for _ in range(3):
        schedule_at(cycle, cluster, [big], None)
        assert cluster.tried() == ["big"]
    assert cycle.plans_remembered == 0


def test_a_refusal_answers_only_the_same_question() -> None:
    # A new spec (generation) or other excluded nodes is another question: asked.
    _, cluster, cycle, big = blocked_on_gpus()
    schedule_at(cycle, cluster, [big], cluster.room)
    schedule_at(cycle, cluster, [dataclasses.replace(big, generation=2)], cluster.room)
    assert cluster.tried() == ["big"]
    schedule_at(cycle, cluster, [dataclasses.replace(big, generation=2, excluded_nodes=frozenset({"n9"}))],
                cluster.room)
    assert cluster.tried() == ["big"]
    schedule_at(cycle, cluster, [dataclasses.replace(big, generation=2, excluded_nodes=frozenset({"n9"}))],
                cluster.room)
    assert cluster.tried() == [] and cycle.plans_remembered == 1


def test_a_job_forgotten_and_back_is_asked_again() -> None:
    _, cluster, cycle, big = blocked_on_gpus()
    schedule_at(cycle, cluster, [big], cluster.room)
    cycle.forget("big")
    schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == ["big"]


class FailingAdmit(Quota):
    """Quota whose ``admit`` raises for one job, after its Plan found a place (the attempt then releases it)."""

    def __init__(self, specs: Sequence[QueueSpec], failing: str) -> None:
        super().__init__(specs)
        self.failing = failing

    def admit(self, job: Job) -> Verdict:
        if job.uid == self.failing:
            raise RuntimeError("injected")
        return super().admit(job)


def test_after_the_cycle_released_a_placement_no_refusal_is_answered_from_memory() -> None:
    # "big" (team-b) was refused; in the next cycle "small" (team-a, tried first) is placed, its quota
    # step raises and its placement is released: what that freed is not in the epoch this cycle read,
    # so "big" is asked again within the cycle.
    quota = FailingAdmit(flat(**{"team-a": 8, "team-b": 24}), failing="small")
    cluster = RoomCluster(nodes=2)
    cluster.run(Job("run", "team-b", 8), quota)
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(
        quota, settings=CycleSettings(backfill=BackfillPolicy(reserve_after_seconds=None)))
    big, small = Job("big", "team-b", 16, created=2.0), Job("small", "team-a", 8, created=1.0)
    schedule_at(cycle, cluster, [big], cluster.room)
    entries = schedule_at(cycle, cluster, [big, small], cluster.room)
    assert entries["small"].reason is WaitReason.ADMISSION_ERROR
    assert any(isinstance(e, Release) and e.job.uid == "small" for e in cluster.effects)
    assert cluster.tried() == ["small", "big"] and cycle.plans_remembered == 0


class TwoFlavours(Quota):
    """Every job may use two flavours (two options of the same job), tried in order."""

    def flavor_options(self, job: Job) -> list[Job]:
        return [job, dataclasses.replace(job)]


def test_a_job_of_two_flavours_keeps_the_refusal_of_each() -> None:
    quota = TwoFlavours(flat(**{"team-a": 24}))
    cluster = RoomCluster(nodes=2)
    cluster.run(Job("run", "team-a", 8), quota)
    cycle: AdmissionCycle[Job, Placed] = AdmissionCycle(
        quota, settings=CycleSettings(backfill=BackfillPolicy(reserve_after_seconds=None)))
    big = Job("big", "team-a", 16)
    schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == ["big", "big"]
    schedule_at(cycle, cluster, [big], cluster.room)
    assert cluster.tried() == [] and cycle.plans_remembered == 2
