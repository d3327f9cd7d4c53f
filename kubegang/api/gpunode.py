"""``GPUNode``: what the agent saw on one node, for the placement engine to trust.

Cluster-scoped, named after its node, written only by the agent (status only: there is nothing a
user may ask of a GPUNode, so it has no spec). The model is the single source of the CRD schema
(``crds/gpunodes.kubegang.io.yaml``) and of the agent's output, so the two cannot drift.

Every reading that real hardware may refuse is optional: null means "the agent could not read
it", and ``status.unknown`` says which call failed and why. Consumers must treat null as unknown,
never as zero or false.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kubegang.api._common import CONDITIONS_SCHEMA_EXTRA, ApiModel, Condition
from kubegang.api._resource import KindInfo, PrinterColumn, Resource

GPU_NODE_CONDITIONS = ("Ready", "GPUHealthy", "NVLinkFabric")
"""Condition types the agent writes."""
REASON_NVML_UNAVAILABLE = "NVMLUnavailable"
"""The Ready condition's reason when the agent could not use NVML: its status then lists no GPUs, which
means "unknown", not "none" (the extender keeps the health it last read)."""


class GpuHealth(ApiModel):
    """Whether the placement engine may give this GPU to new work."""

    healthy: bool
    """False after an uncorrected ECC error, a fatal XID, or a pending or failed memory repair."""
    reasons: list[str] = Field(default_factory=list)
    """Human-readable causes, one per finding (empty when healthy)."""


class NvLinkPeer(ApiModel):
    """Another GPU of the same node reachable over NVLink."""

    index: int = Field(ge=0)
    """The peer's NVML index on this node."""
    links: int = Field(ge=1)
    """Active links towards the peer (a bandwidth proxy): direct links, or for an NVSwitch path the
    smaller of the two GPUs' active switch links."""
    via: Literal["direct", "nvswitch"]
    """Point-to-point links, or through NVSwitches."""


class GpuStatus(ApiModel):
    """One physical GPU."""

    index: int = Field(ge=0)
    """NVML index (the order of nvidia-smi)."""
    uuid: str | None = None
    """GPU UUID (GPU-...)."""
    product: str | None = None
    """Product name as NVML reports it, e.g. NVIDIA H200."""
    memory_mib: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="memoryMiB")
    """Total framebuffer memory in MiB."""
    compute_capability: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+$")] | None = None
    """CUDA compute capability, major.minor."""
    mig_mode: Literal["enabled", "disabled"] | None = None
    """Current MIG mode."""
    mig_profiles: list[str] = Field(default_factory=list)
    """GPU-instance profiles the GPU offers (1g.18gb, ...), whether or not MIG is on."""
    pci_bus_id: str | None = None
    """PCI bus id, dddddddd:bb:dd.f."""
    numa_node: Annotated[int, Field(ge=0)] | None = None
    """NUMA node of the CPUs and memory nearest the GPU."""
    cpu_affinity: str | None = None
    """CPUs nearest the GPU, as a Linux cpu list (0-15,32-47)."""
    nvlink_peers: list[NvLinkPeer] = Field(default_factory=list)
    """GPUs of this node reachable over NVLink; empty when none or unknown (see status.unknown)."""
    health: GpuHealth
    """Health verdict."""


class NvLinkDomain(ApiModel):
    """The multi-node NVLink domain (NVSwitch fabric clique) the node's GPUs belong to."""

    id: str
    """<clusterUuid>.<cliqueId>, as GPU feature discovery writes nvidia.com/gpu.clique."""
    cluster_uuid: str
    """The fabric's cluster UUID."""
    clique_id: int = Field(ge=0)
    """The clique within that cluster."""
    state: str
    """Fabric registration state (Completed)."""
    status: str
    """Fabric registration result (Success)."""
    health: str | None = None
    """Fabric health summary where the driver reports it (Healthy, Unhealthy, LimitedCapacity)."""


class IbPort(ApiModel):
    """One port of an InfiniBand (or RoCE) HCA."""

    port: int = Field(ge=0)
    """Port number."""
    guid: str | None = None
    """Port GUID, xxxx:xxxx:xxxx:xxxx."""
    state: str | None = None
    """Logical port state (ACTIVE, DOWN, ...)."""
    rate: str | None = None
    """Link rate as the kernel reports it (400 Gb/sec (4X NDR))."""
    link_layer: str | None = None
    """InfiniBand or Ethernet (RoCE)."""


class Hca(ApiModel):
    """An RDMA host channel adapter from /sys/class/infiniband."""

    name: str
    """Device name (mlx5_0)."""
    node_guid: str | None = None
    """Node GUID."""
    ports: list[IbPort] = Field(default_factory=list)
    """Its ports."""


class UnknownReading(ApiModel):
    """A reading the agent could not make."""

    what: str
    """Which reading, e.g. gpu0.numaNode or infiniband."""
    reason: str
    """Why, e.g. NVMLError_NotSupported: Not Supported."""


class GPUNodeStatus(ApiModel):
    """Everything the agent publishes about one node."""

    gpus: list[GpuStatus] = Field(default_factory=list)
    """The node's GPUs, by index."""
    gpu_count: int = Field(default=0, ge=0)
    """How many GPUs (len(gpus)), for kubectl get."""
    healthy_gpus: int = Field(default=0, ge=0)
    """How many GPUs are healthy, for kubectl get."""
    nvlink_domain: NvLinkDomain | None = None
    """Null when the node is its own NVLink domain."""
    hcas: list[Hca] = Field(default_factory=list)
    """InfiniBand / RoCE adapters."""
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITIONS_SCHEMA_EXTRA)
    """Ready, GPUHealthy and NVLinkFabric."""
    last_seen: dt.datetime | None = None
    """When the agent last read the node."""
    unknown: list[UnknownReading] = Field(default_factory=list)
    """Readings the agent could not make, and why."""


class GPUNode(Resource):
    """One node's GPUs, NVLink domain, HCAs and health, as its agent read them."""

    crd: ClassVar[KindInfo] = KindInfo(
        kind="GPUNode",
        plural="gpunodes",
        short_names=("gn",),
        scope="Cluster",
        printer_columns=(
            PrinterColumn("GPUs", "integer", ".status.gpuCount", "GPUs on the node"),
            PrinterColumn("Healthy", "integer", ".status.healthyGpus", "GPUs fit for new work"),
            PrinterColumn("Domain", "string", ".status.nvlinkDomain.id", "NVLink domain"),
            PrinterColumn("Seen", "date", ".status.lastSeen", "Last reading", 1),
        ),
    )

    kind: Literal["GPUNode"] = "GPUNode"
    """Always GPUNode."""
    status: GPUNodeStatus | None = None
    """Written by the agent on the node of the same name."""


def nvml_unavailable(status: GPUNodeStatus) -> bool:
    """True when the status was built without NVML (``Ready=False``, reason ``NVMLUnavailable``)."""
    return any(c.type == "Ready" and c.reason == REASON_NVML_UNAVAILABLE for c in status.conditions)
