"""Place k identical pods inside one chosen domain: exact, hierarchical best fit.

Given the domain the search picked, compute each member node's exact capacity (every
constraint, see ``_fit``), sum it up the subtree, then walk down: if one child domain holds all
remaining pods, take the tightest such child (best fit: keep roomier children whole); otherwise
take the roomiest children until the remainder fits in one, and best-fit that remainder. This
keeps the gang in as few sub-domains and nodes as possible and fills partly used nodes before
whole ones, which is what FGD's "fragmentation gradient" rewards, at O(members x levels).

For identical pods the domain holds the gang iff the node capacities sum to at least k, so the
walk never fails after that check: the engine's span is exact, not heuristic.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kubegang.levels import Level
from kubegang.placement._fit import dynamic_reason, pods_fit, static_reason
from kubegang.placement._request import GangRequest
from kubegang.placement._snapshot import Snapshot


@dataclass(slots=True)
class DomainFit:
    """Exact capacities inside one domain, and why nodes were short."""

    level: Level
    domain: int
    pods: int = 0
    """Pods of the gang the domain holds now, all constraints applied."""
    node_caps: dict[int, int] = field(default_factory=dict)
    """Member nodes with capacity > 0."""
    blocked: Counter[str] = field(default_factory=Counter)
    """Reason kind -> member nodes that had GPUs free but could not take a pod."""


def measure(snapshot: Snapshot, gang: GangRequest, level: Level, domain: int,
            static_ok: dict[int, str | None]) -> DomainFit:
    """Exact capacity of ``domain``; ``static_ok`` caches static reasons across domains."""
    fit = DomainFit(level, domain)
    cap = snapshot.capacity.get(gang.flavour)
    if cap is None:
        return fit
    nodes = snapshot.topology.nodes
    g = gang.gpus_per_pod
    free = cap.free
    for n in snapshot.topology.members[level][domain]:
        if free[n] < g:
            continue
        if n in static_ok:
            reason = static_ok[n]
        else:
            reason = static_ok[n] = static_reason(nodes[n], gang)
        if reason is not None:
            fit.blocked[reason_kind(reason)] += 1
            continue
        count = pods_fit(snapshot, n, gang)
        if count:
            fit.node_caps[n] = count
            fit.pods += count
        else:
            fit.blocked[reason_kind(dynamic_reason(snapshot, n, gang) or "")] += 1
    return fit


def choose_nodes(snapshot: Snapshot, gang: GangRequest, fit: DomainFit, k: int) -> list[tuple[int, int]]:
    """(node, pods) pairs for ``k`` pods inside ``fit``'s domain; requires ``fit.pods >= k``."""
    topo = snapshot.topology
    sub: dict[tuple[int, int], int] = {}
    for n, c in fit.node_caps.items():
        for level in range(Level.NODE, fit.level):
            key = (level, topo.domain_of[level][n])
            sub[key] = sub.get(key, 0) + c
    cap = snapshot.capacity.get(gang.flavour)
    free = cap.free if cap is not None else []
    out: list[tuple[int, int]] = []

    def tightness(level: int, d: int) -> tuple[int, int, int]:
        spare_gpus = free[d] if level == Level.NODE else (
            cap.free_sum[level][d] if cap is not None else 0)
        return sub[(level, d)], spare_gpus, d

    def walk(level: Level, d: int, k: int) -> None:
        if level is Level.NODE:
            out.append((d, k))
            return
        below = Level(level - 1)
        # Roomiest first; the children that hold all k pods are always a prefix of what is left.
        kids = sorted((c for c in topo.children[level][d] if sub.get((below, c), 0) > 0),
                      key=lambda c: (-sub[(below, c)], c))
        i = 0
        while k > 0:
            if sub[(below, kids[i])] >= k:
                j = i
                while j < len(kids) and sub[(below, kids[j])] >= k:
                    j += 1
                walk(below, min(kids[i:j], key=lambda c: tightness(below, c)), k)
                return
            take = sub[(below, kids[i])]
            walk(below, kids[i], take)
            k -= take
            i += 1

    walk(fit.level, fit.domain, k)
    return out


def reason_kind(reason: str) -> str:
    """A short category for counting why nodes were rejected."""
    for marker, kind in (
        ("cordoned", "cordoned"), ("excluded", "excluded"), ("selector", "node selector"),
        ("taint", "taint"), ("CPU", "CPU"), ("memory", "memory"), ("pod limit", "pod limit"),
    ):
        if marker in reason:
            return kind
    return "GPUs"
