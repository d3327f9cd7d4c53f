"""The compiled topology: integer ids and flat arrays for the placement hot path.

Compiled once per topology change (nodes added, removed or relabelled: rare) from the validated
graph. Nodes are numbered 0..N-1 and domains 0..D_L-1 per level, so the placement engine works
with list lookups instead of graph searches: ``domain_of[level][node]``, ``members[level][domain]``,
``children[level][domain]`` (domains one level narrower; at the NVLink level the children are
node numbers, because node-level domain ``i`` is node ``i``).

``proper[level]`` lists the domains with at least two children. A domain with one child has
exactly its child's members, so looking for room in it can never find more than the narrower
level already did; skipping them keeps the per-level scan proportional to the real branching of
the fabric (nodes without NVLink or leaf labels add nothing above the node level).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.topology._graph import build_graph, domain_chain
from kubegang.topology._labels import TopologyLabels
from kubegang.topology._model import NodeInfo

FABRIC_LEVELS: tuple[Level, ...] = tuple(level for level in Level if level >= Level.NODE)
"""Levels that group nodes (everything above the GPU)."""


@dataclass(frozen=True, slots=True, eq=False)
class TopologyIndex:
    """Immutable integer view of a validated topology. Index lists by ``int(level)``."""

    nodes: tuple[NodeInfo, ...]
    node_number: dict[str, int]
    domain_names: tuple[tuple[str, ...], ...]
    """``domain_names[level][d]``; at the node level the node names."""
    domain_number: tuple[dict[str, int], ...]
    domain_of: tuple[tuple[int, ...], ...]
    """``domain_of[level][node]``: the node's domain at each level."""
    members: tuple[tuple[tuple[int, ...], ...], ...]
    """``members[level][d]``: node numbers, in a stable order."""
    children: tuple[tuple[tuple[int, ...], ...], ...]
    """``children[level][d]``: domain numbers one level narrower (empty at the node level)."""
    parent: tuple[tuple[int, ...], ...]
    """``parent[level][d]``: the domain one level wider (-1 at the cluster level)."""
    proper: tuple[tuple[int, ...], ...]
    """Domains with two or more children, per level (at the node level: every node)."""
    max_gpus_per_node: int
    labels: TopologyLabels

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def domain_count(self, level: Level) -> int:
        return len(self.domain_names[level])

    def domain_id(self, level: Level, name: str) -> int:
        """The number of the domain called ``name`` at ``level``; KeyError names both if unknown."""
        try:
            return self.domain_number[level][name]
        except KeyError:
            raise KeyError(f"no {level.label} called {name!r}") from None


def compile_index(nodes: Iterable[NodeInfo], labels: TopologyLabels | None = None) -> TopologyIndex:
    """Validate the topology (``build_graph``) and compile it; TopologyError if inconsistent."""
    labels = labels or TopologyLabels()
    node_list = tuple(sorted(nodes, key=lambda n: n.name))
    build_graph(node_list, labels)  # validates: the tree itself is not kept, its index is
    levels = len(Level)
    names: list[list[str]] = [[] for _ in range(levels)]
    number: list[dict[str, int]] = [{} for _ in range(levels)]
    domain_of: list[list[int]] = [[] for _ in range(levels)]
    for node in node_list:
        for level, domain in domain_chain(node, labels):
            table = number[level]
            d = table.get(domain)
            if d is None:
                d = table[domain] = len(names[level])
                names[level].append(domain)
            domain_of[level].append(d)
    members: list[list[list[int]]] = [[[] for _ in names[level]] for level in range(levels)]
    for level in FABRIC_LEVELS:
        for n, d in enumerate(domain_of[level]):
            members[level][d].append(n)
    children: list[list[list[int]]] = [[[] for _ in names[level]] for level in range(levels)]
    parent: list[list[int]] = [[-1] * len(names[level]) for level in range(levels)]
    for level in FABRIC_LEVELS[1:]:
        below = Level(level - 1)
        for child in range(len(names[below])):
            # Every member of a domain shares its parent (the graph is a validated tree).
            d = domain_of[level][members[below][child][0]]
            parent[below][child] = d
            children[level][d].append(child)
    proper: list[tuple[int, ...]] = [() for _ in range(levels)]
    proper[Level.NODE] = tuple(range(len(node_list)))
    for level in FABRIC_LEVELS[1:]:
        proper[level] = tuple(d for d, kids in enumerate(children[level]) if len(kids) > 1)
    return TopologyIndex(
        nodes=node_list,
        node_number={node.name: i for i, node in enumerate(node_list)},
        domain_names=tuple(tuple(n) for n in names),
        domain_number=tuple(number),
        domain_of=tuple(tuple(d) for d in domain_of),
        members=tuple(tuple(tuple(m) for m in per_level) for per_level in members),
        children=tuple(tuple(tuple(c) for c in per_level) for per_level in children),
        parent=tuple(tuple(p) for p in parent),
        proper=tuple(proper),
        max_gpus_per_node=max((len(n.gpus) for n in node_list), default=0),
        labels=labels,
    )


def with_node_facts(index: TopologyIndex, node: NodeInfo) -> TopologyIndex | None:
    """``index`` with ``node``'s taints and cordon as given, or None if anything else about it differs.

    Taints and cordons come and go (a node whose heartbeats are late is tainted and untainted again
    by kube-controller-manager) without changing the fabric, the GPUs or the domains; only the static
    checks read them, from ``nodes``. Compiling the index again costs O(nodes + GPUs) per
    change, which under such flapping was most of the extender's CPU on 1,024 nodes. None also when
    the node is not in ``index`` or was compiled differently (degraded), so the caller compiles.
    """
    n = index.node_number.get(node.name)
    if n is None:
        return None
    compiled = index.nodes[n]
    if dataclasses.replace(compiled, taints=node.taints, unschedulable=node.unschedulable) != node:
        return None
    nodes = list(index.nodes)
    nodes[n] = node
    return dataclasses.replace(index, nodes=tuple(nodes))


def level_span(index: TopologyIndex, node_numbers: Sequence[int]) -> tuple[Level, int]:
    """The narrowest level whose one domain holds all ``node_numbers``, and that domain."""
    if not node_numbers:
        raise ValueError("level_span needs at least one node")
    for level in FABRIC_LEVELS:
        row = index.domain_of[level]
        d = row[node_numbers[0]]
        if all(row[n] == d for n in node_numbers):
            return level, d
    raise AssertionError("unreachable: the cluster domain holds every node")
