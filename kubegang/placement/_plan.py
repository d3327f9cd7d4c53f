"""``plan(gang, snapshot)``: the narrowest domain that holds the whole gang, best fit within it.

Search, narrowest level first (node, NVLink domain, leaf, spine, block, cluster; never wider than
the gang's required level):

1. From the capacity index, the upper bound of pods each domain holds (GPUs only; O(max GPUs per
   node) per domain). Only "proper" domains (two or more children) are scanned above the node
   level; at the node level the free-count buckets give best-fit candidates directly.
2. Candidates whose bound reaches the gang's size are tried tightest first (best fit: smallest
   room, then fewest free GPUs), so large domains stay free for large gangs.
3. The exact check (``_fill.measure``) applies every constraint to the candidate's members; the
   first candidate that holds the gang is filled by ``_fill.choose_nodes``.

The first level with a fitting domain is the gang's span; since the exact check is exact for
identical pods, the span is optimal. Nothing is allocated: callers apply the placement to the
snapshot (``Snapshot.allocate_all(placement.allocations(gang))``) when they decide to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from kubegang.levels import Level
from kubegang.placement import _exhaustion
from kubegang.placement._fill import DomainFit, choose_nodes, measure
from kubegang.placement._fit import (
    flavour_words,
    gpu_words,
    node_reason,
    whole_free_positions,
)
from kubegang.placement._fragmentation import Choice, TaskShape, logistic_value
from kubegang.placement._gpus import choose_gpus
from kubegang.placement._request import MILLI, GangRequest
from kubegang.placement._result import Placement, PlanResult, PodAssignment, Unplaceable
from kubegang.placement._snapshot import Snapshot
from kubegang.topology import FABRIC_LEVELS, FlavourCapacity


def plan(gang: GangRequest, snapshot: Snapshot) -> PlanResult:
    """A placement for every pod of ``gang`` in one domain, or why there is none."""
    if gang.pods == 1:
        single = _plan_single(gang, snapshot)
        if single is not None:
            return single
        if gang.fractional:
            return _no_fraction(gang)
    top = gang.required_level if gang.required_level is not None else Level.CLUSTER
    cap = snapshot.capacity.get(gang.flavour)
    if cap is None:
        return Unplaceable(gang.id, f"no node has {flavour_words(gang)} GPUs", top, never=True)
    too_big = _larger_than_every_node(snapshot, gang, cap, top)
    if too_big is not None:
        return too_big
    static_ok: dict[int, str | None] = {}
    best: DomainFit | None = None
    for level in FABRIC_LEVELS:
        if level > top:
            break
        if gang.pods == 1 and level < top:
            continue  # no node holds the pod (``_plan_single``): only the reason is left to find
        for domain in _candidates(cap, snapshot, gang, level):
            fit = measure(snapshot, gang, level, domain, static_ok)
            if fit.pods >= gang.pods:
                return _placement(snapshot, gang, fit)
            if best is None or fit.pods >= best.pods:
                best = fit
    return _unplaceable(snapshot, gang, cap, top, best)


def _larger_than_every_node(snapshot: Snapshot, gang: GangRequest, cap: FlavourCapacity,
                            top: Level) -> Unplaceable | None:
    """Unplaceable (never) when one pod wants more GPUs than the largest node of its flavour has."""
    if gang.fractional:
        return None
    largest = cap.largest
    if largest < 0 or cap.total[largest] >= gang.gpus_per_pod:
        return None
    name = snapshot.topology.nodes[largest].name
    return Unplaceable(
        gang.id,
        f"each pod needs {gpu_words(gang, gang.gpus_per_pod)}, but the largest {_kind(gang)}node ({name}) has "
        f"{cap.total[largest]}",
        top, never=True,
    )


def _kind(gang: GangRequest) -> str:
    words = flavour_words(gang)
    return "GPU " if words == "whole" else f"{words} "


def _candidates(cap: FlavourCapacity, snapshot: Snapshot, gang: GangRequest, level: Level) -> Iterator[int]:
    """Domains at ``level`` whose GPU upper bound holds the gang, tightest first (lazily)."""
    g, p = gang.gpus_per_pod, gang.pods
    if level is Level.NODE:
        leaf_of = snapshot.topology.domain_of[Level.LEAF]
        leaf_full = cap.full_nodes[Level.LEAF]
        preferred = _preferred(snapshot, gang, level)
        if preferred >= 0 and cap.free[preferred] >= g * p:
            yield preferred
        for free in range(g * p, len(cap.by_free)):
            # Same room in a bucket: prefer leaves with fewer whole free nodes (keep those for gangs).
            yield from sorted(cap.by_free[free], key=lambda n: (leaf_full[leaf_of[n]], n))
        return
    preferred = _preferred(snapshot, gang, level)
    scored = []
    for d in snapshot.topology.proper[level]:
        room = cap.pods_fit(level, d, g)
        if room >= p:
            scored.append((d != preferred, room, cap.free_sum[level][d], d))
    scored.sort()
    for *_, d in scored:
        yield d


def _preferred(snapshot: Snapshot, gang: GangRequest, level: Level) -> int:
    """The number of the gang's preferred domain at ``level``, or -1."""
    if gang.preferred_domain is None:
        return -1
    names = snapshot.topology.domain_names[level]
    try:
        return names.index(gang.preferred_domain)
    except ValueError:
        return -1


