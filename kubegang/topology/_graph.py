"""The topology tree: GPU -> node -> NVLink domain -> leaf -> spine -> block -> cluster.

Built from node labels and checked (a node in two leaves, a leaf under two spines, a GPU reported by
two nodes, cycles), with errors that name the domains involved. The placement hot path never walks
this tree; it uses the index compiled from it (``_index.py``).

Vertices are ``(Level, domain id)`` pairs and edges point from a domain to what it contains, so the
same label value may appear at two levels without clashing. Every vertex but the cluster root has
exactly one parent one level wider: a strict tree.

A node without a label for a level forms its own singleton domain there, named ``~`` + the id of
the domain just below (``~node-7`` for an unlabelled leaf above an unlabelled NVLink domain of
``node-7``). Unknown wiring is treated as "shares nothing": a gang that requires one leaf can never
be spread over unlabelled nodes, which is the safe reading for a job that asked for locality.

Why plain dictionaries and not a graph library: the tree is built and checked once per topology change
and then only its compiled index is read. networkx, which this module used before, cost every process
that places (the extender, both operator replicas) about 20 MiB of memory for its import alone, and a
graph of every GPU (about 10,000 vertices on 1,024 nodes of 8 GPUs) kept alive in the index for
nothing; one parent per vertex is all a strict tree needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class TopologyTree:
    """A validated topology: each vertex's parent, and the nodes' facts by name."""

    parents: Mapping[Vertex, Vertex] = field(default_factory=dict)
    """Every vertex but the cluster root -> the domain one level wider that holds it."""
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    """Node name -> what is known of it."""

    def parent(self, vertex: Vertex) -> Vertex | None:
        """The domain that holds ``vertex`` (None for the cluster root or a vertex not in the tree)."""
        return self.parents.get(vertex)

    def has_edge(self, parent: Vertex, child: Vertex) -> bool:
        """Whether ``parent`` holds ``child`` directly."""
        return self.parents.get(child) == parent


def build_graph(nodes: Iterable[NodeInfo], labels: TopologyLabels | None = None) -> TopologyTree:
    """Build and validate the topology tree; TopologyError names the first inconsistency."""
    labels = labels or TopologyLabels()
    parents: dict[Vertex, Vertex] = {}
    infos: dict[str, NodeInfo] = {}
    gpu_owner: dict[str, str] = {}
    for node in nodes:
        if node.name in infos:
            raise TopologyError(f"node {node.name!r} is listed twice")
        infos[node.name] = node
        chain = domain_chain(node, labels)
        for child, parent in itertools.pairwise(chain):
            _link(parents, parent, child)
        for gpu in node.gpus:
            if gpu.uuid:
                other = gpu_owner.setdefault(gpu.uuid, node.name)
                if other != node.name:
                    raise TopologyError(
                        f"GPU {gpu.uuid} is reported by two nodes: {other!r} and {node.name!r}")
            _link(parents, (Level.NODE, node.name), (Level.GPU, f"{node.name}/{gpu.index}"))
    validate_graph(((parent, child) for child, parent in parents.items()), vertices=[(Level.CLUSTER, CLUSTER_ID)])
    return TopologyTree(parents, infos)


def _link(parents: dict[Vertex, Vertex], parent: Vertex, child: Vertex) -> None:
    known = parents.setdefault(child, parent)
    if known != parent:
        raise TopologyError(
            f"{child[0].label} {child[1]!r} is in two {_plural(parent[0])}: {known[1]!r} and {parent[1]!r}")


def validate_graph(edges: Iterable[tuple[Vertex, Vertex]], *, vertices: Iterable[Vertex] = ()) -> None:
    """Check that the ``(parent, child)`` edges (plus any lone ``vertices``) form a strict level tree
    under one cluster root; TopologyError if not.

    Accepts trees built by hand as well as by ``build_graph``: every vertex is ``(Level, id)``, every
    edge goes from a domain to a member exactly one level narrower, nothing has two parents, there is
    no cycle and there is exactly one root, at the cluster level.
    """
    parents_of: dict[Vertex, list[Vertex]] = {}
    order: dict[Vertex, None] = dict.fromkeys(vertices)
    for parent, child in edges:
        order.setdefault(parent)
        order.setdefault(child)
        parents_of.setdefault(child, []).append(parent)
    cycle = _cycle(parents_of)
    if cycle:
        raise TopologyError(f"topology has a cycle: {' -> '.join(v[1] for v in cycle)}")
    for vertex in order:
        if not (isinstance(vertex, tuple) and len(vertex) == 2 and isinstance(vertex[0], Level)):
            raise TopologyError(f"graph vertex {vertex!r} is not a (Level, id) pair")
    roots = [v for v in order if not parents_of.get(v)]
    bad_roots = [r for r in roots if r[0] is not Level.CLUSTER]
    if bad_roots:
        r = bad_roots[0]
        raise TopologyError(f"{r[0].label} {r[1]!r} has no parent (only the cluster may be a root)")
    if len(roots) != 1:
        raise TopologyError(f"topology must have exactly one cluster root, found {len(roots)}")
    for child in order:
        parents = parents_of.get(child, [])
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


def _cycle(parents_of: Mapping[Vertex, list[Vertex]]) -> list[Vertex]:
    """A cycle of the child -> parent relation, as the vertices along it (empty if none)."""
    done: set[Vertex] = set()
    for start in parents_of:
        if start in done:
            continue
        path: list[Vertex] = []
        on_path: dict[Vertex, int] = {}
        stack: list[tuple[Vertex, int]] = [(start, 0)]
        while stack:
            vertex, i = stack.pop()
            if i == 0:
                if vertex in on_path:
                    return [*path[on_path[vertex]:], vertex]
                if vertex in done:
                    continue
                on_path[vertex] = len(path)
                path.append(vertex)
            ups = parents_of.get(vertex, [])
            if i < len(ups):
                stack.append((vertex, i + 1))
                stack.append((ups[i], 0))
            else:
                path.pop()
                del on_path[vertex]
                done.add(vertex)
    return []


def _plural(level: Level) -> str:
    return "leaves" if level is Level.LEAF else f"{level.label}s"
