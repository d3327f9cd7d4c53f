"""Per-node answers for kube-scheduler's extender verbs: filter (with reasons) and prioritize.

kube-scheduler asks about one pod at a time over a list of nodes. ``feasible_nodes`` gives the
nodes that take the pod now and a reason for every node that does not; ``node_score`` ranks the
feasible ones 0..10 so the default scheduler places like the engine does: where the pod grows the
node's fragmentation least (FGD, ``_fragmentation``), and away from leaves with many whole free
nodes, which gangs need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kubegang.levels import Level
from kubegang.placement import _exhaustion
from kubegang.placement._fit import node_reason
from kubegang.placement._fragmentation import TaskShape
from kubegang.placement._request import GangRequest
from kubegang.placement._snapshot import Snapshot

MAX_SCORE = 10
"""kube-scheduler's extender scores are 0..10."""

UNKNOWN_NODE = "node has no GPUs known to kubegang"


def feasible_nodes(pod: GangRequest, snapshot: Snapshot,
                   node_names: Iterable[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(nodes that take one pod of ``pod`` now, {node: reason} for the others), in input order."""
    number = snapshot.topology.node_number
    names = node_names if node_names is not None else (n.name for n in snapshot.topology.nodes)
    ok: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        n = number.get(name)
        reason = UNKNOWN_NODE if n is None else node_reason(snapshot, n, pod)
        if reason is None:
            ok.append(name)
        else:
            failed[name] = reason
    return ok, failed


def node_score(pod: GangRequest, snapshot: Snapshot, node: str) -> int:
    """0..10, higher is better; 0 when the node cannot take the pod at all."""
    return _node_score(pod, TaskShape.of(pod), _exhaustion.spare_for(pod.flavour, snapshot), snapshot, node)


def node_scores(pod: GangRequest, snapshot: Snapshot, node_names: Iterable[str]) -> dict[str, int]:
    """``node_score`` for each node (the prioritize verb)."""
    shape = TaskShape.of(pod)  # once per request, not per node
    scarce = _exhaustion.spare_for(pod.flavour, snapshot)
    return {name: _node_score(pod, shape, scarce, snapshot, name) for name in node_names}


def _node_score(pod: GangRequest, shape: TaskShape, scarce: _exhaustion.KeepOff, snapshot: Snapshot,
                node: str) -> int:
    n = snapshot.topology.node_number.get(node)
    if n is None or node_reason(snapshot, n, pod) is not None:
        return 0
    cap = snapshot.capacity.get(pod.flavour)
    if cap is None or not cap.total[n]:
        return 0
    total = cap.total[n]
    topo = snapshot.topology
    leaf = topo.domain_of[Level.LEAF][n]
    leaf_nodes = len(topo.members[Level.LEAF][leaf])
    # Leaves with many whole free nodes are what big gangs need: steer small pods elsewhere.
    leaf_term = 1.0 - cap.full_nodes[Level.LEAF][leaf] / leaf_nodes
    # FGD: how little the pod grows the node's fragmentation, as a share of the node's GPUs.
    choice = snapshot.fragmentation.choice(n, shape)
    if choice is None:
        return 0
    frag_term = min(1.0, max(0.0, 0.5 - choice.delta / (2 * total)))
    value = 0.8 * frag_term + 0.2 * leaf_term
    if _exhaustion.on_scarce(snapshot, n, scarce):
        return 1  # as plan(): a pod that accepts any GPU goes elsewhere when it can (``_exhaustion``)
    # Feasible nodes score 2..10 (0 means "cannot", 1 "only if nothing else"); floor keeps small
    # differences visible.
    return 2 + min(MAX_SCORE - 2, math.floor((MAX_SCORE - 2) * value + 1e-9))

