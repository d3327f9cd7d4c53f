"""Does a node take a gang's pod, and how many of them: the exact per-node check.

The capacity index gives upper bounds (GPUs only) per domain; this module is the exact answer for
one node, with every constraint: cordon, excluded nodes, node selector, taints, GPU flavour, free
GPUs, CPU, memory and pod slots. Reasons are short and name the numbers, because they end up in
kube-scheduler's FailedNodes map and in GPUJob conditions.
"""

from __future__ import annotations

from kubegang.placement._request import MILLI, GangRequest
from kubegang.placement._snapshot import Snapshot
from kubegang.topology import NodeInfo

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def static_reason(node: NodeInfo, gang: GangRequest) -> str | None:
    """Why ``node`` can never take this gang's pods regardless of load, or None."""
    if node.unschedulable:
        return "node is cordoned"
    if node.name in gang.excluded_nodes:
        return "node is excluded for this gang"
    for key, value in gang.node_selector.items():
        actual = node.labels.get(key)
        if actual != value:
            return f"node selector {key}={value} does not match ({key}={actual or '<unset>'})"
    for taint in node.taints:
        if taint.effect in _HARD_EFFECTS and not any(t.tolerates(taint) for t in gang.tolerations):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    return None


def pods_fit(snapshot: Snapshot, n: int, gang: GangRequest) -> int:
    """How many more of the gang's pods node ``n`` holds now (ignores static constraints)."""
    node = snapshot.topology.nodes[n]
    if gang.fractional:
        fits = any(
            healthy and free >= gang.gpu_fraction_milli and _flavour_ok(snapshot, n, p, gang)
            for p, (free, healthy) in enumerate(
                zip(snapshot.gpu_milli[n], snapshot.gpu_healthy[n], strict=True))
        )
        count = 1 if fits else 0
    else:
        cap = snapshot.capacity.get(gang.flavour)
        count = cap.free[n] // gang.gpus_per_pod if cap is not None else 0
    if count and gang.cpu_milli and node.cpu_milli:
        count = min(count, max(0, node.cpu_milli - snapshot.cpu_used[n]) // gang.cpu_milli)
    if count and gang.memory_mib and node.memory_mib:
        count = min(count, max(0, node.memory_mib - snapshot.memory_used[n]) // gang.memory_mib)
    if count and node.max_pods:
        count = min(count, max(0, node.max_pods - snapshot.pods_used[n]))
    return count


def dynamic_reason(snapshot: Snapshot, n: int, gang: GangRequest) -> str | None:
    """Why node ``n`` cannot take one more pod of the gang right now, or None."""
    node = snapshot.topology.nodes[n]
    if gang.fractional:
        best = max(
            (free for p, free in enumerate(snapshot.gpu_milli[n])
             if snapshot.gpu_healthy[n][p] and _flavour_ok(snapshot, n, p, gang)),
            default=-1,
        )
        if best < 0:
            return f"no {flavour_words(gang)} GPU"
        if best < gang.gpu_fraction_milli:
            return f"needs {gang.gpu_fraction_milli}/1000 of a GPU; the freest GPU has {best}/1000"
    else:
        cap = snapshot.capacity.get(gang.flavour)
        total = cap.total[n] if cap is not None else 0
        if total == 0:
            return f"no {flavour_words(gang)} GPU"
        free = cap.free[n] if cap is not None else 0
        if free < gang.gpus_per_pod:
            return f"needs {gpu_words(gang, gang.gpus_per_pod)} free; has {free} of {total}"
    if gang.cpu_milli and node.cpu_milli:
        free_cpu = node.cpu_milli - snapshot.cpu_used[n]
        if free_cpu < gang.cpu_milli:
            return f"needs {gang.cpu_milli}m CPU; has {max(free_cpu, 0)}m free"
    if gang.memory_mib and node.memory_mib:
        free_mem = node.memory_mib - snapshot.memory_used[n]
        if free_mem < gang.memory_mib:
            return f"needs {gang.memory_mib}Mi memory; has {max(free_mem, 0)}Mi free"
    if node.max_pods and snapshot.pods_used[n] >= node.max_pods:
        return f"pod limit reached ({node.max_pods})"
    return None


def node_reason(snapshot: Snapshot, n: int, gang: GangRequest) -> str | None:
    """Why node ``n`` cannot take one pod of the gang now (static first), or None if it can."""
    return static_reason(snapshot.topology.nodes[n], gang) or dynamic_reason(snapshot, n, gang)


def _flavour_ok(snapshot: Snapshot, n: int, position: int, gang: GangRequest) -> bool:
    return gang.flavour in snapshot.gpu_keys[n][position]


def flavour_words(gang: GangRequest) -> str:
    """How reasons name the gang's GPU flavour: ``MIG 1g.10gb``, a product, or ``whole``."""
    if gang.mig_profile:
        return f"MIG {gang.mig_profile}"
    return gang.gpu_product or "whole"


def gpu_words(gang: GangRequest, count: int) -> str:
    """``8 GPUs``, ``8 NVIDIA-H100 GPUs``, ``2 MIG 1g.10gb GPUs``."""
    flavour = flavour_words(gang) + " " if gang.mig_profile or gang.gpu_product else ""
    return f"{count} {flavour}GPU" + ("" if count == 1 else "s")


def whole_free_positions(snapshot: Snapshot, n: int, gang: GangRequest) -> list[int]:
    """GPU positions on node ``n`` that are entirely free and of the gang's flavour."""
    key = gang.flavour
    return [
        p for p, free in enumerate(snapshot.gpu_milli[n])
        if free == MILLI and snapshot.gpu_healthy[n][p] and key in snapshot.gpu_keys[n][p]
    ]
