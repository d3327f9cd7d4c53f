"""The preemption planner: the smallest set of whole gangs whose eviction lets a gang run.

Which gangs *may* be evicted is policy (priority within a queue, reclaiming lent quota) and is
decided by the caller; this module only answers "which of these, at least, and is it enough?" by
asking the placement engine on the snapshot under checkpoints, so no state is copied.

Search (every step is a real ``plan`` call, so a returned set always lets the gang run):

1. If the gang already fits, nothing needs to go.
2. Domain-local greedy: for each domain that candidates touch, narrowest level first, release
   the candidates inside it in preference order (fewest GPUs, lowest priority, most recently
   started) until the gang fits. Domains that could not hold the gang even with all their
   candidates gone are skipped with one index lookup, so plan calls go where they can pay off.
   Evicting inside one domain is what makes room for a topology-constrained gang; a
   cluster-wide greedy would scatter victims across leaves and free nothing usable.
3. Cluster-wide greedy over all candidates, as the fallback.
4. Each found set is made irreducible: try to keep each victim (largest first); if the gang still
   fits without evicting it, keep it. Feasibility is monotone in free capacity (the engine's check
   is exact), so after one pass removing any single victim makes the gang unplaceable.

The best set wins by: fewest GPUs evicted, then lowest highest-priority victim, then fewest
victims, then the most recently started. ``max_plans`` bounds the work on huge candidate lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.topology import FABRIC_LEVELS


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running gang that policy allows to be evicted; its allocations are in the snapshot."""

    gang_id: str
    priority: int = 0
    start_time: float = 0.0
    """When it started (any monotonic clock; larger is more recent)."""


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Evict ``victims`` (whole gangs) and the gang fits as ``placement`` (on the current snapshot)."""

    victims: tuple[str, ...]
    gpus_evicted: int
    placement: Placement


def plan_preemption(gang: GangRequest, snapshot: Snapshot, candidates: Sequence[Candidate],
                    *, max_plans: int = 2000) -> PreemptionPlan | None:
    """The cheapest whole-gang victim set that makes ``gang`` placeable, or None if none does.

    The snapshot is left exactly as it was.
    """
    search = _Search(gang, snapshot, candidates, max_plans)
    return search.run()


class _Search:
    def __init__(self, gang: GangRequest, snapshot: Snapshot, candidates: Sequence[Candidate],
                 max_plans: int) -> None:
        self.gang = gang
        self.snapshot = snapshot
        self.budget = max_plans
        self.gpus = {c.gang_id: snapshot.gpus_held(c.gang_id) for c in candidates}
        usable = {c.gang_id: c for c in candidates
                  if c.gang_id != gang.id and snapshot.allocations_of(c.gang_id)}
        # Preference order: fewest GPUs, lowest priority, most recently started.
        self.order = sorted(usable.values(),
                            key=lambda c: (self.gpus[c.gang_id], c.priority, -c.start_time, c.gang_id))
        self.by_id = usable
        self.tried: set[frozenset[str]] = set()
        self.best: tuple[tuple[int, int, int, float], tuple[str, ...]] | None = None

    def run(self) -> PreemptionPlan | None:
        now = plan(self.gang, self.snapshot)
        if isinstance(now, Placement):
            return PreemptionPlan((), 0, now)
        if not self.order or not self._fits([c.gang_id for c in self.order]):
            return None
        self._domain_local()
        self._greedy([c.gang_id for c in self.order])
        if self.best is None:
            return None
        victims = self.best[1]
        with self.snapshot.what_if():
            for v in victims:
                self.snapshot.release(v)
            placement = plan(self.gang, self.snapshot)
        if not isinstance(placement, Placement):
            raise AssertionError(f"preemption set {victims} was verified but no longer fits")
        return PreemptionPlan(victims, sum(self.gpus[v] for v in victims), placement)

    def _domain_local(self) -> None:
        topo = self.snapshot.topology
        top = self.gang.required_level if self.gang.required_level is not None else Level.CLUSTER
        touching: dict[tuple[Level, int], list[str]] = {}
        for c in self.order:
            nodes = {topo.node_number[a.node] for a in self.snapshot.allocations_of(c.gang_id)}
            for level in FABRIC_LEVELS:
                if level > top:
                    break
                for d in {topo.domain_of[level][n] for n in nodes}:
                    touching.setdefault((level, d), []).append(c.gang_id)
        for (level, d), ids in sorted(touching.items(), key=lambda item: (item[0][0], len(item[1]))):
            if self.budget <= 0:
                return
            if frozenset(ids) in self.tried or not self._could_fit(level, d, ids):
                continue
            self._greedy(ids)

    def _could_fit(self, level: Level, domain: int, ids: list[str]) -> bool:
        """Index-only bound: with all ``ids`` gone, could the domain hold the gang's GPUs?"""
        if self.gang.fractional:
            return True
        cap = self.snapshot.capacity.get(self.gang.flavour)
        if cap is None:
            return False
        with self.snapshot.what_if():
            for v in ids:
                self.snapshot.release(v)
            return cap.pods_fit(level, domain, self.gang.gpus_per_pod) >= self.gang.pods

    def _greedy(self, ids: list[str]) -> None:
        self.tried.add(frozenset(ids))
        chosen: list[str] = []
        with self.snapshot.what_if():
            for v in ids:
                self.snapshot.release(v)
                chosen.append(v)
                if self._plan_ok():
                    break
            else:
                return
        self._offer(self._minimise(chosen))

    def _minimise(self, victims: list[str]) -> list[str]:
        kept = list(victims)
        for v in sorted(victims, key=lambda x: (-self.gpus[x], x)):
            trial = [x for x in kept if x != v]
            if trial and self._fits(trial):
                kept = trial
        return kept

    def _fits(self, victims: Sequence[str]) -> bool:
        with self.snapshot.what_if():
            for v in victims:
                self.snapshot.release(v)
            return self._plan_ok()

    def _plan_ok(self) -> bool:
        self.budget -= 1
        return isinstance(plan(self.gang, self.snapshot), Placement)

    def _offer(self, victims: list[str]) -> None:
        chosen = [self.by_id[v] for v in victims]
        key = (
            sum(self.gpus[v] for v in victims),
            max(c.priority for c in chosen),
            len(chosen),
            -min(c.start_time for c in chosen),
        )
        if self.best is None or key < self.best[0]:
            self.best = (key, tuple(sorted(victims)))
