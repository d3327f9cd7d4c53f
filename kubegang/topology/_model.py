"""What the core knows about a node: plain frozen dataclasses, no Kubernetes objects.

The extender converts Node + GPUNode objects into these and the simulator builds them from cluster
shapes, so the topology graph and the placement engine are tested and benchmarked without an API
server. They are immutable: a change of a node's hardware or labels means a new ``NodeInfo`` and a
recompiled index, while what changes every second (allocations) lives in the placement snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class GPUInfo:
    """One allocatable GPU device of a node (a MIG instance is listed as its own device)."""

    index: int
    """Device index on the node, unique within the node (what ``nvidia.com/gpu`` indices name)."""
    product: str = ""
    """GPU model, e.g. ``NVIDIA-H100-80GB-HBM3``; a gang may require one (its flavour)."""
    memory_mib: int = 0
    """Device memory; informational for placement."""
    healthy: bool = True
    """False when the agent saw XID/ECC trouble: the GPU is never allocated."""
    mig_profile: str | None = None
    """MIG profile (``1g.10gb``) when this device is a MIG instance: its flavour is the profile."""
    uuid: str | None = None
    """Optional globally unique id; used only to detect one GPU reported by two nodes."""
    numa_node: int | None = None
    """NUMA node of the CPUs and memory nearest the GPU (the agent's ``numaNode``); None: unknown."""
    pcie_switch: str | None = None
    """The PCIe switch the GPU hangs off, any id unique within the node (GPUs under one switch talk
    peer to peer without the host bridge); None: unknown, or no switch shared with another GPU."""
    nvlink_peers: frozenset[int] = frozenset()
    """Device indices of this node's GPUs reachable over NVLink, directly or through NVSwitches."""

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"GPUInfo.index must be >= 0, got {self.index}")
        if self.numa_node is not None and self.numa_node < 0:
            raise ValueError(f"GPUInfo.numa_node of GPU {self.index} must be >= 0 or None, got {self.numa_node}")
        if self.index in self.nvlink_peers:
            raise ValueError(f"GPUInfo.nvlink_peers of GPU {self.index} must not list the GPU itself")

    @property
    def flavour(self) -> str:
        """The quota/placement flavour: the MIG profile if any, else the product."""
        return self.mig_profile if self.mig_profile is not None else self.product


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint, as in ``node.spec.taints``."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    """One of NoSchedule, PreferNoSchedule, NoExecute."""

    def __post_init__(self) -> None:
        if self.effect not in _TAINT_EFFECTS:
            raise ValueError(f"Taint.effect must be one of {', '.join(_TAINT_EFFECTS)}, got {self.effect!r}")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A schedulable node as the placement core sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Node labels; fabric levels (leaf/spine/block) are read from them with ``TopologyLabels``."""
    gpus: tuple[GPUInfo, ...] = ()
    """Allocatable GPU devices."""
    nvlink_domain: str | None = None
    """NVLink domain from the agent (fabric clusterUuid + cliqueId); falls back to the label."""
    cpu_milli: int = 0
    """Allocatable CPU in millicores; 0 means unknown (CPU is then not checked)."""
    memory_mib: int = 0
    """Allocatable memory in MiB; 0 means unknown (memory is then not checked)."""
    max_pods: int = 0
    """Allocatable pod count; 0 means unknown (not checked)."""
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    """Cordoned: nothing new is placed here."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("NodeInfo.name must be a non-empty string")
        for name, value in (("cpu_milli", self.cpu_milli), ("memory_mib", self.memory_mib),
                            ("max_pods", self.max_pods)):
            if value < 0:
                raise ValueError(f"NodeInfo.{name} of node {self.name!r} must be >= 0, got {value}")
        seen: set[int] = set()
        for gpu in self.gpus:
            if gpu.index in seen:
                raise ValueError(f"node {self.name!r} lists GPU index {gpu.index} twice")
            seen.add(gpu.index)
