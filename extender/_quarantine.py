"""Keep one inconsistent node from taking placement down for every node.

The core refuses an inconsistent topology as a whole (``TopologyError``): a GPU UUID reported by
two nodes, an NVLink domain whose nodes sit under two leaves, a leaf under two spines. Those facts
come from agents (GPUNode) and admins (labels), so one bad agent or one mislabelled node must not
stop every other pod from being placed. This finds the nodes involved and degrades each one only
as far as needed, in a fixed order (so rebuilding from the same sources gives the same ledger):

1. without the GPUNode facts that can clash: its NVLink domain and GPU UUIDs (what else the GPUNode
   says stays, GPU health above all: a quarantined node's unhealthy GPUs must not turn healthy);
2. also without its fabric labels (the node becomes its own NVLink domain, leaf, spine, block);
3. left out of placement altogether.

Each degraded node gets a reason, logged and shown in ``/debug/snapshot``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from kubegang.levels import Level
from kubegang.topology import NodeInfo, TopologyLabels, Vertex, domain_chain

_FABRIC = (Level.NVLINK, Level.LEAF, Level.SPINE, Level.BLOCK)


def _without_fabric_labels(info: NodeInfo, labels: TopologyLabels) -> NodeInfo:
    keys = {labels.key(level) for level in _FABRIC} - {None}
    return replace(info, nvlink_domain=None,
                   labels=MappingProxyType({k: v for k, v in info.labels.items() if k not in keys}))


def _conflict(chain: list[Vertex], parent_of: Mapping[Vertex, Vertex]) -> str | None:
    for child, parent in itertools.pairwise(chain):
        known = parent_of.get(child)
        if known is not None and known != parent:
            return (f"{child[0].label} {child[1]!r} would be under both {known[0].label} {known[1]!r} "
                    f"and {parent[1]!r}")
    return None


def duplicate_gpus(infos: Iterable[NodeInfo]) -> dict[str, str]:
    """Node -> reason, for every node reporting a GPU UUID that another node reports too."""
    owners: dict[str, list[str]] = {}
    for info in infos:
        for gpu in info.gpus:
            if gpu.uuid:
                owners.setdefault(gpu.uuid, []).append(info.name)
    out: dict[str, str] = {}
    for uuid, nodes in sorted(owners.items()):
        if len(nodes) > 1:
            for node in nodes:
                out.setdefault(node, f"GPU {uuid} is reported by nodes {', '.join(sorted(nodes))}")
    return out


def consistent_nodes(
    infos: Iterable[NodeInfo],
    without_gpunode: Callable[[str], NodeInfo | None],
    labels: TopologyLabels,
) -> tuple[list[NodeInfo], dict[str, str]]:
    """The nodes to place on (degraded where needed) and, per degraded node, what was done and why.

    ``without_gpunode`` gives a node's view without its GPUNode's NVLink domain and GPU UUIDs (step 1)."""
    ordered = sorted(infos, key=lambda n: n.name)
    reasons: dict[str, str] = {}
    duplicated = duplicate_gpus(ordered)
    parent_of: dict[Vertex, Vertex] = {}
    usable: list[NodeInfo] = []
    for info in ordered:
        plain = without_gpunode(info.name)
        why = duplicated.get(info.name)
        tries: list[tuple[NodeInfo, str]] = []
        if why is None:
            tries.append((info, ""))
        if plain is not None:
            tries.append((plain, "GPUNode NVLink domain and GPU UUIDs ignored"))
            tries.append((_without_fabric_labels(plain, labels),
                          "GPUNode NVLink domain and GPU UUIDs, and fabric labels, ignored"))
        for candidate, action in tries:
            chain = domain_chain(candidate, labels)
            conflict = _conflict(chain, parent_of)
            if conflict is None:
                for child, parent in itertools.pairwise(chain):
                    parent_of[child] = parent
                usable.append(candidate)
                if action:
                    reasons[info.name] = f"{action}: {why}"
                break
            why = why or conflict
        else:
            reasons[info.name] = f"left out of placement: {why}"
    return usable, reasons
