"""A GPUJob's ``status.placement`` as the ledger holds it: the durable form of a gang reservation.

The operator records where an admitted gang goes in the job's status *before* it creates the pods.
That record outlives every process, so the ledger holds it until the pods exist: after an extender
restart, a relist or a leader change, the GPUs of pods not yet created are still spoken for, with no
startup grace and no second Reserve. Both directions of the one conversion between the API's
``Placement`` (what status records) and the core's (what the ledger plans) live here, at the edge the
two processes share.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from kubegang.api import GPUJobSpec, Placement, ReplicaPlacement, RequestError, pod_spec_requests
from kubegang.levels import Level
from kubegang.placement import MILLI, GangRequest, PodAssignment
from kubegang.placement import Placement as CorePlacement

log = logging.getLogger(__name__)

_FINISHED_PHASES = ("Succeeded", "Failed")


def api_placement(placement: CorePlacement) -> Placement:
    """The API form (``status.placement``) of a placement the extender returned."""
    return Placement(
        level=placement.level.label,
        domain=placement.domain,
        pods=[
            ReplicaPlacement(
                index=a.pod, node=a.node, gpus=list(a.gpus), gpu_milli=a.gpu_milli if a.gpu_milli < MILLI else None
            )
            for a in sorted(placement.assignments, key=lambda a: a.pod)
        ],
    )


def core_placement(gang: GangRequest, placement: Placement) -> CorePlacement:
    """The core form of a recorded placement (its score is not recorded: 0)."""
    level = Level.parse(placement.level) if placement.level else Level.CLUSTER
    return CorePlacement(
        gang_id=gang.id,
        assignments=tuple(
            PodAssignment(pod=p.index, node=p.node, gpus=tuple(p.gpus), gpu_milli=p.gpu_milli or MILLI)
            for p in sorted(placement.pods, key=lambda p: p.index)
        ),
        level=level,
        domain=placement.domain or "",
        score=0.0,
        preferred_met=gang.preferred_level is None or level <= gang.preferred_level,
    )


@dataclass(frozen=True)
class AdmittedGang:
    """An admitted GPUJob's recorded placement, ready to be held."""

    attempt: str
    """``status.admittedAt``: one admission; a new value is a new attempt (a restart, a requeue)."""
    gang: GangRequest
    """What each pod asks for (CPU and memory count on the node, as in the operator's request)."""
    placement: CorePlacement
    """``status.placement`` in the core's form."""


def admitted_gang(obj: Mapping[str, Any]) -> AdmittedGang | None:
    """The recorded placement of a GPUJob object that holds an admission; None when it holds none.

    Admitted means ``status.admittedAt`` is set and the job has not finished; the operator clears
    ``admittedAt`` whenever it gives an admission back (requeue, preemption, suspend). A status or
    spec the ledger cannot read is logged and treated as holding nothing: the job's pods, once they
    exist, still hold their GPUs through their own annotations.
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    uid = str(meta.get("uid") or "")
    if not uid or not isinstance(status, Mapping) or not status.get("admittedAt"):
        return None
    if status.get("phase") in _FINISHED_PHASES or not isinstance(status.get("placement"), Mapping):
        return None
    where = f"GPUJob {meta.get('namespace')}/{meta.get('name')}"
    try:
        placement = Placement.model_validate(status["placement"])
        spec = GPUJobSpec.model_validate(obj.get("spec") or {})
        requests = pod_spec_requests(spec.template.as_dict().get("spec") or {}, where="spec.template.spec")
        if not placement.pods:
            return None
        first = placement.pods[0]
        # Built in here too: a record another client wrote (pods without `gpus`, say) is one job's
        # problem, never an exception that stops the feed reading every other object.
        gang = GangRequest(
            id=uid,
            pods=spec.replicas,
            gpus_per_pod=0 if first.gpu_milli else len(first.gpus),
            gpu_fraction_milli=first.gpu_milli or 0,
            cpu_milli=requests.cpu_milli,
            memory_mib=requests.memory_mib,
        )
        held = core_placement(gang, placement)  # an unknown level is refused here
    except (pydantic.ValidationError, RequestError, ValueError, ArithmeticError) as exc:
        log.warning("%s: recorded placement not held, cannot read it: %s", where, exc)
        return None
    return AdmittedGang(attempt=str(status["admittedAt"]), gang=gang, placement=held)
