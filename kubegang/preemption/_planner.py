"""The preemption planner: the smallest set of whole gangs whose eviction lets a gang run.

Which gangs *may* be evicted is policy (priority within a queue, reclaiming lent quota) and is
decided by the caller; this module only answers "which of these, at least, and is it enough?" by
asking the placement engine on the snapshot under checkpoints, so no state is copied.

Search (every step is a real ``plan`` call, so a returned set always lets the gang run):

1. If the gang already fits, nothing needs to go.
2. If it does not fit with every candidate gone, no set helps: None.
3. Domain-local greedy, for every domain that candidates touch up to the gang's required level
   (the widest one, e.g. the cluster, is the global fallback): release the domain's candidates
   node by node, nodes that gain the most pod slots per GPU evicted first (ties: preference
   order), and call ``plan`` only once the capacity index says the domain could hold the gang.
   Evicting inside one domain is what makes room for a topology-constrained gang; a
   cluster-wide greedy would scatter victims across leaves and free nothing usable. Domains too
   small for the gang even when empty, or with the same candidates as a narrower domain, are
   skipped.
4. The cheapest few raw sets are made irreducible: try to keep each victim (largest first); if
   the gang still fits without evicting it, keep it. Feasibility is monotone in free capacity
   (the engine's check is exact), so after one pass removing any single victim makes the gang
   unplaceable.

The best set wins by: fewest GPUs evicted, then lowest highest-priority victim, then fewest
victims, then the most recently started. ``max_plans`` bounds the work on huge candidate lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, Snapshot, plan
from kubegang.topology import FABRIC_LEVELS

_MINIMISE_TOP = 3
"""How many of the cheapest raw victim sets get the (plan-per-victim) minimality pass."""


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
        found = self._domain_local()
        # Minimising costs a plan per victim: do it for the few cheapest raw sets only.
        for raw in sorted(found, key=self._key)[:_MINIMISE_TOP]:
            self._offer(self._minimise(raw))
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

    def _domain_local(self) -> list[list[str]]:
        topo = self.snapshot.topology
        top = self.gang.required_level if self.gang.required_level is not None else Level.CLUSTER
        g = max(1, self.gang.gpus_per_pod)
        touching: dict[tuple[Level, int], list[str]] = {}
        for c in self.order:
            nodes = {topo.node_number[a.node] for a in self.snapshot.allocations_of(c.gang_id)}
            for level in FABRIC_LEVELS:
                if level > top:
                    break
                for d in {topo.domain_of[level][n] for n in nodes}:
                    touching.setdefault((level, d), []).append(c.gang_id)
        found: list[list[str]] = []
        for (level, d), ids in sorted(touching.items(), key=lambda item: (item[0][0], len(item[1]))):
            if self.budget <= 0:
                break
            size = len(topo.members[level][d]) * (topo.max_gpus_per_node // g)
            if size < self.gang.pods or frozenset(ids) in self.tried:
                continue  # too small even when empty, or the same candidates as a narrower domain
            self.tried.add(frozenset(ids))
            victims = self._greedy(level, d, self._node_order(level, d, ids))
            if victims is not None:
                found.append(victims)
        return found

    def _node_order(self, level: Level, domain: int, ids: list[str]) -> list[str]:
        """Candidates grouped by node, nodes that gain the most room per GPU evicted first."""
        if self.gang.fractional:
            return ids
        topo = self.snapshot.topology
        cap = self.snapshot.capacity.get(self.gang.flavour)
        if cap is None:
            return ids
        g = self.gang.gpus_per_pod
        on_node: dict[int, list[str]] = {}
        gpus_on: dict[int, int] = {}
        for v in ids:
            for a in self.snapshot.allocations_of(v):
                n = topo.node_number[a.node]
                if topo.domain_of[level][n] != domain:
                    continue
                on_node.setdefault(n, [])
                if v not in on_node[n]:
                    on_node[n].append(v)
                gpus_on[n] = gpus_on.get(n, 0) + a.whole_gpus

        def value(n: int) -> tuple[float, int]:
            gain = (cap.free[n] + gpus_on[n]) // g - cap.free[n] // g
            return (gpus_on[n] / gain if gain else float("inf"), n)

        ordered: list[str] = []
        seen: set[str] = set()
        for n in sorted(on_node, key=value):
            for v in on_node[n]:
                if v not in seen:
                    seen.add(v)
                    ordered.append(v)
        return ordered

    def _greedy(self, level: Level, domain: int, ids: list[str]) -> list[str] | None:
        """Release ``ids`` in order until the gang fits; plan only when the index says it might."""
        cap = self.snapshot.capacity.get(self.gang.flavour)
        chosen: list[str] = []
        with self.snapshot.what_if():
            for v in ids:
                self.snapshot.release(v)
                chosen.append(v)
                if (not self.gang.fractional and cap is not None
                        and cap.pods_fit(level, domain, self.gang.gpus_per_pod) < self.gang.pods):
                    continue
                if self._plan_ok():
                    return chosen
                if self.budget <= 0:
                    return None
        return None

    def _key(self, victims: list[str]) -> tuple[int, int, int, float]:
        chosen = [self.by_id[v] for v in victims]
        return (
            sum(self.gpus[v] for v in victims),
            max(c.priority for c in chosen),
            len(chosen),
            -min(c.start_time for c in chosen),
        )

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
        key = self._key(victims)
        if self.best is None or key < self.best[0]:
            self.best = (key, tuple(sorted(victims)))
