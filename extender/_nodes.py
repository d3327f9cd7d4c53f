"""Node + GPUNode (API JSON) -> the core's :class:`NodeInfo`. Pure; the watch feeds it.

Why two sources: the Node says how many ``nvidia.com/gpu`` the device plugin advertises (what
kube-scheduler and the kubelet enforce), its labels (fabric levels, GPU product) and taints; the
GPUNode, when the agent runs, adds per-GPU product, health and the NVLink domain. A node without a
GPUNode is still placeable from its Node alone; a GPUNode never adds GPUs the Node does not
advertise, because the kubelet would refuse them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kubegang.api import parse_quantity, whole_count
from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._pods import GPU_RESOURCE
from kubegang.topology import GPUInfo, NodeInfo, Taint

log = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
MAX_GPUS_PER_NODE = 1024
"""Above any server built (an NVL72 rack is 72 GPUs across 18 nodes; MIG makes at most 7 per GPU)."""
"""GPU feature discovery's product label (``NVIDIA-H100-80GB-HBM3``); products use its spelling."""


def product_name(raw: str | None) -> str:
    """NVML says ``NVIDIA H200``, the label says ``NVIDIA-H200``: one spelling (the label's)."""
    return (raw or "").strip().replace(" ", "-")


def _quantity(values: Mapping[str, Any], key: str, scale: int = 1) -> int:
    raw = values.get(key)
    if raw is None:
        return 0
    try:
        return int(parse_quantity(raw if isinstance(raw, int | str) else str(raw)) * scale)
    except ValueError:
        return 0


def node_info(node: Mapping[str, Any], gpunode: GPUNodeStatus | None = None) -> NodeInfo | None:
    """The core view of a Node (API JSON), or None when it advertises no GPUs."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    try:
        count = whole_count(allocatable.get(GPU_RESOURCE, 0))
    except ValueError:
        count = 0
    if count == 0:
        return None
    if count > MAX_GPUS_PER_NODE:
        # One object per GPU is built below: a bogus count would stall every verb (and memory) here.
        log.warning("node %s: allocatable %s is %d, above the %d GPUs any node has; left out", name, GPU_RESOURCE,
                    count, MAX_GPUS_PER_NODE)
        return None
    labels: dict[str, str] = {k: v for k, v in (meta.get("labels") or {}).items() if isinstance(v, str)}
    default_product = product_name(labels.get(PRODUCT_LABEL))
    reported = {g.index: g for g in (gpunode.gpus if gpunode is not None else [])}
    gpus = []
    for index in range(count):
        seen = reported.get(index)
        gpus.append(GPUInfo(
            index=index,
            product=product_name(seen.product) if seen is not None and seen.product else default_product,
            memory_mib=(seen.memory_mib or 0) if seen is not None else 0,
            healthy=seen.health.healthy if seen is not None else True,
            uuid=seen.uuid if seen is not None else None,
            # The wiring the GPU choice inside the node uses; the agent reads no PCIe switch yet.
            numa_node=seen.numa_node if seen is not None else None,
            nvlink_peers=frozenset(p.index for p in seen.nvlink_peers
                                   if p.index != index and p.index < count) if seen is not None else frozenset(),
        ))
    taints = []
    for t in spec.get("taints") or []:
        try:
            taints.append(Taint(key=str(t.get("key", "")), value=str(t.get("value", "")),
                                effect=str(t.get("effect", "NoSchedule"))))
        except ValueError:
            continue  # an effect the core does not know cannot block scheduling here
    domain = gpunode.nvlink_domain.id if gpunode is not None and gpunode.nvlink_domain else None
    return NodeInfo(
        name=name,
        labels=MappingProxyType(labels),
        gpus=tuple(gpus),
        nvlink_domain=domain,
        cpu_milli=_quantity(allocatable, "cpu", 1000),
        memory_mib=_quantity(allocatable, "memory") // (1024 * 1024),
        max_pods=_quantity(allocatable, "pods"),
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable", False)),
    )
