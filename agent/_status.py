"""Readings → GPUNode status and node labels: a pure function, the heart of the agent.

No I/O and no clock (``now`` is an argument), so every fixture can be checked against an exact
expected result and the publisher can decide "changed or not" by comparing fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kubegang.api import Condition
from kubegang.api.gpunode import (
    REASON_NVML_UNAVAILABLE,
    GpuHealth,
    GPUNodeStatus,
    GpuStatus,
    NvLinkPeer,
    nvml_unavailable,
)

from ._fabric import nvlink_domain
from ._snapshot import NVLINK_REMOTE_GPU, NVLINK_REMOTE_SWITCH, GpuReadings, NodeReadings
from ._xid import FATAL_XIDS, describe_xid

LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_PRESENT = "nvidia.com/gpu.present"
LABEL_DOMAIN = "kubegang.io/nvlink-domain"
NVIDIA_LABELS = (LABEL_CLIQUE, LABEL_PRODUCT, LABEL_COUNT, LABEL_PRESENT)
"""The reason of the Ready condition of a GPUNode whose agent could not use NVML."""

_MIB = 1 << 20
GPU_LOST = "GPU is lost (NVML_ERROR_GPU_IS_LOST): fallen off the bus or otherwise inaccessible; reset required"
"""The health reason of a GPU that NVML reports lost."""
_BUS = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def _bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """``00000000:18:00.0`` and ``0000:18:00.0`` name the same device; compare them as numbers."""
    if bus_id is None:
        return None
    match = _BUS.match(bus_id.strip().lower())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16), int(function, 16)


def _peers(gpus: Sequence[GpuReadings]) -> dict[int, list[NvLinkPeer]]:
    by_bus = {key: gpu.index for gpu in gpus if (key := _bus_key(gpu.pci_bus_id)) is not None}
    direct: dict[int, dict[int, int]] = {}
    switch_links: dict[int, int] = {}
    for gpu in gpus:
        counts: dict[int, int] = {}
        for link in gpu.links or ():
            if link.remote_type == NVLINK_REMOTE_SWITCH:
                switch_links[gpu.index] = switch_links.get(gpu.index, 0) + 1
                continue
            peer = by_bus.get(_bus_key(link.remote_bus_id) or (-1, -1, -1, -1))
            if peer is not None and peer != gpu.index and link.remote_type in (None, NVLINK_REMOTE_GPU):
                counts[peer] = counts.get(peer, 0) + 1
        direct[gpu.index] = counts
    peers: dict[int, list[NvLinkPeer]] = {}
    for gpu in gpus:
        row: list[NvLinkPeer] = []
        for other in gpus:
            if other.index == gpu.index:
                continue
            if n := direct[gpu.index].get(other.index):
                row.append(NvLinkPeer(index=other.index, links=n, via="direct"))
            elif switch_links.get(gpu.index) and switch_links.get(other.index):
                links = min(switch_links[gpu.index], switch_links[other.index])
                row.append(NvLinkPeer(index=other.index, links=links, via="nvswitch"))
        peers[gpu.index] = row
    return peers


def gpu_health(gpu: GpuReadings, fatal_xids: Mapping[int, str] = FATAL_XIDS) -> GpuHealth:
    """Healthy unless a reading proves otherwise; unknown readings do not make a GPU unhealthy
    (they are listed in ``status.unknown``), or a VM that hides counters would have no GPUs. The
    one refusal that does is GPU-is-lost: it is NVML's verdict on the GPU, not on the call."""
    reasons: list[str] = []
    if gpu.unreachable is not None:
        reasons.append(f"GPU unreachable: {gpu.unreachable}")
    if gpu.lost:
        reasons.append(GPU_LOST)
    if gpu.ecc.uncorrected_volatile:
        reasons.append(f"{gpu.ecc.uncorrected_volatile} uncorrected ECC errors since driver load")
    for xid, count in sorted((gpu.xid_counts or {}).items()):
        if xid in fatal_xids and count > 0:
            reasons.append(f"{describe_xid(xid, fatal_xids)} seen {count}x")
    if gpu.remapped_rows is not None:
        if gpu.remapped_rows.failure:
            reasons.append("row remapping failed")
        if gpu.remapped_rows.pending:
            reasons.append("row remapping pending; GPU reset required")
    if gpu.retired_pages_pending:
        reasons.append("page retirement pending; GPU reset required")
    return GpuHealth(healthy=not reasons, reasons=reasons)


def _gpu_status(gpu: GpuReadings, peers: list[NvLinkPeer], fatal_xids: Mapping[int, str]) -> GpuStatus:
    mig = None if gpu.mig_enabled is None else ("enabled" if gpu.mig_enabled else "disabled")
    return GpuStatus(
        index=gpu.index,
        uuid=gpu.uuid,
        product=gpu.product,
        memory_mib=None if gpu.memory_total_bytes is None else gpu.memory_total_bytes // _MIB,
        compute_capability=gpu.compute_capability,
        mig_mode=mig,
        mig_profiles=list(gpu.mig_profiles),
        pci_bus_id=gpu.pci_bus_id,
        numa_node=gpu.numa_node,
        cpu_affinity=gpu.cpu_affinity,
        nvlink_peers=peers,
        health=gpu_health(gpu, fatal_xids),
    )