def _placement(snapshot: Snapshot, gang: GangRequest, fit: DomainFit) -> Placement:
    topo = snapshot.topology
    assignments: list[PodAssignment] = []
    g = gang.gpus_per_pod
    for n, count in choose_nodes(snapshot, gang, fit, gang.pods):
        gpus = topo.nodes[n].gpus
        free = whole_free_positions(snapshot, n, gang)
        for _ in range(count):
            # Pod by pod: the first takes the closest set, the next the closest of what is left.
            positions = choose_gpus(snapshot.gpu_wiring[n], free, g)
            taken = set(positions)
            free = [p for p in free if p not in taken]
            assignments.append(PodAssignment(len(assignments), topo.nodes[n].name,
                                             tuple(gpus[p].index for p in positions)))
    cap = snapshot.capacity.flavours[gang.flavour]
    room = cap.free[fit.domain] if fit.level is Level.NODE else cap.free_sum[fit.level][fit.domain]
    return Placement(
        gang_id=gang.id,
        assignments=tuple(assignments),
        level=fit.level,
        domain=topo.domain_names[fit.level][fit.domain],
        score=_score(fit.level, gang.total_gpus, room),
        preferred_met=gang.preferred_level is None or fit.level <= gang.preferred_level,
    )


def _score(level: Level, used: int, room: int) -> float:
    narrow = (Level.CLUSTER - level) / (Level.CLUSTER - Level.NODE)
    tight = used / room if room else 1.0
    return round(0.5 * narrow + 0.5 * min(tight, 1.0), 4)


def _unplaceable(snapshot: Snapshot, gang: GangRequest, cap: FlavourCapacity, top: Level,
                 best: DomainFit | None) -> Unplaceable:
    topo = snapshot.topology
    g, p = gang.gpus_per_pod, gang.pods
    where = "the cluster" if top is Level.CLUSTER else f"one {top.label}"
    whole_nodes = g >= topo.max_gpus_per_node
    need = f"needs {p} {'nodes' if whole_nodes else 'pods'} x {gpu_words(gang, g)} in {where}"
    if top is Level.NODE:
        most = max((f for f, nodes in enumerate(cap.by_free) if nodes), default=0)
        bound, domain = most // g, min(cap.by_free[most], default=-1)
    else:
        bound, domain = max(((cap.pods_fit(top, d, g), d) for d in range(topo.domain_count(top))),
                            key=lambda pair: (pair[0], -pair[1]), default=(0, -1))
    if domain < 0:
        nothing = Unplaceable(gang.id, f"{need}; no {flavour_words(gang)} GPU is free", top)
        return _unless_never(snapshot, gang, cap, top, nothing)
    name = topo.domain_names[top][domain]
    label = "cluster" if top is Level.CLUSTER else f"best {top.label} ({name})"
    has = f"the {label} has {bound} such nodes free" if whole_nodes else f"the {label} has room for {bound}"
    room = bound
    if bound >= p and best is not None:
        # Free GPUs would do; other constraints (taints, selector, CPU...) blocked the rest.
        room = best.pods
        blocked = ", ".join(f"{count} by {kind}" for kind, count in best.blocked.most_common())
        has += f" by GPU count, but at most {best.pods} usable" + (f" ({blocked})" if blocked else "")
    elif bound >= p:
        # No domain had a single usable node: a count of free GPUs alone would mislead.
        room = 0
        has += " by GPU count, but none usable by this job (node selector, GPU product, taints, CPU or memory)"
    return _unless_never(snapshot, gang, cap, top, Unplaceable(gang.id, f"{need}; {has}", top, name, room))


def _unless_never(snapshot: Snapshot, gang: GangRequest, cap: FlavourCapacity, top: Level,
                  result: Unplaceable) -> Unplaceable:
    """``result``, marked never (and saying so) when no domain at ``top`` could hold the gang at all."""
    ever = _most_ever(snapshot, cap, top, gang.gpus_per_pod)
    if ever >= gang.pods:
        return result
    where = "the cluster could never" if top is Level.CLUSTER else f"no {top.label} could ever"
    text = f"{result.reason}; {where} hold it (at most {ever} with every GPU free)"
    return dataclasses.replace(result, reason=text, never=True)


