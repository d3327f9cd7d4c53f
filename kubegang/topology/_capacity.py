"""Free GPU capacity per flavour, per level, per domain, kept up to date incrementally.

For each flavour key (``*`` = any whole GPU, ``gpu:<product>``, ``mig:<profile>``) and each domain,
a histogram ``hist[f]`` counts the member nodes with exactly ``f`` whole free GPUs of that flavour.
From it "how many pods of ``g`` GPUs fit in domain D" is ``sum(hist[f] * (f // g))``: O(max GPUs
per node), independent of the domain's size. A node's change touches one histogram bucket pair per
level: O(levels). ``by_free[f]`` (the node-level buckets) answers "which nodes have exactly f free"
for best-fit single-node choices without scanning all nodes.

Only whole free GPUs are counted here; GPUs shared in thousandths are the snapshot's business,
because fractional pods are placed on one node and need no domain aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubegang.levels import Level
from kubegang.topology._index import TopologyIndex
from kubegang.topology._model import GPUInfo

ANY_FLAVOUR = "*"
"""Flavour key that counts every whole (non-MIG) GPU, whatever its product."""

_WIDE_LEVELS: tuple[Level, ...] = (Level.NVLINK, Level.LEAF, Level.SPINE, Level.BLOCK, Level.CLUSTER)


def flavour_key(product: str | None = None, mig_profile: str | None = None) -> str:
    """The index key a request uses: a MIG profile, a product, or any whole GPU."""
    if mig_profile:
        return f"mig:{mig_profile}"
    if product:
        return f"gpu:{product}"
    return ANY_FLAVOUR


def gpu_keys(gpu: GPUInfo) -> tuple[str, ...]:
    """Every key a GPU counts under (its own flavour, plus ``*`` when it is a whole GPU)."""
    if gpu.mig_profile:
        return (flavour_key(mig_profile=gpu.mig_profile),)
    return (flavour_key(product=gpu.product), ANY_FLAVOUR) if gpu.product else (ANY_FLAVOUR,)


@dataclass(slots=True, eq=False)
class FlavourCapacity:
    """Aggregates for one flavour key; read-only outside ``CapacityIndex``."""

    total: list[int]
    """Healthy GPUs of this flavour per node."""
    free: list[int]
    """Whole free GPUs of this flavour per node."""
    by_free: list[set[int]]
    """``by_free[f]``: nodes with exactly ``f`` whole free GPUs of this flavour (and total > 0)."""
    hist: list[list[list[int]]] = field(default_factory=list)
    """``hist[level][d][f]``; empty lists for GPU and node levels."""
    free_sum: list[list[int]] = field(default_factory=list)
    """``free_sum[level][d]``: whole free GPUs in the domain."""
    full_nodes: list[list[int]] = field(default_factory=list)
    """``full_nodes[level][d]``: nodes with every GPU of this flavour free."""
    largest: int = -1
    """The node with the most GPUs of this flavour (lowest number on ties): totals never change."""
    most_ever: dict[tuple[int, int], int] = field(default_factory=dict)
    """(level, GPUs per pod) -> pods the roomiest domain of that level holds with every GPU free
    (memo of ``kubegang.placement``'s never-fits test; totals never change)."""

    def pods_fit(self, level: Level, domain: int, gpus_per_pod: int) -> int:
        """Upper bound on pods of ``gpus_per_pod`` whole GPUs that fit in the domain (GPUs only)."""
        if level is Level.NODE:
            return self.free[domain] // gpus_per_pod
        hist = self.hist[level][domain]
        return sum(hist[f] * (f // gpus_per_pod) for f in range(gpus_per_pod, len(hist)) if hist[f])

    def nodes_with(self, level: Level, domain: int, at_least: int) -> int:
        """How many nodes of the domain have at least ``at_least`` whole free GPUs."""
        if level is Level.NODE:
            return int(self.free[domain] >= at_least)
        hist = self.hist[level][domain]
        return sum(hist[at_least:])


class CapacityIndex:
    """Per-flavour free capacity over a ``TopologyIndex``; ``set_free`` is the only mutator."""

    __slots__ = ("flavours", "topology")

    def __init__(self, topology: TopologyIndex) -> None:
        self.topology = topology
        size = topology.max_gpus_per_node + 1
        totals: dict[str, list[int]] = {}
        for n, node in enumerate(topology.nodes):
            for gpu in node.gpus:
                if not gpu.healthy:
                    continue
                for key in gpu_keys(gpu):
                    totals.setdefault(key, [0] * topology.node_count)[n] += 1
        self.flavours: dict[str, FlavourCapacity] = {}
        for key, total in totals.items():
            cap = FlavourCapacity(total=total, free=list(total), by_free=[set() for _ in range(size)],
                                  largest=max(range(len(total)), key=lambda n: (total[n], -n)))
            for n, t in enumerate(total):
                if t:
                    cap.by_free[t].add(n)
            cap.hist = [[] for _ in Level]
            cap.free_sum = [[] for _ in Level]
            cap.full_nodes = [[] for _ in Level]
            for level in _WIDE_LEVELS:
                count = topology.domain_count(level)
                hist = [[0] * size for _ in range(count)]
                free_sum = [0] * count
                full = [0] * count
                for n, d in enumerate(topology.domain_of[level]):
                    hist[d][total[n]] += 1
                    free_sum[d] += total[n]
                    full[d] += total[n] > 0
                cap.hist[level], cap.free_sum[level], cap.full_nodes[level] = hist, free_sum, full
            self.flavours[key] = cap

    def get(self, key: str) -> FlavourCapacity | None:
        """The aggregates for a flavour key, None when no node has that flavour."""
        return self.flavours.get(key)

    def set_free(self, key: str, node: int, new_free: int) -> None:
        """Record that ``node`` now has ``new_free`` whole free GPUs of ``key``: O(levels)."""
        cap = self.flavours[key]
        old = cap.free[node]
        if old == new_free:
            return
        total = cap.total[node]
        if not 0 <= new_free <= total:
            raise ValueError(f"free GPUs of {key} on node #{node} must be in 0..{total}, got {new_free}")
        cap.free[node] = new_free
        cap.by_free[old].discard(node)
        cap.by_free[new_free].add(node)
        delta = new_free - old
        delta_full = int(new_free == total) - int(old == total)
        domain_of = self.topology.domain_of
        for level in _WIDE_LEVELS:
            d = domain_of[level][node]
            hist = cap.hist[level][d]
            hist[old] -= 1
            hist[new_free] += 1
            cap.free_sum[level][d] += delta
            if delta_full:
                cap.full_nodes[level][d] += delta_full