def _conditions(
    readings: NodeReadings,
    gpus: Sequence[GpuStatus],
    previous: Sequence[Condition],
    now: datetime,
) -> list[Condition]:
    verdict = nvlink_domain(readings.gpus)
    unknown = len(readings.unknown)
    if readings.nvml_error is not None:
        ready = ("False", REASON_NVML_UNAVAILABLE, f"NVML could not be used: {readings.nvml_error}")
        healthy = ("Unknown", REASON_NVML_UNAVAILABLE, "no GPU readings")
    else:
        ready = ("True", "ReadingsPublished", f"{len(gpus)} GPUs read; {unknown} readings unknown")
        sick = [g for g in gpus if not g.health.healthy]
        if sick:
            detail = "; ".join(f"gpu {g.index}: {', '.join(g.health.reasons)}" for g in sick)
            healthy = ("False", "UnhealthyGPUs", f"{len(sick)} of {len(gpus)} GPUs unhealthy: {detail}")
        elif gpus:
            healthy = ("True", "AllGPUsHealthy", f"{len(gpus)} GPUs healthy")
        else:
            healthy = ("False", "NoGPUs", "NVML reports no GPUs")
    before = {c.type: c for c in previous}
    result: list[Condition] = []
    for type_, (status, reason, message) in (
        ("Ready", ready),
        ("GPUHealthy", healthy),
        ("NVLinkFabric", (verdict.status, verdict.reason, verdict.message)),
    ):
        since = _since(before.get(type_), status, now)
        result.append(Condition(type=type_, status=status, reason=reason, message=message, last_transition_time=since))
    return result


def _since(old: Condition | None, status: str, now: datetime) -> datetime:
    """A condition's lastTransitionTime: ``old``'s while the status is the same, else ``now``."""
    return old.last_transition_time if old is not None and old.status == status else now


def keep_transition_times(status: GPUNodeStatus, published: Sequence[Condition]) -> GPUNodeStatus:
    """``status`` with the transition time of each condition whose status is the same in
    ``published`` (what the GPUNode already shows) taken from there. A publisher that starts (an
    agent restart) remembers no earlier status, and without this every condition would look as if
    it had just changed."""
    before = {c.type: c for c in published}
    conditions = [
        c.model_copy(update={"last_transition_time": _since(before.get(c.type), c.status, c.last_transition_time)})
        for c in status.conditions
    ]
    return status.model_copy(update={"conditions": conditions})


def build_status(
    readings: NodeReadings,
    *,
    now: datetime,
    previous: GPUNodeStatus | None = None,
    fatal_xids: Mapping[int, str] = FATAL_XIDS,
) -> GPUNodeStatus:
    """The GPUNode status for these readings; condition transition times carry over from
    ``previous`` while a condition's status is unchanged."""
    peers = _peers(readings.gpus)
    gpus = [_gpu_status(gpu, peers[gpu.index], fatal_xids) for gpu in readings.gpus]
    return GPUNodeStatus(
        gpus=gpus,
        gpu_count=len(gpus),
        healthy_gpus=sum(g.health.healthy for g in gpus),
        nvlink_domain=nvlink_domain(readings.gpus).domain,
        hcas=list(readings.hcas),
        conditions=_conditions(readings, gpus, previous.conditions if previous else (), now),
        last_seen=now,
        unknown=list(readings.unknown),
    )


def label_value(text: str) -> str:
    """A Kubernetes label value for ``text``: spaces become ``-`` (as GPU feature discovery does
    for ``nvidia.com/gpu.product``), other disallowed characters ``_``, trimmed to 63 characters
    that start and end alphanumeric."""
    value = re.sub(r"[^A-Za-z0-9._-]", "_", text.strip().replace(" ", "-"))[:63]
    return value.strip("._-")


def node_labels(status: GPUNodeStatus, *, nvidia_labels: bool = True) -> dict[str, str | None]:
    """The node labels the agent owns; ``None`` means "remove this label".

    A node without an NVLink domain carries neither the clique nor the domain label: absence is
    what GPU feature discovery does too, and a placement engine reads it as "own domain".

    While NVML cannot be used (no driver yet) nothing is known about the node's GPUs, so no label
    is written at all (an absent key leaves the node's label as it is). Writing
    ``gpu.present=false`` then would take the node out of the agent DaemonSet's own node selector
    (``nvidia.com/gpu.present: "true"``): the agent would be deleted from the node before the
    driver loaded, and nothing would ever set the label back.
    """
    if nvml_unavailable(status):
        return {}
    domain = status.nvlink_domain
    labels: dict[str, str | None] = {LABEL_DOMAIN: domain.id if domain else None}
    if nvidia_labels:
        products = [g.product for g in status.gpus if g.product]
        labels.update(
            {
                LABEL_CLIQUE: domain.id if domain else None,
                LABEL_PRODUCT: label_value(products[0]) if products else None,
                LABEL_COUNT: str(len(status.gpus)),
                LABEL_PRESENT: "true" if status.gpus else "false",
            }
        )
    return dict(sorted(labels.items()))


def status_payload(status: GPUNodeStatus) -> dict[str, Any]:
    """The wire form for a JSON merge patch of the status subresource.

    Nulls are kept on purpose: in a merge patch an absent key leaves the old value in place, so a
    domain that went away must be sent as ``nvlinkDomain: null`` to be removed (the API server
    prunes nulls of non-nullable fields inside lists).
    """
    return status.model_dump(mode="json", by_alias=True)


def fingerprint(status: GPUNodeStatus) -> str:
    """A hash of what matters in ``status``: everything but the times, so that a poll that saw
    nothing new produces the same fingerprint and no API write."""
    data = status_payload(status)
    data.pop("lastSeen", None)
    for condition in data["conditions"]:
        condition.pop("lastTransitionTime", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def labels_fingerprint(labels: Mapping[str, str | None]) -> str:
    return hashlib.sha256(json.dumps(dict(labels), sort_keys=True).encode()).hexdigest()
