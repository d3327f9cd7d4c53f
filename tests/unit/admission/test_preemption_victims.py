"""The cycle's victim chooser (step 5): quota's victims and placement's together, each of them needed.

Quota is the real ``kubegang.quota`` tree and policy (``candidates_for``, ``quota_victims``); placement
is the real core on a snapshot, and ``WhatIf`` is answered as the extender and the simulator answer it
(``plan_preemption`` over the candidates, their order as the preference, its ``gone`` released first).
Quota's victims are asked as ``gone``: the cycle must not evict, on top of them, gangs whose room they
free anyway (the audit's case: a team-a gang evicted next to the borrower whose node the preemptor then
took), and what it adds is the cheapest given they are gone."""

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
from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.preemption import Candidate, plan_preemption
from kubegang.quota import (
    BackfillPolicy,
    FlavorQuota,
    PendingJob,
    PreemptionPolicy,
    QueueSpec,
    QuotaTree,
    ReclaimFromBorrowers,
    RunningJob,
    WithinQueue,
    candidates_for,
    fits_after_eviction,
    leaf_heads,
    quota_victims,
)
from kubegang.topology import compile_index, uniform_fabric

RECLAIM = PreemptionPolicy(within_queue=WithinQueue.LOWER_PRIORITY, reclaim_from_borrowers=ReclaimFromBorrowers.ANY)


@dataclasses.dataclass(frozen=True)
class Job:
    uid: str
    queue: str
    pods: int
    gpus: int
    """GPUs per pod."""
    priority: int = 0
    created: float = 0.0
    time_limit: float | None = None
    generation: int = 1
    excluded_nodes: frozenset[str] = frozenset()
    previous_domain: str | None = None
    requests_gpus: bool = True

    @property
    def key(self) -> str:
        return f"{self.queue}/{self.uid}"

    @property
    def total(self) -> int:
        return self.pods * self.gpus

    def gang(self, excluded: frozenset[str] = frozenset()) -> GangRequest:
        return GangRequest(self.uid, pods=self.pods, gpus_per_pod=self.gpus, excluded_nodes=excluded)


