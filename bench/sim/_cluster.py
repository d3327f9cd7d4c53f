"""From a cluster shape (``hack/shapes/*.yaml``) to the core's compiled topology and an empty snapshot.

The simulator builds its cluster exactly as the extender does at run time: ``NodeInfo`` values (GPUs,
CPU, memory, pod slots, labels, NVLink fabric domain) compiled by ``kubegang.topology.compile_index``.
Reading the same shape files as ``hack/cluster`` means the benchmark's "superpod" is the demo's.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from kubegang.api import parse_quantity
from kubegang.placement import Snapshot
from kubegang.shapes import ClusterShape, load_shape
from kubegang.topology import GPUInfo, NodeInfo, TopologyIndex, compile_index

SHAPES_DIR = Path(__file__).resolve().parents[2] / "hack" / "shapes"
"""Where the named shapes live (``superpod-h100``, ``gb200-nvl72``, ``openb``...)."""

_MIB = Decimal(1024 * 1024)


@dataclass(frozen=True)
class Cluster:
    """A compiled cluster: the shape it came from, its topology index and its size."""

    name: str
    topology: TopologyIndex
    gpus: int
    """Whole GPUs in the cluster."""
    products: tuple[str, ...]
    """GPU products present, sorted (the quota flavours)."""

    def snapshot(self) -> Snapshot:
        """A new, empty snapshot over this cluster."""
        return Snapshot(self.topology)


def shape_nodes(shape: ClusterShape, limit: int | None = None) -> list[NodeInfo]:
    """The ``NodeInfo`` of every node of ``shape`` (the first ``limit`` ones when given)."""
    nodes: list[NodeInfo] = []
    for name, group in shape.nodes():
        if limit is not None and len(nodes) >= limit:
            break
        product = group.product or ""
        fabric = group.fabric
        nodes.append(NodeInfo(
            name=name,
            labels=dict(group.labels),
            gpus=tuple(GPUInfo(index=i, product=product) for i in range(group.gpus)),
            nvlink_domain=f"{fabric.cluster_uuid}/{fabric.clique_id}" if fabric else None,
            cpu_milli=int(parse_quantity(group.cpu) * 1000),
            memory_mib=int(parse_quantity(group.memory) / _MIB),
            max_pods=group.pods,
        ))
    return nodes


def load_cluster(name_or_path: str | Path, limit: int | None = None) -> Cluster:
    """Compile a shape given by name (``superpod-h100``) or path; ``limit`` keeps the first nodes."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SHAPES_DIR / f"{name_or_path}.yaml"
    shape = load_shape(path)
    nodes = shape_nodes(shape, limit)
    index = compile_index(nodes)
    products = sorted({g.product for n in nodes for g in n.gpus})
    return Cluster(shape.name, index, sum(len(n.gpus) for n in nodes), tuple(products))
