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
from kubegang.shapes import ClusterShape, NodeGroup, load_shape
from kubegang.topology import DUMP_LAYOUTS, GPUInfo, GpuLayout, NodeInfo, TopologyIndex, compile_index, layout

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


def board_layout(group: NodeGroup) -> GpuLayout | None:
    """How a shape's node group is wired inside: the layout of the NVML dump its nodes replay, or
    for the openb trace (which names GPU models, not boards) an assumption by model and count: V100
    8- and 4-GPU servers are SXM2 NVLink boards (Alibaba's V100 instances are), every other model a
    PCIe server (the trace's G2 and G3 are undisclosed; T4 and P100 are PCIe cards)."""
    if group.nvml is not None:
        return layout(DUMP_LAYOUTS[group.nvml]) if group.nvml in DUMP_LAYOUTS else None
    sxm2 = (group.product or "").startswith("V100")
    names = {8: "sxm2-8gpu-cube-mesh" if sxm2 else "pcie-8gpu", 4: "sxm2-4gpu" if sxm2 else "pcie-4gpu",
             2: "pcie-2gpu"}
    return layout(names[group.gpus]) if group.gpus in names else None


def shape_nodes(shape: ClusterShape, limit: int | None = None) -> list[NodeInfo]:
    """The ``NodeInfo`` of every node of ``shape`` (the first ``limit`` ones when given), its GPUs
    wired as ``board_layout`` says."""
    nodes: list[NodeInfo] = []
    for name, group in shape.nodes():
        if limit is not None and len(nodes) >= limit:
            break
        product = group.product or ""
        fabric = group.fabric
        gpus = tuple(GPUInfo(index=i, product=product) for i in range(group.gpus))
        wiring = board_layout(group)
        nodes.append(NodeInfo(
            name=name,
            labels=dict(group.labels),
            gpus=wiring.dress(gpus) if wiring is not None else gpus,
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