class Quota:
    """The cycle's quota port over a ``QuotaTree`` (one flavour, ``gpu``) with the real preemption policy."""

    def __init__(self, specs: Sequence[QueueSpec]) -> None:
        self.tree = QuotaTree(list(specs))
        self.admitted: dict[str, Job] = {}
        self.started: dict[str, float] = {}

    def pending_job(self, job: Job) -> PendingJob:
        return PendingJob(job.uid, job.queue, {"gpu": job.total}, job.priority, job.created)

    def order(self, pending: Sequence[Job]) -> list[Job]:
        return leaf_heads(self.tree, pending, self.rank, self.pending_job)

    def rank(self, job: Job) -> tuple[str, int, float]:
        return job.queue, job.priority, job.created

    def flavor_options(self, job: Job) -> list[Job]:
        return [job]

    def can_admit(self, job: Job) -> Verdict:
        return quota_verdict(self.tree.can_admit(job.queue, {"gpu": job.total}))

    def admit(self, job: Job) -> Verdict:
        verdict = quota_verdict(self.tree.admit(job.uid, job.queue, {"gpu": job.total}))
        if verdict.ok:
            self.admitted[job.uid] = job
            self.started[job.uid] = float(len(self.started))
        return verdict

    def release(self, job_uid: str) -> None:
        self.tree.release(job_uid)
        self.admitted.pop(job_uid, None)

    def claim(self, job: Job) -> Verdict:
        return quota_verdict(self.tree.admit(job.uid, job.queue, {"gpu": job.total}))

    def preemption_candidates(self, job: Job) -> list[Preemptible[Job]]:
        running = [RunningJob(r.uid, r.queue, {"gpu": r.total}, r.priority, self.started[r.uid])
                   for r in self.admitted.values()]
        return [Preemptible(self.admitted[c.job.job_id], c.message)
                for c in candidates_for(self.pending_job(job), self.tree, running)]

    def quota_victims(self, job: Job, candidates: Sequence[str]) -> list[str] | None:
        return quota_victims(self.tree, self.pending_job(job), candidates)

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
    """The placement port on the real core: ``nodes`` nodes of 8 GPUs, named ``node-00000`` on."""

    def __init__(self, nodes: int, quota: Quota) -> None:
        self.quota = quota
        self.snap = Snapshot(compile_index(uniform_fabric(nodes, gpus=8)))
        self.names = [node.name for node in self.snap.topology.nodes]
        self.what_ifs: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        """(gone, candidates) of every WhatIf, in the order asked."""

    def run(self, job: Job, node: int) -> None:
        """``job`` runs already on node ``node`` (admitted before the test's cycle)."""
        others = frozenset(name for i, name in enumerate(self.names) if i != node)
        placed = plan(job.gang(others), self.snap)
        assert isinstance(placed, Placement) and self.quota.admit(job).ok
        self.snap.allocate_all(placed.allocations(job.gang()))

    def answer(self, effect: Effect[Job, Placement]) -> Any:
        if isinstance(effect, Plan):
            placed = plan(effect.job.gang(effect.excluded_nodes), self.snap)
            return PlanAnswer(placed) if isinstance(placed, Placement) else PlanAnswer(None, placed.reason)
        if isinstance(effect, Reserve):
            return Verdict(True)
        if isinstance(effect, Admit):
            self.snap.allocate_all(effect.placement.allocations(effect.job.gang()))
            return None
        if isinstance(effect, WhatIf):
            gone = tuple(g.uid for g in effect.gone)
            self.what_ifs.append((gone, tuple(c.uid for c in effect.candidates)))
            offered = [Candidate(c.uid, priority=i) for i, c in enumerate(effect.candidates)]
            found = plan_preemption(effect.job.gang(effect.excluded_nodes), self.snap, offered, gone=gone)
            if found is None:
                return WhatIfAnswer(None)
            return WhatIfAnswer(found.victims, frozenset(found.placement.nodes))
        if isinstance(effect, Evict):  # whole gang, its quota given back (its pods gone at once here)
            self.snap.release(effect.victim.uid)
            self.quota.release(effect.victim.uid)
            return None
        if isinstance(effect, Release):
            return None
        raise AssertionError(effect)

    def holders(self) -> set[str]:
        return {a.owner for a in self.snap.allocations()}


def tree(team_a: int, team_b: int) -> list[QueueSpec]:
    """``org`` (no nominal) over team-a (reclaims from borrowers, evicts its own lower priority) and team-b."""
    return [QueueSpec("org"),
            QueueSpec("team-a", parent="org", quotas={"gpu": FlavorQuota(team_a)}, preemption=RECLAIM),
            QueueSpec("team-b", parent="org", quotas={"gpu": FlavorQuota(team_b)})]


def world(team_a: int, team_b: int, nodes: int) -> tuple[Quota, Cluster, AdmissionCycle[Job, Placement]]:
    quota = Quota(tree(team_a, team_b))
    settings = CycleSettings(backfill=BackfillPolicy(reserve_after_seconds=None))
    return quota, Cluster(nodes, quota), AdmissionCycle(quota, settings=settings, clock=lambda: 0.0)


def schedule(cycle: AdmissionCycle[Job, Placement], cluster: Cluster,
             pending: Sequence[Job]) -> dict[str, Entry[Job, Placement]]:
    entries = run_sync(cycle.schedule(pending, holds_pods=lambda uid: uid in cluster.holders()), cluster.answer)
    return {entry.job.uid: entry for entry in entries}


def evicted_by(entry: Entry[Job, Placement]) -> list[str]:
    assert (entry.result, entry.reason) == (AdmitResult.PREEMPTING, WaitReason.PREEMPTING), entry
    return [victim.uid for victim in entry.victims]


