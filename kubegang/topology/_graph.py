"""The topology graph: GPU -> node -> NVLink domain -> leaf -> spine -> block -> cluster.

networkx is used where clarity matters more than speed: building the tree from node labels,
checking it (a node in two leaves, a leaf under two spines, a GPU reported by two nodes, cycles)
and letting humans and tests inspect it. The placement hot path never walks this graph; it uses
the index compiled from it (``_index.py``).

Vertices are ``(Level, domain id)`` pairs and edges point from a domain to what it contains, so the
same label value may appear at two levels without clashing. Every vertex but the cluster root has
exactly one parent one level wider: a strict tree.

A node without a label for a level forms its own singleton domain there, named ``~`` + the id of
the domain just below (``~node-7`` for an unlabelled leaf above an unlabelled NVLink domain of
``node-7``). Unknown wiring is treated as "shares nothing": a gang that requires one leaf can never
be spread over unlabelled nodes, which is the safe reading for a job that asked for locality.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import networkx as nx

from kubegang.levels import Level
from kubegang.topology._labels import TopologyLabels
from kubegang.topology._model import NodeInfo

Vertex = tuple[Level, str]
"""A graph vertex: the level and the domain id at that level."""

CLUSTER_ID = "cluster"
UNLABELLED_PREFIX = "~"


class TopologyError(ValueError):
    """The topology is inconsistent; the message names the domains involved."""


def domain_chain(node: NodeInfo, labels: TopologyLabels) -> list[Vertex]:
    """The vertices from the node up to the cluster, one per level (NODE..CLUSTER)."""
    chain: list[Vertex] = [(Level.NODE, node.name)]
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE, Level.BLOCK):
        value: str | None = None
        if level is Level.NVLINK and node.nvlink_domain:
            value = node.nvlink_domain
        else:
            key = labels.key(level)
            value = node.labels.get(key) if key else None
        if not value:
            value = UNLABELLED_PREFIX + chain[-1][1]
        chain.append((level, value))
    chain.append((Level.CLUSTER, CLUSTER_ID))
    return chain


def build_graph(nodes: Iterable[NodeInfo], labels: TopologyLabels | None = None) -> nx.DiGraph:
    """Build and validate the topology tree; TopologyError names the first inconsistency."""
    labels = labels or TopologyLabels()
    graph = nx.DiGraph()
    graph.add_node((Level.CLUSTER, CLUSTER_ID), level=Level.CLUSTER)
    gpu_owner: dict[str, str] = {}
    for node in nodes:
        if graph.has_node((Level.NODE, node.name)):
            raise TopologyError(f"node {node.name!r} is listed twice")
        chain = domain_chain(node, labels)
        for child, parent in itertools.pairwise(chain):
            _link(graph, parent, child)
        graph.nodes[(Level.NODE, node.name)]["info"] = node
        for gpu in node.gpus:
            if gpu.uuid:
                other = gpu_owner.setdefault(gpu.uuid, node.name)
                if other != node.name:
                    raise TopologyError(
                        f"GPU {gpu.uuid} is reported by two nodes: {other!r} and {node.name!r}")
            _link(graph, (Level.NODE, node.name), (Level.GPU, f"{node.name}/{gpu.index}"))
    validate_graph(graph)
    return graph


def _link(graph: nx.DiGraph, parent: Vertex, child: Vertex) -> None:
    if graph.has_node(child):
        parents = list(graph.predecessors(child))
        if parents and parents[0] != parent:
            raise TopologyError(
                f"{child[0].label} {child[1]!r} is in two {_plural(parent[0])}: "
                f"{parents[0][1]!r} and {parent[1]!r}"
            )
    graph.add_node(parent, level=parent[0])
    graph.add_node(child, level=child[0])
    graph.add_edge(parent, child)


def validate_graph(graph: nx.DiGraph) -> None:
    """Check that ``graph`` is a strict level tree under one cluster root; TopologyError if not.

    Accepts graphs built by hand as well as by ``build_graph``: every vertex is ``(Level, id)``,
    every edge goes from a domain to a member exactly one level narrower, nothing has two parents,
    there is no cycle and there is exactly one root, at the cluster level.
    """
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        path = " -> ".join(f"{u[1]}" for u, _ in cycle)
        raise TopologyError(f"topology has a cycle: {path}")
    roots = [v for v in graph.nodes if graph.in_degree(v) == 0]
    for vertex in graph.nodes:
        if not (isinstance(vertex, tuple) and len(vertex) == 2 and isinstance(vertex[0], Level)):
            raise TopologyError(f"graph vertex {vertex!r} is not a (Level, id) pair")
    bad_roots = [r for r in roots if r[0] is not Level.CLUSTER]
    if bad_roots:
        r = bad_roots[0]
        raise TopologyError(f"{r[0].label} {r[1]!r} has no parent (only the cluster may be a root)")
    if len(roots) != 1:
        raise TopologyError(f"topology must have exactly one cluster root, found {len(roots)}")
    for child in graph.nodes:
        parents = list(graph.predecessors(child))
        if len(parents) > 1:
            names = ", ".join(repr(p[1]) for p in parents)
            raise TopologyError(
                f"{child[0].label} {child[1]!r} is in {len(parents)} {_plural(parents[0][0])}: {names}")
        if parents and parents[0][0] != child[0] + 1:
            p = parents[0]
            allowed = _plural(Level(p[0] - 1)) if p[0] > Level.GPU else "nothing"
            raise TopologyError(
                f"{p[0].label} {p[1]!r} contains {child[0].label} {child[1]!r}; "
                f"a {p[0].label} may only contain {allowed}"
            )


def _plural(level: Level) -> str:
    return "leaves" if level is Level.LEAF else f"{level.label}s"