def _most_ever(snapshot: Snapshot, cap: FlavourCapacity, top: Level, gpus_per_pod: int) -> int:
    """Pods of ``gpus_per_pod`` that the roomiest domain at ``top`` could hold with every GPU free.

    Only asked when a gang does not fit now: it tells "wait" from "never" (a 3-node gang on a 2-node
    cluster, a 9-node gang whose required leaf has 8 nodes). Totals never change, so it is computed
    once per level and pod size (O(nodes)) and kept by the capacity index."""
    key = (int(top), gpus_per_pod)
    known = cap.most_ever.get(key)
    if known is not None:
        return known
    per_domain: dict[int, int] = {}
    domain_of = snapshot.topology.domain_of[top] if top is not Level.CLUSTER else None
    for n, total in enumerate(cap.total):
        if total >= gpus_per_pod:
            d = domain_of[n] if domain_of is not None else 0
            per_domain[d] = per_domain.get(d, 0) + total // gpus_per_pod
    cap.most_ever[key] = most = max(per_domain.values(), default=0)
    return most


def _plan_single(gang: GangRequest, snapshot: Snapshot) -> Placement | None:
    """One pod: the node (and GPU) where it grows fragmentation least (FGD, see ``_fragmentation``).

    Ties between node states go to best fit; between nodes in one state, to the leaf with the
    fewest whole free nodes (keep those for gangs), then the lowest node number. A pod that
    accepts any GPU goes off scarce GPU models, and every pod off scarce node classes, when another
    node takes it (``_exhaustion``). None
    when no node takes the pod (the caller's search then says why).
    """
    cap = snapshot.capacity.get(gang.flavour)
    if cap is None:
        return None
    topo = snapshot.topology
    leaf_of = topo.domain_of[Level.LEAF]
    leaf_full = cap.full_nodes[Level.LEAF]

    def leaf_first(n: int) -> tuple[int, int]:
        return leaf_full[leaf_of[n]], n

    index = snapshot.fragmentation
    shape = TaskShape.of(gang)
    scarce = _exhaustion.spare_for(gang.flavour, snapshot)
    # First off the GPU models and node classes whose free GPUs are short of the demand only they
    # can serve, then anywhere.
    for keep_off in (scarce, _exhaustion.NOTHING) if scarce else (_exhaustion.NOTHING,):
        for choice, members in index.ranked(shape):
            nodes = [n for n in members if not _exhaustion.on_scarce(snapshot, n, keep_off)] if keep_off else members
            if not nodes:
                continue
            # The best node alone usually takes the pod: sort the state's nodes only when it does not.
            first = min(nodes, key=leaf_first)
            if node_reason(snapshot, first, gang) is None:
                return _single_placement(snapshot, gang, first, choice)
            for n in sorted(nodes, key=leaf_first):
                if n != first and node_reason(snapshot, n, gang) is None:
                    return _single_placement(snapshot, gang, n, choice)
    return None


def _single_placement(snapshot: Snapshot, gang: GangRequest, n: int, choice: Choice) -> Placement:
    node = snapshot.topology.nodes[n]
    kind = snapshot.workload.model.kind
    milli = snapshot.gpu_milli[n]
    keys = snapshot.gpu_keys[n]
    wiring = snapshot.gpu_wiring[n]
    if gang.fractional:
        # Any GPU with the chosen room will do for FGD; among whole free ones, the wiring decides
        # which (beside those taken, so groups stay whole for multi-GPU pods).
        same = [p for p, m in enumerate(milli)
                if m == choice.gpu_milli and snapshot.gpu_healthy[n][p] and kind(keys[p]) == choice.kind]
        positions = list(choose_gpus(wiring, same, 1) if choice.gpu_milli == MILLI else same[:1])
        want = gang.gpu_fraction_milli
    else:
        free = whole_free_positions(snapshot, n, gang)
        of_kind = [p for p in free if kind(keys[p]) == choice.kind]
        if len(of_kind) >= gang.gpus_per_pod:
            positions = list(choose_gpus(wiring, of_kind, gang.gpus_per_pod))
        else:  # the chosen kind first, then others (mixed flavours on one node)
            positions = sorted(free, key=lambda p: (kind(keys[p]) != choice.kind, p))[: gang.gpus_per_pod]
        want = MILLI
    return Placement(
        gang_id=gang.id,
        assignments=(PodAssignment(0, node.name, tuple(node.gpus[p].index for p in positions), want),),
        level=Level.NODE,
        domain=node.name,
        score=round(0.5 + 0.5 * logistic_value(choice.delta, 1.0), 4),
        preferred_met=True,
    )


def _no_fraction(gang: GangRequest) -> Unplaceable:
    return Unplaceable(
        gang.id,
        f"needs {gang.gpu_fraction_milli}/1000 of one {flavour_words(gang)} GPU; no eligible node has that much free",
        Level.NODE,
    )


def explain_node(gang: GangRequest, snapshot: Snapshot, node: str) -> str | None:
    """Why ``node`` cannot take one pod of ``gang`` now, or None."""
    return node_reason(snapshot, snapshot.topology.node_number[node], gang)