def test_quota_victims_that_free_a_place_are_the_only_victims() -> None:
    # The audit's case: b (team-b, 8 GPUs on node 0) borrows 4 of team-a's; l (team-a, 4 on node 1) runs
    # within team-a's nominal; p (team-a, 8 GPUs, priority 10) needs 4 more of org's 16. Quota evicts the
    # borrower b first, and that frees node 0 for p. The planner, asked over both, would pick l (4 GPUs
    # rather than 8): b and l were both evicted, and l's work lost for nothing.
    quota, cluster, cycle = world(team_a=12, team_b=4, nodes=2)
    cluster.run(Job("b", "team-b", 1, 8), node=0)
    cluster.run(Job("l", "team-a", 1, 4), node=1)
    p = Job("p", "team-a", 1, 8, priority=10)
    assert quota.quota_victims(p, [c.job.uid for c in quota.preemption_candidates(p)]) == ["b"]

    entry = schedule(cycle, cluster, [p])["p"]
    assert evicted_by(entry) == ["b"]
    assert entry.message.endswith("; preempting team-b/b")
    # With b gone, the planner adds no one: one WhatIf (the old chooser asked over both, got l, then
    # asked again with b alone).
    assert cluster.what_ifs == [(("b",), ("l",))]
    assert cluster.holders() == {"l"} and "l" in quota.admitted and "b" not in quota.admitted

    # With b gone, p runs where b ran; l runs on.
    entry = schedule(cycle, cluster, [p])["p"]
    assert entry.result is AdmitResult.ADMITTED, entry
    assert entry.placement is not None and entry.placement.nodes == (cluster.names[0],)
    assert cluster.holders() == {"l", "p"}


def test_placement_victims_are_only_those_still_needed_with_quota_victims_gone() -> None:
    # p (team-a, 2 pods x 8, priority 10) needs two free nodes and 8 GPUs of quota that q (team-b, nominal
    # 0, 8 on node 0) borrows. Quota's victim q frees node 0 only; l1 and l2 (team-a, 4 each, priority 0)
    # run on nodes 1 and 2, h (team-a, 4, priority 20: not a candidate) on node 3. Over every candidate
    # the planner's cheapest set is l1 and l2 (8 GPUs; q with either is 12): with q evicted for quota
    # anyway (WhatIf's ``gone``), one of them is enough, and between equally cheap nodes the planner
    # takes the preferred candidate's: l2, the most recently started (l1 has done more work).
    quota, cluster, cycle = world(team_a=28, team_b=0, nodes=4)
    cluster.run(Job("q", "team-b", 1, 8), node=0)
    cluster.run(Job("l1", "team-a", 1, 4), node=1)
    cluster.run(Job("l2", "team-a", 1, 4), node=2)
    cluster.run(Job("h", "team-a", 1, 4, priority=20), node=3)
    p = Job("p", "team-a", 2, 8, priority=10)
    candidates = [c.job.uid for c in quota.preemption_candidates(p)]
    assert candidates == ["q", "l2", "l1"]  # the borrower first, then the most recently started
    assert quota.quota_victims(p, candidates) == ["q"]

    entry = schedule(cycle, cluster, [p])["p"]
    assert evicted_by(entry) == ["q", "l2"]
    assert cluster.holders() == {"l1", "h"}
    assert "h" not in [uid for asked in cluster.what_ifs for part in asked for uid in part]  # policy keeps it
    assert cluster.what_ifs == [(("q",), ("l2", "l1"))]  # one WhatIf (the old chooser asked three)

    entry = schedule(cycle, cluster, [p])["p"]
    assert entry.result is AdmitResult.ADMITTED, entry
    assert entry.placement is not None
    assert set(entry.placement.nodes) == {cluster.names[0], cluster.names[2]}


