"""The preemption planner: the smallest set of whole gangs whose eviction lets a gang run.

Which gangs *may* be evicted is policy (priority within a queue, reclaiming lent quota) and is
decided by the caller; this module only answers "which of these, at least, and is it enough?" by
asking the placement engine on the snapshot under checkpoints, so no state is copied.

Search (every answer is verified by a real ``plan`` call, so a returned set always lets the gang run):

1. If the gang already fits, nothing needs to go (``plan`` is asked only when the capacity index
   says some domain could hold it).
2. Domain-local greedy, for every domain that candidates touch up to the gang's required level
   (the widest one, e.g. the cluster, is the global fallback): release the domain's candidates
   node by node, nodes that gain the most pod slots per GPU evicted first (ties: preference
   order), and call ``plan`` only once the capacity index says the domain could hold the gang.
   Evicting inside one domain is what makes room for a topology-constrained gang; a
   cluster-wide greedy would scatter victims across leaves and free nothing usable. Domains too
   small for the gang even when empty are skipped, and so are those with the same candidates as a
   domain tried before them, unless no domain yields a set at all: a wider domain also has the room
   of its nodes without candidates, so it may be the only answer (the planner used to answer None
   there). No domain holds the gang even with every candidate gone: None.
3. The cheapest few raw sets (``_MINIMISE_TOP``) are made irreducible: try to keep each victim
   (largest first); if the gang still fits without evicting it, keep it. Feasibility is monotone in
   free capacity (the engine's check is exact), so after one pass removing any single victim makes
   the gang unplaceable.

The best set wins by: fewest GPUs evicted, then lowest highest-priority victim, then fewest
victims, then the most recently started.

What keeps it fast (the answers are those of running step 2 on every domain; only work that
cannot change them is skipped):

- One pass over the candidates' allocations indexes them by node (O(allocations)); nothing else
  walks the whole candidate list, and nothing is released to find out where candidates are.
- A lower bound on the GPUs any victim set must evict for a domain to hold the gang, from the
  free GPUs of its nodes and the GPUs candidates hold there: a node's next pod slot costs at least
  the GPUs still missing for it (shares of a GPU held by fractional pods count as free). The
  greedy's set for a domain makes the index say the domain holds the gang, so it costs at least the
  bound. Domains are tried cheapest bound first; once three raw sets are found, a domain whose
  bound exceeds the third cheapest set's GPUs cannot enter the three that step 3 minimises, and
  neither can any domain after it. A domain no set can open (infinite bound) is never released.
  Non-proper domains (one child) have their child's nodes and candidates, so they are always
  duplicates of it and are never tried.
- In step 3, a "does it still fit without v" whose answer the capacity index already gives (no
  domain the released nodes belong to could hold the gang by GPU count) costs no release and no
  ``plan`` call; answers are cached per victim set, and the placement found for the chosen set is
  the one returned (``plan`` depends on the state only, not on the order gangs were released in).
  The first ``plan`` ("does it fit already?") is skipped when no domain could hold it by GPU count.

``max_plans`` bounds the ``plan`` calls on huge candidate lists (domains are then tried cheapest
bound first, so the cap cuts the least promising ones).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement import GangRequest, Placement, PlanResult, Snapshot, plan
from kubegang.topology import FABRIC_LEVELS

_MINIMISE_TOP = 3
"""How many of the cheapest raw victim sets get the (plan-per-victim) minimality pass."""

_MILLI = 1000


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
                    *, gone: Sequence[str] = (), max_plans: int = 2000) -> PreemptionPlan | None:
    """The cheapest whole-gang victim set that makes ``gang`` placeable, or None if none does.

    ``gone``: gangs evicted whatever is chosen (the admission cycle's quota victims): released before
    the search, as a victim is, so the set returned is the cheapest *addition* to them (``()`` when
    they alone free a place) and the placement is the one with them gone. They are never victims
    (a candidate among them holds nothing once released) and their GPUs count for nothing; the gang
    itself is never released.

    The snapshot is left exactly as it was.
    """
    if not gone:
        return _Search(gang, snapshot, candidates, max_plans).run()
    with snapshot.what_if():
        for gang_id in gone:
            if gang_id != gang.id:
                snapshot.release(gang_id)
        return _Search(gang, snapshot, candidates, max_plans).run()


_Key = tuple[int, int, int, float]
_Found = tuple[_Key, tuple[int, int, tuple[tuple[int, int, float, str], int]], list[str]]
"""A raw victim set: its key, where its domain comes in the order domains are met, the victims."""


class _Search:
    def __init__(self, gang: GangRequest, snapshot: Snapshot, candidates: Sequence[Candidate],
                 max_plans: int) -> None:
        self.gang = gang
        self.snapshot = snapshot
        self.budget = max_plans
        self.candidates = candidates
        self.by_id: dict[str, Candidate] = {}
        """The usable candidates (not the gang itself, holding something), filled by ``_index``."""
        self.top = gang.required_level if gang.required_level is not None else Level.CLUSTER
        self.g = max(1, gang.gpus_per_pod)
        self.cap = snapshot.capacity.get(gang.flavour)
        self.gpus: dict[str, int] = {}
        """Whole GPUs held, per candidate, filled as needed (``_gpus``)."""
        self.layers: list[dict[int, str]] = [{}]
        """``layers[k][n]``: the k-th candidate with a pod on node ``n`` (each candidate once per node);
        ``layers[0]`` holds every node with a candidate. Dicts of ints and strings are not tracked by
        the garbage collector: one list per node would be thousands of objects per call, which
        promote into full collections (hundreds of ms on a large heap) of the process."""
        self.shared: set[int] = set()
        """Nodes where a candidate holds a share of a GPU (freeing it costs no whole GPU)."""
        self.shared_domains: dict[Level, set[int]] = {}
        """Per level, the domains holding a node of ``shared``."""
        self.fits_cache: dict[frozenset[str], bool] = {}
        self.placements: dict[frozenset[str], Placement] = {}
        """The placement ``plan`` gave with these gangs released (it depends on the state only)."""

    # -- the search ---------------------------------------------------------------------------------

    def run(self) -> PreemptionPlan | None:
        if self._might_fit_now():
            now = plan(self.gang, self.snapshot)
            if isinstance(now, Placement):
                return PreemptionPlan((), 0, now)
        if self.cap is None:
            return None  # no node has GPUs of its flavour: nothing to free
        self._index()
        if not self.by_id:
            return None
        if self.gang.fractional and not self._fits(list(self.by_id)):
            return None  # no bound guides the search for a share of one GPU: ask plan once first
        found = self._domain_local()
        best: tuple[_Key, tuple[str, ...]] | None = None
        # Minimising costs a plan per victim: do it for the few cheapest raw sets only.
        for _, _, raw in sorted(found)[:_MINIMISE_TOP]:
            victims = self._minimise(raw)
            key = self._key(victims)
            if best is None or key < best[0]:
                best = (key, tuple(sorted(victims)))
        if best is None:
            return None
        chosen = best[1]
        placement: PlanResult | None = self.placements.get(frozenset(chosen))
        if placement is None:
            with self.snapshot.what_if():
                for v in chosen:
                    self.snapshot.release(v)
                placement = plan(self.gang, self.snapshot)
        if not isinstance(placement, Placement):
            raise AssertionError(f"preemption set {chosen} was verified but no longer fits")
        return PreemptionPlan(chosen, sum(self._gpus(v) for v in chosen), placement)

    def _index(self) -> None:
        """Where the candidates are: one pass over their allocations.

        A gang offered twice counts once, as its last offer; the gang itself and candidates that
        hold nothing are dropped.
        """
        number = self.snapshot.topology.node_number
        by_id, layers, shared = self.by_id, self.layers, self.shared
        first = layers[0]
        allocations_of = self.snapshot.allocations_of
        whole = _MILLI
        own = self.gang.id
        for c in self.candidates:
            gang_id = c.gang_id
            if gang_id in by_id:
                by_id[gang_id] = c
                continue
            held = allocations_of(gang_id)
            if not held or gang_id == own:
                continue
            by_id[gang_id] = c
            if len(held) == 1:  # the common case: a single pod
                a = held[0]
                nodes: Iterable[int] = (number[a.node],)
                if a.gpu_milli != whole:
                    shared.add(number[a.node])
            else:
                nodes = {number[a.node] for a in held}
                shared.update(number[a.node] for a in held if a.gpu_milli != whole)
            for n in nodes:
                if n not in first:
                    first[n] = gang_id
                    continue
                for layer in layers[1:]:
                    if n not in layer:
                        layer[n] = gang_id
                        break
                else:
                    layers.append({n: gang_id})

    def _on(self, n: int) -> Iterator[str]:
        """The candidates with a pod on node ``n``."""
        for layer in self.layers:
            v = layer.get(n)
            if v is None:
                return
            yield v

    def _gpus(self, gang_id: str) -> int:
        gpus = self.gpus.get(gang_id)
        if gpus is None:
            gpus = self.gpus[gang_id] = self.snapshot.gpus_held(gang_id)
        return gpus

    def _domain_local(self) -> list[_Found]:
        """The greedy's raw set of every domain that can be among the cheapest, with its place in
        the order domains are met (level, candidates touching it, first touched)."""
        topo = self.snapshot.topology
        per_node = topo.max_gpus_per_node // self.g
        domains: list[tuple[float, int, Level]] = []
        for level in FABRIC_LEVELS:
            if level > self.top:
                break
            if level is Level.NODE:
                if per_node >= self.gang.pods:
                    domains.extend((self._rough_bound(level, n), n, level) for n in self.layers[0])
                continue
            if not topo.proper[level]:
                continue  # every domain is its only child's copy (NVLink domains of one node)
            touched = {topo.domain_of[level][n] for n in self.layers[0]}
            children, members = topo.children[level], topo.members[level]
            domains.extend((self._rough_bound(level, d), d, level) for d in touched
                           if len(children[d]) > 1 and len(members[d]) * per_node >= self.gang.pods)
        domains.sort()
        found: list[_Found] = []
        third: list[_Key] = []  # max-heap (negated) of the _MINIMISE_TOP cheapest keys found
        skipped: list[tuple[Level, int, set[str], str]] = []
        for rough, d, level in domains:
            if math.isinf(rough) or self.budget <= 0:
                break
            if len(third) == _MINIMISE_TOP and rough > -third[0][0]:
                break  # this domain and every later one cost more than the third cheapest set
            bound = self._bound(level, d)
            if math.isinf(bound) or (len(third) == _MINIMISE_TOP and bound > -third[0][0]):
                continue
            ids = self._ids(level, d)
            first = min(ids, key=self._order_key)
            if self._tried_before(level, d, ids, first):
                skipped.append((level, d, ids, first))
                continue
            key = self._try(level, d, ids, first, found)
            if key is not None:
                neg = (-key[0], -key[1], -key[2], -key[3])
                if len(third) < _MINIMISE_TOP:
                    heapq.heappush(third, neg)
                elif neg > third[0]:
                    heapq.heapreplace(third, neg)
        if not found:
            # A domain with the same candidates as one tried before also has the room of its nodes
            # without candidates: when nothing else works, it may be the only answer.
            for level, d, ids, first in skipped:
                if self.budget <= 0:
                    break
                self._try(level, d, ids, first, found)
        return found

    def _try(self, level: Level, d: int, ids: set[str], first: str, found: list[_Found]) -> _Key | None:
        """Run the greedy on one domain; record its raw set (and where the domain comes in the order
        domains are met) in ``found``."""
        victims = self._greedy(level, d, self._node_order(level, d, sorted(ids, key=self._order_key)))
        if victims is None:
            return None
        key = self._key(victims)
        found.append((key, (level, len(ids), (self._order_key(first), self._position(first, level, d))), victims))
        return key

    # -- lower bounds -------------------------------------------------------------------------------

    def _rough_bound(self, level: Level, d: int) -> float:
        """A lower bound from the capacity index alone, as if every GPU in use could be freed at one
        GPU evicted each: O(GPUs per node). 0 (no bound) where candidates hold shares of GPUs."""
        cap = self.cap
        if cap is None or self.gang.fractional:
            return 0.0
        if self.shared:
            shared = self.shared_domains.get(level)
            if shared is None:
                domain_of = self.snapshot.topology.domain_of[level]
                shared = self.shared_domains[level] = {domain_of[n] for n in self.shared}
            if d in shared:
                return 0.0
        g, pods = self.g, self.gang.pods
        if level is Level.NODE:
            free, total = cap.free[d], cap.total[d]
            return math.inf if total < pods * g else float(max(0, pods * g - free))
        top = self.snapshot.topology.max_gpus_per_node // g
        firsts: dict[int, int] = {}
        more = 0
        hist = cap.hist[level][d]
        for free in range(len(hist)):
            count = hist[free]
            paid = top - free // g
            if count and paid > 0:
                price = (free // g + 1) * g - free
                firsts[price] = firsts.get(price, 0) + count
                more += (paid - 1) * count
        return _cheapest(pods - cap.pods_fit(level, d, g), 0, firsts, more, g)

    def _bound(self, level: Level, d: int) -> float:
        """Least GPUs to evict for the domain to hold the gang by GPU count, from the GPUs the
        candidates hold on its nodes: a node's next pod slot costs at least the GPUs missing for
        it, and a GPU where candidates hold shares counts as free."""
        cap = self.cap
        if cap is None or self.gang.fractional:
            return 0.0
        g = self.g
        topo = self.snapshot.topology
        members = (d,) if level is Level.NODE else topo.members[level][d]
        number = topo.node_number
        zero = more = 0
        firsts: dict[int, int] = {}
        first = self.layers[0]
        for n in members:
            if n not in first:
                continue
            here = self._on(n)
            whole = 0
            shared: set[int] = set()
            for v in here:
                for a in self.snapshot.allocations_of(v):
                    if number[a.node] == n:
                        if a.gpu_milli == _MILLI:
                            whole += len(a.gpus)
                        else:
                            shared.update(a.gpus)
            free, total = cap.free[n], cap.total[n]
            base = min(total, free + len(shared))
            most = min(total, base + whole)
            zero += base // g - free // g
            paid = most // g - base // g
            if paid > 0:
                price = (base // g + 1) * g - base
                firsts[price] = firsts.get(price, 0) + 1
                more += paid - 1
        pods_fit = cap.free[d] // g if level is Level.NODE else cap.pods_fit(level, d, g)
        return _cheapest(self.gang.pods - pods_fit, zero, firsts, more, g)

    # -- the greedy, as before ----------------------------------------------------------------------

    def _ids(self, level: Level, domain: int) -> set[str]:
        members = self.snapshot.topology.members[level][domain]
        out: set[str] = set()
        first = self.layers[0]
        for n in members:
            if n in first:
                out.update(self._on(n))
        return out

    def _order_key(self, gang_id: str) -> tuple[int, int, float, str]:
        """Preference order: fewest GPUs, lowest priority, most recently started."""
        c = self.by_id[gang_id]
        return (self._gpus(gang_id), c.priority, -c.start_time, gang_id)

    def _domains_of(self, gang_id: str, level: Level) -> list[int]:
        """The candidate's domains at ``level``, in the order the search meets them."""
        topo = self.snapshot.topology
        nodes = {topo.node_number[a.node] for a in self.snapshot.allocations_of(gang_id)}
        return list({topo.domain_of[level][n] for n in nodes})

    def _position(self, gang_id: str, level: Level, domain: int) -> int:
        return self._domains_of(gang_id, level).index(domain)

    def _tried_before(self, level: Level, domain: int, ids: set[str], first: str) -> bool:
        """Whether a domain met before this one (narrower, or as wide and first touched earlier)
        holds the gang when empty and has exactly these candidates (so it was tried instead)."""
        topo = self.snapshot.topology
        per_node = topo.max_gpus_per_node // self.g
        here = self._position(first, level, domain)
        for lower in FABRIC_LEVELS:
            if lower > level:
                break
            for i, d in enumerate(self._domains_of(first, lower)):
                if lower == level and i >= here:
                    break
                if len(topo.members[lower][d]) * per_node < self.gang.pods:
                    continue
                if self._same_ids(lower, d, ids):
                    return True
        return False

    def _same_ids(self, level: Level, domain: int, ids: set[str]) -> bool:
        seen: set[str] = set()
        for n in self.snapshot.topology.members[level][domain]:
            for v in self._on(n):
                if v not in ids:
                    return False
                seen.add(v)
        return len(seen) == len(ids)

    def _node_order(self, level: Level, domain: int, ids: list[str]) -> list[str]:
        """Candidates grouped by node, nodes that gain the most room per GPU evicted first."""
        if self.gang.fractional:
            return ids
        topo = self.snapshot.topology
        cap = self.cap
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

        rank = {v: i for i, v in enumerate(ids)}

        def value(n: int) -> tuple[float, int, int]:
            # Equal room per GPU: the node whose most preferred candidate comes first (``ids`` is in
            # preference order), so a tie spares the gang that has done more work, then node order.
            gain = (cap.free[n] + gpus_on[n]) // g - cap.free[n] // g
            return (gpus_on[n] / gain if gain else float("inf"), rank[on_node[n][0]], n)

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
        cap = self.cap
        chosen: list[str] = []
        with self.snapshot.what_if():
            for v in ids:
                self.snapshot.release(v)
                chosen.append(v)
                if (not self.gang.fractional and cap is not None
                        and cap.pods_fit(level, domain, self.gang.gpus_per_pod) < self.gang.pods):
                    continue
                if self._plan_ok(chosen):
                    return chosen
                if self.budget <= 0:
                    return None
        return None

    def _key(self, victims: Sequence[str]) -> _Key:
        chosen = [self.by_id[v] for v in victims]
        return (
            sum(self._gpus(v) for v in victims),
            max(c.priority for c in chosen),
            len(chosen),
            -min(c.start_time for c in chosen),
        )

    def _minimise(self, victims: list[str]) -> list[str]:
        kept = list(victims)
        for v in sorted(victims, key=lambda x: (-self._gpus(x), x)):
            trial = [x for x in kept if x != v]
            if trial and self._fits(trial):
                kept = trial
        return kept

    def _fits(self, victims: Sequence[str]) -> bool:
        key = frozenset(victims)
        cached = self.fits_cache.get(key)
        if cached is None:
            cached = self._might_fit_without(victims)
            if cached:
                with self.snapshot.what_if():
                    for v in victims:
                        self.snapshot.release(v)
                    cached = self._plan_ok(victims)
            self.fits_cache[key] = cached
        return cached

    def _might_fit_now(self) -> bool:
        """False when no domain could take the gang by GPU count (then ``plan`` cannot either)."""
        cap = self.cap
        if cap is None or self.gang.fractional:
            return True
        topo = self.snapshot.topology
        g, pods = self.gang.gpus_per_pod, self.gang.pods
        most = next((f for f in range(len(cap.by_free) - 1, -1, -1) if cap.by_free[f]), 0)
        if most // g >= pods:
            return True
        for level in FABRIC_LEVELS[1:]:
            if level > self.top:
                break
            if any(cap.pods_fit(level, d, g) >= pods for d in topo.proper[level]):
                return True
        return False

    def _might_fit_without(self, victims: Sequence[str]) -> bool:
        """False when, with ``victims`` gone, no domain holding one of their nodes could take the gang
        by GPU count, counting every GPU they hold whole or share as freed. Every other domain is as
        it was, and the gang did not fit then.
        """
        cap = self.cap
        if cap is None or self.gang.fractional:
            return True
        topo = self.snapshot.topology
        number = topo.node_number
        freed: dict[int, int] = {}
        for v in victims:
            for a in self.snapshot.allocations_of(v):
                n = number[a.node]
                freed[n] = freed.get(n, 0) + len(a.gpus)
        g, pods = self.gang.gpus_per_pod, self.gang.pods
        gain = {n: min(cap.total[n], cap.free[n] + more) // g - cap.free[n] // g for n, more in freed.items()}
        for level in FABRIC_LEVELS:
            if level > self.top:
                break
            if level is Level.NODE:
                if any(cap.free[n] // g + extra >= pods for n, extra in gain.items()):
                    return True
                continue
            domain_of = topo.domain_of[level]
            extra_in: dict[int, int] = {}
            for n, extra in gain.items():
                d = domain_of[n]
                extra_in[d] = extra_in.get(d, 0) + extra
            if any(cap.pods_fit(level, d, g) + extra >= pods for d, extra in extra_in.items()):
                return True
        return False

    def _plan_ok(self, released: Sequence[str]) -> bool:
        """Whether the gang fits now that ``released`` are gone (they are, in the snapshot)."""
        self.budget -= 1
        result = plan(self.gang, self.snapshot)
        if isinstance(result, Placement):
            self.placements[frozenset(released)] = result
            return True
        return False


def _cheapest(need: int, zero: int, firsts: dict[int, int], more: int, g: int) -> float:
    """Least cost of ``need`` pod slots: ``zero`` free ones, then the first paid slots (cost ->
    how many), then ``more`` at ``g`` each; infinite when there are not enough."""
    if need <= zero:
        return 0.0
    need -= zero
    cost = 0
    for price in sorted(firsts):
        take = min(need, firsts[price])
        cost += take * price
        need -= take
        if not need:
            return float(cost)
    if need > more:
        return math.inf
    return float(cost + need * g)
