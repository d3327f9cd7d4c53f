"""Conversions between the Placement protobuf messages and the core / authority types.

Used by both ends of the gRPC service (server adapter and :class:`PlacementClient`), so a gang
survives the round trip unchanged and an invalid one is refused with the same message on both
sides. Every error raised here is an :class:`InvalidMessage` whose text names the field.
"""

from __future__ import annotations

from types import MappingProxyType

from kubegang._generated.placement.v1 import placement_pb2 as pb
from kubegang.extender._authority import Displacement, RepairOutcome, ReserveOutcome, WhatIfOutcome
from kubegang.levels import Level
from kubegang.placement import (
    MILLI,
    GangRequest,
    Placement,
    PlanResult,
    PodAssignment,
    Toleration,
    Unplaceable,
)


class InvalidMessage(ValueError):
    """A message that decodes but does not make sense; the text names the field."""


def _level(text: str, field: str) -> Level | None:
    if not text:
        return None
    try:
        return Level.parse(text)
    except ValueError as exc:
        raise InvalidMessage(f"gang.{field}: {exc}") from None


def gang_from_proto(msg: pb.Gang) -> GangRequest:
    """The core request for a ``Gang`` message."""
    if not msg.job_uid:
        raise InvalidMessage("gang.job_uid: required (reservations are keyed by the GPUJob UID)")
    try:
        tolerations = tuple(
            Toleration(key=t.key, operator=t.operator or "Equal", value=t.value, effect=t.effect)
            for t in msg.tolerations
        )
        return GangRequest(
            id=msg.job_uid,
            pods=msg.pods,
            gpus_per_pod=msg.gpus_per_pod,
            gpu_fraction_milli=msg.gpu_fraction_milli,
            cpu_milli=msg.cpu_milli_per_pod,
            memory_mib=msg.memory_mib_per_pod,
            gpu_product=msg.gpu_product or None,
            mig_profile=msg.mig_profile or None,
            node_selector=MappingProxyType(dict(msg.node_selector)),
            tolerations=tolerations,
            excluded_nodes=frozenset(msg.excluded_nodes),
            required_level=_level(msg.required_level, "required_level"),
            preferred_level=_level(msg.preferred_level, "preferred_level"),
            preferred_domain=msg.preferred_domain or None,
        )
    except InvalidMessage:
        raise
    except ValueError as exc:
        raise InvalidMessage(f"gang ({msg.namespace}/{msg.name}): {exc}") from None


def gang_to_proto(gang: GangRequest, *, namespace: str = "", name: str = "", priority: int = 0) -> pb.Gang:
    """The ``Gang`` message for a core request."""
    return pb.Gang(
        job_uid=gang.id,
        namespace=namespace,
        name=name,
        pods=gang.pods,
        gpus_per_pod=gang.gpus_per_pod,
        gpu_fraction_milli=gang.gpu_fraction_milli,
        cpu_milli_per_pod=gang.cpu_milli,
        memory_mib_per_pod=gang.memory_mib,
        gpu_product=gang.gpu_product or "",
        mig_profile=gang.mig_profile or "",
        node_selector=dict(gang.node_selector),
        tolerations=[pb.Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
                     for t in gang.tolerations],
        required_level=gang.required_level.label if gang.required_level is not None else "",
        preferred_level=gang.preferred_level.label if gang.preferred_level is not None else "",
        excluded_nodes=sorted(gang.excluded_nodes),
        priority=priority,
        preferred_domain=gang.preferred_domain or "",
    )


def _level_from_label(text: str, field: str) -> Level:
    try:
        return Level.parse(text)
    except ValueError as exc:
        raise InvalidMessage(f"{field}: {exc}") from None


def placement_to_proto(placement: Placement) -> pb.GangPlacement:
    """The ``GangPlacement`` message for a core placement."""
    return pb.GangPlacement(
        pods=[pb.PodPlacement(pod_index=a.pod, node=a.node, gpu_indices=list(a.gpus), gpu_milli=a.gpu_milli)
              for a in placement.assignments],
        domain=pb.Domain(level=placement.level.label, id=placement.domain),
        preferred_met=placement.preferred_met,
        score=placement.score,
    )


