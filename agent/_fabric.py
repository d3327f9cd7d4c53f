"""The NVLink domain rule: when may a node claim a multi-node NVLink domain?

On NVSwitch fabrics that span nodes (GB200 NVL72), the fabric manager registers every GPU and
hands it a cluster UUID and a clique id; GPUs that share both can talk over NVLink across nodes.
The clique id alone is not unique (every unregistered GPU reports clique 0), and a registration
that failed (status "Insufficient Resources") or has not finished still reports numbers. So a
node claims the domain ``<clusterUuid>.<cliqueId>`` only when every one of its GPUs reports
registration *completed* with status *success* and the same non-zero cluster UUID and clique;
otherwise the node is its own NVLink domain (``nvlinkDomain: null``), which is always safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegang.api.gpunode import NvLinkDomain

from ._snapshot import FabricReading, GpuReadings

ZERO_UUID = "00000000-0000-0000-0000-000000000000"

FABRIC_STATES = {0: "NotSupported", 1: "NotStarted", 2: "InProgress", 3: "Completed"}
STATE_COMPLETED = 3
FABRIC_HEALTH = {0: None, 1: "Healthy", 2: "Unhealthy", 3: "LimitedCapacity"}

# nvmlReturn_t values a fabric status may carry, spelled as nvidia-smi prints them.
NVML_RETURN_TEXT = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    9: "Driver Not Loaded",
    10: "Timeout",
    15: "GPU is lost",
    23: "Insufficient Resources",
    999: "Unknown Error",
}


def state_text(state: int) -> str:
    return FABRIC_STATES.get(state, f"State{state}")


def status_text(status: int) -> str:
    return NVML_RETURN_TEXT.get(status, f"NVML error {status}")


@dataclass(frozen=True)
class DomainVerdict:
    """The domain (or None) and the NVLinkFabric condition that explains it."""

    domain: NvLinkDomain | None
    status: str
    reason: str
    message: str


def domain_id(cluster_uuid: str, clique_id: int) -> str:
    """``<clusterUuid>.<cliqueId>``: GPU feature discovery's ``nvidia.com/gpu.clique`` value.

    It is also a valid label value (at most 36 + 1 + 10 characters of ``[0-9a-f-.]``), so the same
    string serves as ``kubegang.io/nvlink-domain``.
    """
    return f"{cluster_uuid}.{clique_id}"


def nvlink_domain(gpus: Sequence[GpuReadings]) -> DomainVerdict:
    """Apply the domain rule to a node's GPUs."""
    if not gpus:
        return DomainVerdict(None, "False", "NoGPUs", "no GPUs, so no NVLink domain")
    fabrics: list[FabricReading] = []
    for gpu in gpus:
        if gpu.fabric is None:
            return DomainVerdict(None, "Unknown", "FabricUnknown", f"gpu {gpu.index}: fabric info could not be read")
        fabrics.append(gpu.fabric)
    first = fabrics[0]
    if all(f.state == 0 for f in fabrics):
        return DomainVerdict(None, "False", "FabricNotSupported", "GPUs are not on a multi-node NVLink fabric")
    if len({(f.cluster_uuid, f.clique_id) for f in fabrics}) > 1:
        seen = sorted({domain_id(f.cluster_uuid, f.clique_id) for f in fabrics})
        return DomainVerdict(None, "False", "FabricInconsistent", f"GPUs disagree on their clique: {seen}")
    for gpu, fabric in zip(gpus, fabrics, strict=True):
        if fabric.state != STATE_COMPLETED:
            return DomainVerdict(
                None,
                "False",
                "FabricRegistrationIncomplete",
                f"gpu {gpu.index}: fabric registration state {state_text(fabric.state)}",
            )
        if fabric.status != 0:
            return DomainVerdict(
                None,
                "False",
                "FabricRegistrationFailed",
                f"gpu {gpu.index}: fabric registration status {status_text(fabric.status)}",
            )
    if first.cluster_uuid == ZERO_UUID:
        return DomainVerdict(None, "False", "FabricZeroClusterUuid", "fabric registered with a zero cluster UUID")
    health = {FABRIC_HEALTH.get(f.health_summary or 0) for f in fabrics}
    worst = next((h for h in ("Unhealthy", "LimitedCapacity", "Healthy") if h in health), None)
    domain = NvLinkDomain(
        id=domain_id(first.cluster_uuid, first.clique_id),
        cluster_uuid=first.cluster_uuid,
        clique_id=first.clique_id,
        state=state_text(first.state),
        status=status_text(first.status),
        health=worst,
    )
    message = f"member of NVLink domain {domain.id}"
    if worst not in (None, "Healthy"):
        message += f"; fabric health {worst}"
    return DomainVerdict(domain, "True", "FabricRegistered", message)
