"""Largest placeable gang per level: the fragmentation metric.

"How big a job could start right now if it must stay inside one leaf / spine / ...": shown by
``kubectl gang nodes`` and sampled over time by the simulator (no process exports it as a metric
yet). It reads only the capacity index (GPU counts; node selectors and taints are per job, so they are not modelled).
"""

from __future__ import annotations

from kubegang.levels import Level
from kubegang.placement._snapshot import Snapshot
from kubegang.topology import ANY_FLAVOUR, FABRIC_LEVELS


def largest_placeable(snapshot: Snapshot, gpus_per_pod: int | None = None,
                      flavour: str = ANY_FLAVOUR) -> dict[Level, int]:
    """Per level, the most GPUs a gang of ``gpus_per_pod``-GPU pods could take in one domain.

    ``gpus_per_pod`` defaults to a whole node (the widest node's GPU count), so the answer reads
    as "nodes x 8"; pass 1 for "any GPUs". ``flavour`` is a capacity-index key (``flavour_key``).
    """
    topo = snapshot.topology
    g = gpus_per_pod if gpus_per_pod is not None else topo.max_gpus_per_node
    result = dict.fromkeys(FABRIC_LEVELS, 0)
    cap = snapshot.capacity.get(flavour)
    if cap is None or g <= 0:
        return result
    most = max((f for f, nodes in enumerate(cap.by_free) if nodes), default=0)
    result[Level.NODE] = (most // g) * g
    for level in FABRIC_LEVELS[1:]:
        best = max((cap.pods_fit(level, d, g) for d in range(topo.domain_count(level))), default=0)
        result[level] = max(best * g, result[Level(level - 1)])
    return result
