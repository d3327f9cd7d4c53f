"""What a pod holds, as the ledger records it: one pod's hold and one gang's reservation.

The conversion from a pod (API JSON, as the watch or kube-scheduler delivers it) to the GPUs it holds
lives here, apart from the ledger, so the contract test and the ledger read pods the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kubegang.extender._pods import PodDemand, pod_demand
from kubegang.extender._wire import Pod
from kubegang.placement import (
    MILLI,
    GangRequest,
    Placement,
)
from kubegang.podcontract import GPU_MILLI_ANNOTATION, GPUS_ANNOTATION

log = logging.getLogger(__name__)

_TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class HeldPod:
    """A pod that holds GPUs on a node, as the ledger records it."""

    uid: str
    """Pod UID."""
    key: str
    """``namespace/name``."""
    owner: str
    """Allocation owner: the GPUJob UID, or ``pod/<uid>`` outside gangs."""
    index: int
    """Pod index within the owner (0 outside gangs)."""
    node: str
    """Node it is bound or planned to."""
    gpus: int
    """Whole GPUs it holds (0 for a share of one GPU, see ``gpu_milli``)."""
    gpu_indices: tuple[int, ...]
    """GPU indices from ``kubegang.io/gpus``; empty when unknown (then first free ones are used)."""
    bound: bool
    """True once ``spec.nodeName`` is set."""
    cpu_milli: int = 0
    """CPU it requests (millicores), counted on its node."""
    memory_mib: int = 0
    """Memory it requests (MiB), counted on its node."""
    gpu_milli: int = MILLI
    """Thousandths of each GPU in ``gpu_indices`` it holds (below 1000 for a shared-GPU pod)."""


@dataclass
class Reservation:
    """GPUs held for a gang whose pods do not all exist yet."""

    gang: GangRequest
    """What was asked."""
    placement: Placement
    """Where it goes."""
    expires_at: float
    """Unix time after which the indices still held by the reservation are released."""
    held: set[int] = field(default_factory=set)
    """Pod indices still held by the reservation (not yet by a pod)."""
    durable: bool = False
    """Backed by the GPUJob's ``status.placement`` (:mod:`._admitted`): held, with no TTL, until the
    pods exist or the job gives its admission back. False between Reserve and the status write."""
    pending: set[int] = field(default_factory=set)
    """Pod indices of ``held`` whose slot is not in the snapshot now: its node or GPUs are gone (a Node
    deleted and created again, a device plugin restarting, GPUs unhealthy) and no bound pod took them.
    Such a slot is still the gang's: it is placed again at each rebuild (a node change is one), and
    only the job giving its admission back (or the TTL of a reservation not recorded yet) ends it."""


_OURS = frozenset({GPUS_ANNOTATION, GPU_MILLI_ANNOTATION})
"""The annotations kubegang writes that say which GPUs (and how much of one) a pod holds."""


def _owner_and_index(demand: PodDemand) -> tuple[str, int]:
    if demand.job_uid is not None and demand.pod_index is not None:
        return demand.job_uid, demand.pod_index
    return f"pod/{demand.uid or demand.key}", 0


def _pod_name(meta: Any) -> str:
    """``namespace/name`` of a pod's metadata (API JSON), for logs; whatever it holds."""
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _read_pod(obj: Mapping[str, Any]) -> PodDemand | None:
    """The demand of a live pod (API JSON); None when finished or unreadable (logged).

    Never raises on the pod's content: one pod's bad annotation must not stop the ledger reading the
    others (an exception here would stop the initial sync, and the extender with it). ValueError covers
    DemandError, pydantic's ValidationError and any number a check let through that ``int()`` refuses.
    """
    status = obj.get("status") or {}
    if isinstance(status, Mapping) and status.get("phase") in _TERMINAL_PHASES:
        return None
    meta = obj.get("metadata") or {}
    try:
        return pod_demand(Pod.model_validate(obj))
    except (ValidationError, ValueError) as exc:
        error = exc
    # An unreadable annotation of ours (``"0-7"`` for indices) must not make a bound pod's GPUs look
    # free: its resource request is still counted, without the indices or share the annotation gave.
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(notes, Mapping) and _OURS & set(notes):
        plain = {**obj, "metadata": {**meta, "annotations": {k: v for k, v in notes.items() if k not in _OURS}}}
        try:
            demand = pod_demand(Pod.model_validate(plain))
        except (ValidationError, ValueError):
            pass
        else:
            log.warning("pod %s: %s; its GPU request is counted without that annotation", _pod_name(meta), error)
            return demand
    log.warning("ignoring pod %s: %s", _pod_name(meta), error)
    return None


def _hold(demand: PodDemand) -> HeldPod | None:
    if not demand.holds_gpus:
        return None
    node = demand.node_name or demand.pinned_node
    if not node:
        return None
    owner, index = _owner_and_index(demand)
    known = demand.pinned_gpus if demand.pinned_node in (None, node) else ()
    if demand.gpu_milli:
        if not known:  # bound elsewhere than planned: the share's GPU is unknown, so it holds nothing
            log.warning("pod %s: GPU share planned on %s but bound to %s; not counted", demand.key,
                        demand.pinned_node, node)
            return None
        return HeldPod(uid=demand.uid, key=demand.key, owner=owner, index=index, node=node, gpus=0,
                       gpu_indices=known, bound=bool(demand.node_name), cpu_milli=demand.cpu_milli,
                       memory_mib=demand.memory_mib, gpu_milli=demand.gpu_milli)
    if known and len(known) != demand.gpus:
        log.warning("pod %s: %d GPU indices annotated for %d GPUs; indices ignored",
                    demand.key, len(known), demand.gpus)
        known = ()
    return HeldPod(uid=demand.uid, key=demand.key, owner=owner, index=index, node=node, gpus=demand.gpus,
                   gpu_indices=known, bound=bool(demand.node_name), cpu_milli=demand.cpu_milli,
                   memory_mib=demand.memory_mib)


def held_pod(obj: Mapping[str, Any]) -> HeldPod | None:
    """The GPU hold of a pod (API JSON), or None when it holds none (no GPUs, pending, finished)."""
    demand = _read_pod(obj)
    return _hold(demand) if demand is not None else None


def _waits_for_a_node(demand: PodDemand | None, obj: Mapping[str, Any]) -> bool:
    """A GPU pod kubegang did not plan, not bound yet and not being deleted."""
    return (demand is not None and demand.gpus > 0 and not demand.node_name and demand.pinned_node is None
            and not (obj.get("metadata") or {}).get("deletionTimestamp"))