def test_a_quota_victim_is_kept_running_when_the_placement_victims_free_its_quota_too() -> None:
    # q (team-b, nominal 0, 4 GPUs) borrows and shares node 0 with h (team-a, priority 20: not a
    # candidate), so evicting q frees no whole node; l (team-a, 4, priority 0) shares node 1 with
    # nobody. p (team-a, 8, priority 10) needs 4 more of org's 16: quota picks the borrower q first,
    # but p can only run on node 1, which takes evicting l, and l's 4 GPUs are all the quota p needs.
    # q's eviction would not let p run: only l goes.
    quota, cluster, cycle = world(team_a=16, team_b=0, nodes=2)
    cluster.run(Job("q", "team-b", 1, 4), node=0)
    cluster.run(Job("h", "team-a", 1, 4, priority=20), node=0)
    cluster.run(Job("l", "team-a", 1, 4), node=1)
    p = Job("p", "team-a", 1, 8, priority=10)
    assert quota.quota_victims(p, [c.job.uid for c in quota.preemption_candidates(p)]) == ["q"]

    entry = schedule(cycle, cluster, [p])["p"]
    assert evicted_by(entry) == ["l"]
    assert cluster.holders() == {"q", "h"}
    # q gone, l is added; then q put back: quota and placement both do without it (the old chooser: 3).
    assert cluster.what_ifs == [(("q",), ("l",)), (("l",), ())]

    entry = schedule(cycle, cluster, [p])["p"]
    assert entry.result is AdmitResult.ADMITTED, entry
    assert entry.placement is not None and entry.placement.nodes == (cluster.names[1],)


def test_placement_adds_the_cheapest_gangs_given_quota_victims_are_gone() -> None:
    # b (team-b, nominal 0) borrows 8 GPUs on node 0; n2 (team-a, 2 GPUs, started first) runs on node 2
    # and n1 (team-a, 4 GPUs) on node 1. p (team-a, 2 pods x 8, priority 10) needs 2 free nodes, and
    # quota evicts the borrower b (freeing node 0). One more node is then needed: node 2 (n2, 2 GPUs)
    # is the cheapest. Asked over every candidate without knowing b is gone, the planner chose n1 and n2
    # (6 GPUs < b's 8 with either); the old chooser then dropped n2 (the most disruptive, tried first),
    # b and n1 still placing p, and evicted b and n1: 12 GPUs where 10 would do.
    quota, cluster, cycle = world(team_a=24, team_b=0, nodes=3)
    cluster.run(Job("b", "team-b", 1, 8), node=0)
    cluster.run(Job("n2", "team-a", 1, 2), node=2)
    cluster.run(Job("n1", "team-a", 1, 4), node=1)
    p = Job("p", "team-a", 2, 8, priority=10)
    candidates = [c.job.uid for c in quota.preemption_candidates(p)]
    assert candidates == ["b", "n1", "n2"]
    assert quota.quota_victims(p, candidates) == ["b"]

    entry = schedule(cycle, cluster, [p])["p"]
    assert evicted_by(entry) == ["b", "n2"]
    assert cluster.holders() == {"n1"}
    assert cluster.what_ifs == [(("b",), ("n1", "n2"))]  # quota needs b whatever the GPUs do: one WhatIf

    entry = schedule(cycle, cluster, [p])["p"]
    assert entry.result is AdmitResult.ADMITTED, entry
    assert entry.placement is not None
    assert set(entry.placement.nodes) == {cluster.names[0], cluster.names[2]}


def test_no_one_is_evicted_when_no_allowed_set_lets_the_preemptor_run() -> None:
    # As above, but h2 (team-a, priority 20 too) holds node 1 with l: no node can be freed of candidates
    # only, so neither the borrower (which quota alone would evict) nor l goes.
    quota, cluster, cycle = world(team_a=20, team_b=0, nodes=2)
    cluster.run(Job("q", "team-b", 1, 4), node=0)
    cluster.run(Job("h", "team-a", 1, 4, priority=20), node=0)
    cluster.run(Job("h2", "team-a", 1, 4, priority=20), node=1)
    cluster.run(Job("l", "team-a", 1, 4), node=1)
    p = Job("p", "team-a", 1, 8, priority=10)
    assert quota.quota_victims(p, [c.job.uid for c in quota.preemption_candidates(p)]) == ["q"]
    entry = schedule(cycle, cluster, [p])["p"]
    assert (entry.result, entry.reason) == (AdmitResult.QUEUED, WaitReason.QUOTA_EXHAUSTED), entry
    assert cluster.holders() == {"q", "h", "h2", "l"} and set(quota.admitted) == {"q", "h", "h2", "l"}
