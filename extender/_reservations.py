"""The operator's questions on the ledger: Plan, Reserve, Release, WhatIf, Repair (``PlacementAuthority``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from kubegang.extender._authority import RepairOutcome, ReserveOutcome, WhatIfOutcome
from kubegang.extender._holds import Reservation
from kubegang.extender._ledger_state import LedgerState
from kubegang.levels import Level
from kubegang.placement import (
    MILLI,
    Allocation,
    AllocationError,
    GangRequest,
    Placement,
    PlanResult,
    PodAssignment,
    Snapshot,
    Unplaceable,
    plan,
)
from kubegang.preemption import Candidate, plan_preemption
from kubegang.topology import (
    FABRIC_LEVELS,
    level_span,
)

log = logging.getLogger(__name__)


def _what_if_candidates(job_uids: Sequence[str]) -> list[Candidate]:
    """WhatIf's candidates for the planner: the list position is the priority, so the planner's
    preference (lower priority first) is the caller's (earlier first); a job offered twice keeps
    its first place."""
    first: dict[str, int] = {}
    for uid in job_uids:
        first.setdefault(uid, len(first))
    return [Candidate(uid, priority=i, start_time=0.0) for uid, i in first.items()]


class PlacementVerbs(LedgerState):
    """Gang reservations: planned, held until the pods exist, repaired when intruders take them."""

    def plan(self, gang: GangRequest) -> PlanResult:
        """See :class:`PlacementAuthority`."""
        snap = self._current()
        with snap.what_if():
            self._release_reserved(snap, gang.id)
            return plan(gang, snap)

    def reserve(self, gang: GangRequest, placement: Placement | None, ttl_seconds: float) -> ReserveOutcome:
        """See :class:`PlacementAuthority`."""
        snap = self._current()
        now = self._clock()
        existing = self._reservations.get(gang.id)
        if existing is not None:
            if not existing.durable:
                existing.expires_at = now + ttl_seconds
            return ReserveOutcome(result=existing.placement, expires_at=now + ttl_seconds)
        claimed = sorted(i for (owner, i) in self._by_slot if owner == gang.id)
        if claimed:
            # The gang's pods exist: their annotations hold the GPUs, and the job's recorded placement
            # holds the slots of the others (``upsert_gpujob``). All of them: idempotent answer.
            if claimed == list(range(gang.pods)):
                return ReserveOutcome(result=self._held_placement(snap, gang), expires_at=now + ttl_seconds)
            return ReserveOutcome(result=Unplaceable(
                gang_id=gang.id, level=Level.CLUSTER,
                reason=f"job {gang.id} already has pods {claimed} of {gang.pods}; delete the whole gang "
                       "before reserving it again"))
        if placement is None:
            result = plan(gang, snap)
            if isinstance(result, Unplaceable):
                return ReserveOutcome(result=result)
            placement = result
        held = {a.pod for a in placement.assignments}
        try:
            snap.allocate_all(placement.allocations(gang))
        except AllocationError as exc:
            return ReserveOutcome(result=Unplaceable(
                gang_id=gang.id, reason=f"the planned placement is no longer free: {exc}; plan again",
                level=placement.level))
        self._reservations[gang.id] = Reservation(gang, placement, now + ttl_seconds, held)
        return ReserveOutcome(result=placement, expires_at=now + ttl_seconds)

    def _held_placement(self, snap: Snapshot, gang: GangRequest) -> Placement:
        """The placement the gang's existing pods hold."""
        return self._gang_placement(gang, {a.pod: a for a in snap.allocations_of(gang.id)})

    def repair(self, gang: GangRequest, ttl_seconds: float) -> RepairOutcome:
        """See :class:`PlacementAuthority`: re-place the gang's displaced slots near the rest of it.

        The slots' new places are searched in the domain that holds the gang's other pods, then in
        wider ones up to the gang's required level; they are held as a reservation, like Reserve.
        """
        snap = self._current()
        lost = self._displaced.get(gang.id, {})
        kept: dict[int, Allocation | PodAssignment] = {
            a.pod: a for a in snap.allocations_of(gang.id) if a.pod not in lost}
        reservation = self._reservations.get(gang.id)
        pending = set(reservation.pending) if reservation is not None else set()
        if reservation is not None:  # a slot whose node is away for now keeps its place in the answer
            kept.update({a.pod: a for a in reservation.placement.assignments if a.pod in pending})
        if not lost:
            return RepairOutcome(result=self._gang_placement(gang, kept))
        missing = sorted(lost)
        sub = dataclasses.replace(gang, pods=len(missing), required_level=None, preferred_level=None)
        found = self._plan_near(snap, sub, gang, kept)
        if isinstance(found, Unplaceable):
            return RepairOutcome(result=found, displaced=tuple(lost[i] for i in missing))
        moved = {index: dataclasses.replace(a, pod=index) for index, a in zip(missing, found.assignments, strict=True)}
        held = (reservation.held if reservation is not None else set()) | set(missing)
        placement = self._gang_placement(gang, {**kept, **moved})
        snap.allocate_all([a for a in placement.allocations(gang) if a.pod in moved])
        self._reservations[gang.id] = Reservation(gang, placement, self._clock() + ttl_seconds, held,
                                                  pending=pending)
        del self._displaced[gang.id]
        return RepairOutcome(result=placement, displaced=tuple(lost[i] for i in missing))

    def _plan_near(self, snap: Snapshot, sub: GangRequest, gang: GangRequest,
                   kept: Mapping[int, Allocation | PodAssignment]) -> PlanResult:
        """``sub`` placed in the narrowest domain around ``kept`` that takes it (within the gang's
        required level); the kept slots hold their GPUs meanwhile."""
        topo = self._topology
        numbers = sorted({topo.node_number[a.node] for a in kept.values() if a.node in topo.node_number})
        top = gang.required_level or Level.CLUSTER
        start = level_span(topo, numbers)[0] if numbers else top
        result: PlanResult = Unplaceable(gang.id, "no node is left for the displaced pods", top)
        for level in FABRIC_LEVELS:
            if level < start or level > top:
                continue
            domains = {topo.domain_of[level][n] for n in numbers}
            outside = frozenset(node.name for n, node in enumerate(topo.nodes)
                                if domains and topo.domain_of[level][n] not in domains)
            result = plan(dataclasses.replace(sub, excluded_nodes=sub.excluded_nodes | outside), snap)
            if isinstance(result, Placement):
                return result
        return result

    def _gang_placement(self, gang: GangRequest, slots: Mapping[int, Allocation | PodAssignment]) -> Placement:
        """The placement made of these slots (the narrowest domain that holds them all)."""
        numbers = sorted({self._topology.node_number[a.node] for a in slots.values()
                          if a.node in self._topology.node_number})
        level, domain = level_span(self._topology, numbers) if numbers else (Level.CLUSTER, 0)
        return Placement(
            gang_id=gang.id,
            assignments=tuple(PodAssignment(pod=i, node=a.node, gpus=a.gpus, gpu_milli=a.gpu_milli)
                              for i, a in sorted(slots.items())),
            level=level, domain=self._topology.domain_names[level][domain] if numbers else "",
            score=0.0, preferred_met=gang.preferred_level is None or level <= gang.preferred_level,
        )

    def release(self, job_uid: str) -> int:
        """See :class:`PlacementAuthority`."""
        self._displaced.pop(job_uid, None)
        reservation = self._reservations.get(job_uid)
        if reservation is None:
            return 0
        freed = sum(len(a.gpus) for a in reservation.placement.assignments
                    if a.pod in reservation.held and a.pod not in reservation.pending and a.gpu_milli == MILLI)
        self._drop_reservation(job_uid)
        return freed

    def what_if(self, gang: GangRequest, candidates: Sequence[str], gone: Sequence[str] = ()) -> WhatIfOutcome:
        """See :class:`PlacementAuthority`: the core's victim chooser, ``plan_preemption``.

        Whole gangs only: evicting a candidate frees everything it holds in the ledger (its pods and
        any slots still reserved for it); the gang's own reservation does not count against it. The
        caller's order is the preference (earlier = preferred victim), given to the planner as the
        candidates' priorities, so the set chosen is the planner's cheapest (fewest GPUs evicted),
        then the one reaching least far down the list. The ``gone`` gangs (evicted in any case) are
        released first, the same way (``plan_preemption``'s ``gone``): the victims are what must go on
        top of them. Changes nothing.
        """
        snap = self._current()
        offered = _what_if_candidates(candidates)
        with snap.what_if():
            self._release_reserved(snap, gang.id)
            found = plan_preemption(gang, snap, offered, gone=gone)
            if found is not None:
                position = {c.gang_id: c.priority for c in offered}
                victims = tuple(sorted(found.victims, key=position.__getitem__))
                return WhatIfOutcome(victims=victims, result=found.placement)
            # Why not even every candidate suffices: the gang planned with all of them (and ``gone``) gone.
            for uid in (*gone, *(c.gang_id for c in offered)):
                if uid != gang.id:
                    snap.release(uid)
            result = plan(gang, snap)
        if isinstance(result, Placement):  # only when the planner's search budget ran out
            log.warning("WhatIf for job %s: no victim set found within the search budget among %d candidates",
                        gang.id, len(offered))
            result = Unplaceable(gang_id=gang.id, level=gang.required_level or Level.CLUSTER,
                                 reason=f"no victim set found within the search budget among {len(offered)} "
                                        "candidates")
        return WhatIfOutcome(victims=(), result=result)