def placement_from_proto(msg: pb.GangPlacement, gang_id: str, pods: int | None = None) -> Placement:
    """The core placement in a ``GangPlacement``; with ``pods``, one entry per pod index is required."""
    assignments = tuple(
        PodAssignment(pod=p.pod_index, node=p.node, gpus=tuple(p.gpu_indices), gpu_milli=p.gpu_milli or MILLI)
        for p in sorted(msg.pods, key=lambda p: p.pod_index)
    )
    for a in assignments:
        if not a.node:
            raise InvalidMessage(f"placement.pods[{a.pod}].node: required")
        if not 0 < a.gpu_milli <= MILLI:
            raise InvalidMessage(f"placement.pods[{a.pod}].gpu_milli: must be 1..1000, got {a.gpu_milli}")
    # Length first: ``pods`` comes off the wire (up to 2**32-1), and a list of that many indices is
    # a MemoryError, not a refusal (found by tests/unit/extender/test_fuzz_ledger.py).
    if pods is not None and (len(assignments) != pods or any(a.pod != i for i, a in enumerate(assignments))):
        shown = [a.pod for a in assignments[:10]]
        raise InvalidMessage(
            f"placement.pods: expected one entry for each pod index 0..{pods - 1}, "
            f"got {len(assignments)} with indices {shown}{' ...' if len(assignments) > 10 else ''}"
        )
    return Placement(
        gang_id=gang_id, assignments=assignments,
        level=_level_from_label(msg.domain.level, "placement.domain.level"), domain=msg.domain.id,
        score=msg.score, preferred_met=msg.preferred_met,
    )


def _fill(result: PlanResult, placement: pb.GangPlacement, shortfall: pb.Shortfall) -> list[str]:
    """Write ``result`` into a response's placement or shortfall; returns its reasons."""
    if isinstance(result, Placement):
        placement.CopyFrom(placement_to_proto(result))
        return []
    shortfall.CopyFrom(pb.Shortfall(level=result.level.label, best_domain=result.best_domain or "",
                                    best_pods=result.best_pods, never=result.never))
    return [result.reason]


def _result(feasible: bool, gang_id: str, placement: pb.GangPlacement, shortfall: pb.Shortfall,
            reasons: list[str]) -> PlanResult:
    if feasible:
        return placement_from_proto(placement, gang_id)
    return Unplaceable(
        gang_id=gang_id, reason="; ".join(reasons) or "not placeable",
        level=_level_from_label(shortfall.level or Level.CLUSTER.label, "shortfall.level"),
        best_domain=shortfall.best_domain or None, best_pods=shortfall.best_pods, never=shortfall.never,
    )


def plan_response(result: PlanResult) -> pb.PlanResponse:
    """Core result -> ``PlanResponse``."""
    resp = pb.PlanResponse(feasible=isinstance(result, Placement))
    resp.reasons.extend(_fill(result, resp.placement, resp.shortfall))
    return resp


def plan_result(resp: pb.PlanResponse, gang_id: str) -> PlanResult:
    """``PlanResponse`` -> core result (client side)."""
    return _result(resp.feasible, gang_id, resp.placement, resp.shortfall, list(resp.reasons))


def reserve_response(outcome: ReserveOutcome) -> pb.ReserveResponse:
    """Authority outcome -> ``ReserveResponse``."""
    resp = pb.ReserveResponse(reserved=isinstance(outcome.result, Placement),
                              expires_at_unix_ms=int(outcome.expires_at * 1000))
    resp.reasons.extend(_fill(outcome.result, resp.placement, resp.shortfall))
    return resp


def reserve_outcome(resp: pb.ReserveResponse, gang_id: str) -> ReserveOutcome:
    """``ReserveResponse`` -> outcome (client side)."""
    return ReserveOutcome(
        result=_result(resp.reserved, gang_id, resp.placement, resp.shortfall, list(resp.reasons)),
        expires_at=resp.expires_at_unix_ms / 1000,
    )


def what_if_response(outcome: WhatIfOutcome) -> pb.WhatIfResponse:
    """Authority outcome -> ``WhatIfResponse``."""
    resp = pb.WhatIfResponse(feasible=isinstance(outcome.result, Placement),
                             victim_job_uids=list(outcome.victims))
    resp.reasons.extend(_fill(outcome.result, resp.placement, resp.shortfall))
    return resp


def what_if_outcome(resp: pb.WhatIfResponse, gang_id: str) -> WhatIfOutcome:
    """``WhatIfResponse`` -> outcome (client side)."""
    return WhatIfOutcome(
        victims=tuple(resp.victim_job_uids),
        result=_result(resp.feasible, gang_id, resp.placement, resp.shortfall, list(resp.reasons)),
    )


def repair_response(outcome: RepairOutcome) -> pb.RepairResponse:
    """Authority outcome -> ``RepairResponse``."""
    resp = pb.RepairResponse(feasible=isinstance(outcome.result, Placement))
    resp.displaced.extend(pb.Displacement(pod_index=d.index, node=d.node, intruder=d.intruder)
                          for d in outcome.displaced)
    resp.reasons.extend(_fill(outcome.result, resp.placement, resp.shortfall))
    return resp


def repair_outcome(resp: pb.RepairResponse, gang_id: str) -> RepairOutcome:
    """``RepairResponse`` -> outcome (client side)."""
    return RepairOutcome(
        result=_result(resp.feasible, gang_id, resp.placement, resp.shortfall, list(resp.reasons)),
        displaced=tuple(Displacement(d.pod_index, d.node, d.intruder) for d in resp.displaced),
    )
