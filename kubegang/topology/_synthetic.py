"""Regular fabrics built in code, for tests, benchmarks and the simulator's quick shapes.

Real clusters come from the API (extender) or from ``hack/shapes`` (simulator); this builds the
regular trees those shapes describe without YAML: ``nodes`` nodes of ``gpus`` GPUs, grouped
``nvlink_size`` to an NVLink domain, ``leaf_size`` to a leaf, ``spine_size`` leaves to a spine and
``block_size`` spines to a block (0 means the level is not labelled).
"""

from __future__ import annotations

from kubegang.topology._labels import TopologyLabels
from kubegang.topology._model import GPUInfo, NodeInfo

DEFAULT_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def uniform_fabric(
    nodes: int,
    gpus: int = 8,
    *,
    nvlink_size: int = 0,
    leaf_size: int = 32,
    spine_size: int = 8,
    block_size: int = 0,
    product: str = DEFAULT_PRODUCT,
    cpu_milli: int = 224_000,
    memory_mib: int = 2_097_152,
    labels: TopologyLabels | None = None,
) -> list[NodeInfo]:
    """A regular fabric; node ``i`` is called ``node-{i:05d}``."""
    keys = labels or TopologyLabels()
    out: list[NodeInfo] = []
    for i in range(nodes):
        node_labels: dict[str, str] = {}
        leaf = i // leaf_size if leaf_size else -1
        spine = leaf // spine_size if leaf_size and spine_size else -1
        block = spine // block_size if spine >= 0 and block_size else -1
        for key, value, prefix in ((keys.leaf, leaf, "leaf"), (keys.spine, spine, "spine"),
                                   (keys.block, block, "block")):
            if key and value >= 0:
                node_labels[key] = f"{prefix}-{value}"
        out.append(
            NodeInfo(
                name=f"node-{i:05d}",
                labels=node_labels,
                gpus=tuple(GPUInfo(index=j, product=product, memory_mib=81_559) for j in range(gpus)),
                nvlink_domain=f"nvl-{i // nvlink_size}" if nvlink_size else None,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                max_pods=110,
            )
        )
    return out
