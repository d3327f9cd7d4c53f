"""``GPUNode``: what the agent saw on one node, for the placement engine to trust.

Cluster-scoped, named after its node, written only by the agent (status only: there is nothing a
user may ask of a GPUNode, so it has no spec). The model is the single source of the CRD schema
(``crds/gpunodes.kubegang.io.yaml``) and of the agent's output, so the two cannot drift.

Every reading that real hardware may refuse is optional: ``None`` means "the agent could not read
it", and ``status.unknown`` says which call failed and why. Consumers must treat ``None`` as
unknown, never as zero or false.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

GROUP = "kubegang.io"
VERSION = "v1alpha1"
KIND = "GPUNode"
PLURAL = "gpunodes"
SHORT_NAMES = ("gn",)

ConditionStatus = Literal["True", "False", "Unknown"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class GpuHealth(_Model):
    """Whether the placement engine may give this GPU to new work."""

    healthy: bool
    """False when an uncorrected ECC error, a fatal XID or a pending/failed memory repair was seen."""
    reasons: list[str] = Field(default_factory=list)
    """Human-readable causes, one per finding (empty when healthy)."""


class NvLinkPeer(_Model):
    """Another GPU of the same node reachable over NVLink."""

    index: Annotated[int, Field(ge=0)]
    """The peer's NVML index on this node."""
    links: Annotated[int, Field(ge=1)]
    """Active links usable towards the peer (a bandwidth proxy): direct links, or for an NVSwitch
    path the smaller of the two GPUs' active switch links."""
    via: Literal["direct", "nvswitch"]
    """Point-to-point links, or through NVSwitches (all-to-all)."""


class GpuStatus(_Model):
    """One physical GPU."""

    index: Annotated[int, Field(ge=0)]
    """NVML index (the order of ``nvidia-smi``)."""
    uuid: str | None = None
    """``GPU-…`` UUID."""
    product: str | None = None
    """Product name as NVML reports it, e.g. ``NVIDIA H200``."""
    memory_mib: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="memoryMiB")
    """Total framebuffer memory in MiB."""
    compute_capability: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+$")] | None = Field(
        default=None, alias="computeCapability"
    )
    """CUDA compute capability, ``major.minor``."""
    mig_mode: Literal["enabled", "disabled"] | None = Field(default=None, alias="migMode")
    """Current MIG mode."""
    mig_profiles: list[str] = Field(default_factory=list, alias="migProfiles")
    """GPU-instance profiles the GPU offers (``1g.18gb`` …), whether or not MIG is on."""
    pci_bus_id: str | None = Field(default=None, alias="pciBusId")
    """PCI bus id, ``dddddddd:bb:dd.f``."""
    numa_node: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="numaNode")
    """NUMA node of the CPUs and memory nearest the GPU."""
    cpu_affinity: str | None = Field(default=None, alias="cpuAffinity")
    """CPUs nearest the GPU, as a Linux cpu list (``0-15,32-47``)."""
    nvlink_peers: list[NvLinkPeer] = Field(default_factory=list, alias="nvlinkPeers")
    """GPUs of this node reachable over NVLink; empty when none (or unknown, see status.unknown)."""
    health: GpuHealth
    """Health verdict."""


class NvLinkDomain(_Model):
    """The multi-node NVLink domain (NVSwitch fabric clique) this node's GPUs belong to."""

    id: str
    """``<clusterUuid>.<cliqueId>``, as GPU feature discovery writes ``nvidia.com/gpu.clique``."""
    cluster_uuid: str = Field(alias="clusterUuid")
    """The fabric's cluster UUID."""
    clique_id: Annotated[int, Field(ge=0)] = Field(alias="cliqueId")
    """The clique within that cluster."""
    state: str
    """Fabric registration state (``Completed``)."""
    status: str
    """Fabric registration result (``Success``)."""
    health: str | None = None
    """Fabric health summary where the driver reports it (``Healthy``, ``Unhealthy``,
    ``LimitedCapacity``)."""


class IbPort(_Model):
    """One port of an InfiniBand (or RoCE) HCA."""

    port: Annotated[int, Field(ge=0)]
    guid: str | None = None
    """Port GUID, ``xxxx:xxxx:xxxx:xxxx``."""
    state: str | None = None
    """Logical port state (``ACTIVE``, ``DOWN`` …)."""
    rate: str | None = None
    """Link rate as the kernel reports it (``400 Gb/sec (4X NDR)``)."""
    link_layer: str | None = Field(default=None, alias="linkLayer")
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""


class Hca(_Model):
    """An RDMA host channel adapter from ``/sys/class/infiniband``."""

    name: str
    node_guid: str | None = Field(default=None, alias="nodeGuid")
    ports: list[IbPort] = Field(default_factory=list)


class Condition(_Model):
    """A metav1-style condition."""

    type: str
    status: ConditionStatus
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
    """RFC 3339 time the status last changed."""


class UnknownReading(_Model):
    """A reading the agent could not make."""

    what: str
    """Which reading, e.g. ``gpu0.numaNode`` or ``fabric``."""
    reason: str
    """Why, e.g. ``NVMLError_NotSupported: Not Supported``."""


class GPUNodeStatus(_Model):
    """Everything the agent publishes."""

    gpus: list[GpuStatus] = Field(default_factory=list)
    nvlink_domain: NvLinkDomain | None = Field(default=None, alias="nvlinkDomain")
    """Null when the node is its own NVLink domain."""
    hcas: list[Hca] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    """``Ready``, ``GPUHealthy``, ``NVLinkFabric``."""
    last_seen: str | None = Field(default=None, alias="lastSeen")
    """RFC 3339 time of the readings."""
    unknown: list[UnknownReading] = Field(default_factory=list)


class ObjectMeta(_Model):
    """The part of metadata the agent sets; the API server fills in the rest."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=253)]


class GPUNode(_Model):
    """One node's GPUs, NVLink domain, HCAs and health."""

    api_version: Literal["kubegang.io/v1alpha1"] = Field(default="kubegang.io/v1alpha1", alias="apiVersion")
    kind: Literal["GPUNode"] = "GPUNode"
    metadata: ObjectMeta
    status: GPUNodeStatus | None = None
