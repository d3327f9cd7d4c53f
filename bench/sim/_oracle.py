"""The neutral judge of "narrowest feasible domain": counting, not any policy's planner.

A gang of ``pods`` pods of ``g`` GPUs fits in a domain when the domain's nodes hold that many pods,
``sum(free[n] // g) >= pods``; the narrowest feasible level is the first level (node, NVLink, leaf,
spine, block, cluster) with such a domain. This is a function of the cluster's topology, a per-node
free-GPU vector and the gang's size alone, so judging kubegang by it does not ask kubegang's own
``plan()`` whether kubegang did well (the audit's objection to the earlier metric).

Two vectors are judged: the GPUs free at the moment the gang starts, with its own allocation given
back (``now``: what any placement could have achieved then), and every GPU of the cluster (``empty``:
the best the topology allows at all).
"""

from __future__ import annotations

from collections.abc import Sequence

from kubegang.levels import Level
from kubegang.topology import FABRIC_LEVELS, TopologyIndex


def narrowest_level(topology: TopologyIndex, free: Sequence[int], pods: int, gpus_per_pod: int) -> Level | None:
    """The narrowest level with a domain whose ``free`` GPUs hold the gang; None when none does."""
    if pods < 1 or gpus_per_pod < 1:
        raise ValueError(f"narrowest_level: pods and gpus_per_pod must be >= 1, got {pods} and {gpus_per_pod}")
    per_node = [f // gpus_per_pod for f in free]
    if sum(per_node) < pods:
        return None
    for level in FABRIC_LEVELS:
        for members in topology.members[level]:
            if sum(per_node[n] for n in members) >= pods:
                return level
    return None  # unreachable: the cluster domain holds every node
