"""Node + GPUNode (API JSON) -> the core's :class:`NodeInfo`. Pure; the watch feeds it.

Why two sources: the Node says how many ``nvidia.com/gpu`` the device plugin advertises (what
kube-scheduler and the kubelet enforce), its labels (fabric levels, GPU product) and taints; the
GPUNode, when the agent runs, adds per-GPU product, health and the NVLink domain. A node without a
GPUNode is still placeable from its Node alone; a GPUNode never adds GPUs the Node does not
advertise, because the kubelet would refuse them.

The GPUs are the node's devices, ``status.capacity`` (``allocatable`` where capacity does not say):
kubelet leaves an unhealthy device in capacity and takes it out of allocatable, so counting
allocatable would make the *highest* index vanish whichever GPU failed (a pod running on GPUs 4-7
would lose GPU 7). Allocatable short of capacity is that many unhealthy GPUs: those the GPUNode
reports unhealthy, and where it does not say which (no agent, an agent without NVML, a device plugin
that is restarting and advertises 0), as many others, chosen among the GPUs no pod is known to use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

from kubegang.api import parse_quantity, whole_count

# The agent's own test of its "NVML unavailable" condition (type Ready, reason NVMLUnavailable), so the
# two sides cannot spell it differently; it lives in the agent (no kubegang.api constant exists for it).
from kubegang.api.gpunode import GPUNodeStatus, nvml_unavailable
from kubegang.extender._pods import GPU_RESOURCE
from kubegang.topology import GPUInfo, NodeInfo, Taint

log = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU feature discovery's product label (``NVIDIA-H100-80GB-HBM3``); products use its spelling."""
MAX_GPUS_PER_NODE = 1024
"""Above any server built (an NVL72 rack is 72 GPUs across 18 nodes; MIG makes at most 7 per GPU)."""


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


def _gpu_count(values: Mapping[str, Any]) -> int:
    try:
        return whole_count(values.get(GPU_RESOURCE, 0))
    except ValueError:
        return 0


def without_fabric_facts(status: GPUNodeStatus) -> GPUNodeStatus:
    """``status`` without what can make the topology inconsistent (its NVLink domain and the GPU UUIDs),
    keeping what cannot (GPU health, product, memory, the wiring inside the node): a quarantined node's
    broken GPUs stay broken (``_quarantine``)."""
    return status.model_copy(update={
        "nvlink_domain": None,
        "gpus": [g.model_copy(update={"uuid": None}) for g in status.gpus],
    })


def keep_last_known(status: GPUNodeStatus, known: GPUNodeStatus | None) -> GPUNodeStatus:
    """The status to place on when the agent publishes ``status`` and ``known`` was the last one kept.

    While the agent cannot use NVML (its Ready condition says so, with the agent's own reason constant,
    :func:`kubegang.api.gpunode.nvml_unavailable`; never the message text) it publishes no GPUs
    at all; read as such, every GPU would be healthy again, a GPU reported lost one poll earlier
    included. Nothing is known anew then, so the GPUs (health, UUIDs) and the NVLink domain last read
    stay; with none read yet, the Node alone says (allocatable short of capacity: unhealthy GPUs).
    """
    if known is None or not known.gpus or not nvml_unavailable(status):
        return status
    return status.model_copy(update={
        "gpus": known.gpus, "gpu_count": known.gpu_count, "healthy_gpus": known.healthy_gpus,
        "nvlink_domain": known.nvlink_domain,
    })


def node_info(node: Mapping[str, Any], gpunode: GPUNodeStatus | None = None,
              in_use: Callable[[], Collection[int]] | None = None) -> NodeInfo | None:
    """The core view of a Node (API JSON), or None when it advertises no GPUs.

    ``in_use`` (called only when needed) gives the GPU indices pods or reservations are known to hold
    on the node: when allocatable is short of capacity and the GPUNode does not say which GPUs are
    unhealthy, those are the last chosen as the unhealthy ones (highest free index first otherwise).
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    usable = _gpu_count(allocatable) if isinstance(allocatable, Mapping) else 0
    count = max(_gpu_count(capacity) if isinstance(capacity, Mapping) else 0, usable)
    if count == 0:
        return None
    if count > MAX_GPUS_PER_NODE:
        # One object per GPU is built below: a bogus count would stall every verb (and memory) here.
        log.warning("node %s: %s has %d devices, above the %d GPUs any node has; left out", name, GPU_RESOURCE,
                    count, MAX_GPUS_PER_NODE)
        return None
    reported = {g.index: g for g in (gpunode.gpus if gpunode is not None else [])}
    unhealthy = {index for index, g in reported.items() if index < count and not g.health.healthy}
    unsaid = count - usable - len(unhealthy)
    if unsaid > 0:
        busy = set(in_use()) if in_use is not None else set()
        others = sorted((i for i in range(count) if i not in unhealthy), key=lambda i: (i in busy, -i))
        unhealthy.update(others[:unsaid])
    labels: dict[str, str] = {k: v for k, v in (meta.get("labels") or {}).items() if isinstance(v, str)}
    default_product = product_name(labels.get(PRODUCT_LABEL))
    gpus = []
    for index in range(count):
        seen = reported.get(index)
        gpus.append(GPUInfo(
            index=index,
            product=product_name(seen.product) if seen is not None and seen.product else default_product,
            memory_mib=(seen.memory_mib or 0) if seen is not None else 0,
            healthy=index not in unhealthy,
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
