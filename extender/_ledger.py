"""The cluster GPU ledger: who holds which GPU, bound or reserved, and the decisions made on it.

Pure and single-threaded (the event loop is the only writer), so "filter, then reserve" needs no
locks. Kubernetes I/O lives in :mod:`._watch`, which feeds this object with plain API JSON.

Sources of truth, and what is derived:

- *Nodes* (API JSON) and *GPUNode* statuses -> :class:`NodeInfo` -> the compiled topology.
- *Pods* holding GPUs: bound (``spec.nodeName``) or planned by the operator (annotation
  ``kubegang.io/node`` + ``kubegang.io/gpus``). Planned pods are how reservations survive a
  restart: a new extender lists pods and holds the same GPUs again.
- *Reservations* made over gRPC before the pods exist, in memory, with a TTL; each pod index is
  held by the reservation until the gang's pod with that index appears, then by the pod.

The core :class:`Snapshot` is derived from those three: allocations are keyed ``(owner, index)``
where the owner is the GPUJob UID for gang pods and reservations, or ``pod/<uid>`` for other pods.
Updates are applied incrementally; a conflict (for example a plain pod whose GPU indices we had to
guess) or a topology change rebuilds the snapshot from the sources, placing pods with known GPU
indices first. Rebuilding from the same sources always yields the same ledger.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._authority import Displacement, FilterVerdict, RepairOutcome, ReserveOutcome, WhatIfOutcome
from kubegang.extender._nodes import node_info
from kubegang.extender._pods import NODE_ANNOTATION, DemandError, PodDemand, pod_demand
from kubegang.extender._quarantine import consistent_nodes
from kubegang.extender._wire import MAX_EXTENDER_PRIORITY, Pod
from kubegang.levels import Level
from kubegang.placement import (
    MILLI,
    UNKNOWN_NODE,
    Allocation,
    AllocationError,
    GangRequest,
    Placement,
    PlanResult,
    PodAssignment,
    Snapshot,
    TaskShape,
    Unplaceable,
    WorkloadMix,
    feasible_nodes,
    node_reason,
    node_scores,
    plan,
)
from kubegang.preemption import Candidate, plan_preemption
from kubegang.topology import (
    FABRIC_LEVELS,
    NodeInfo,
    Taint,
    TopologyError,
    TopologyIndex,
    TopologyLabels,
    compile_index,
    level_span,
)

log = logging.getLogger(__name__)

_TERMINAL_PHASES = ("Succeeded", "Failed")
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


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


def _owner_and_index(demand: PodDemand) -> tuple[str, int]:
    if demand.job_uid is not None and demand.pod_index is not None:
        return demand.job_uid, demand.pod_index
    return f"pod/{demand.uid or demand.key}", 0


def _read_pod(obj: Mapping[str, Any]) -> PodDemand | None:
    """The demand of a live pod (API JSON); None when finished or unreadable (logged)."""
    status = obj.get("status") or {}
    if isinstance(status, Mapping) and status.get("phase") in _TERMINAL_PHASES:
        return None
    try:
        return pod_demand(Pod.model_validate(obj))
    except (ValidationError, DemandError) as exc:
        log.warning("ignoring pod %s: %s", (obj.get("metadata") or {}).get("name"), exc)
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


def _what_if_candidates(job_uids: Sequence[str]) -> list[Candidate]:
    """WhatIf's candidates for the planner: the list position is the priority, so the planner's
    preference (lower priority first) is the caller's (earlier first); a job offered twice keeps
    its first place."""
    first: dict[str, int] = {}
    for uid in job_uids:
        first.setdefault(uid, len(first))
    return [Candidate(uid, priority=i, start_time=0.0) for uid, i in first.items()]


class Ledger:
    """Implements both :class:`SchedulerAuthority` and :class:`PlacementAuthority`."""

    def __init__(self, labels: TopologyLabels | None = None, clock: Callable[[], float] = time.time,
                 startup_grace_seconds: float = 0.0) -> None:
        self._labels = labels or TopologyLabels()
        self._clock = clock
        self._startup_grace = startup_grace_seconds
        self._grace_until: float | None = None
        """Until then, GPU pods outside gangs are held back (see :meth:`_held_back`)."""
        self._nodes: dict[str, Mapping[str, Any]] = {}
        self._gpunodes: dict[str, GPUNodeStatus] = {}
        self._infos: dict[str, NodeInfo] = {}
        self._pods: dict[str, HeldPod] = {}
        self._reservations: dict[str, Reservation] = {}
        self._by_slot: dict[tuple[str, int], str] = {}
        """(owner, index) -> pod uid holding that slot."""
        self._unplaced: dict[str, str] = {}
        """Pod uid -> why its GPUs could not be recorded (overcommitted node, unknown node)."""
        self._displaced: dict[str, dict[int, Displacement]] = {}
        """Gang (job UID) -> pod index -> the slot's plan that a pod kubegang did not place took (an
        intruder: another scheduler, a manual nodeName, an opted-out namespace). Kept until ``repair``."""
        self._displaced_pods: set[str] = set()
        """UIDs of unbound gang pods whose planned GPUs an intruder holds: they hold nothing now."""
        self._new_intrusions = 0
        """Displacements found since ``take_intrusions`` last counted them (the intrusion metric)."""
        self._quarantined: dict[str, str] = {}
        """Node -> what was ignored and why, when its facts made the topology inconsistent."""
        self._topology: TopologyIndex = compile_index([], self._labels)
        self._mix = WorkloadMix()
        """The pod shapes this cluster runs (decayed), which single-pod scoring measures fragmentation
        against (FGD); it outlives every snapshot rebuild, so its memoised values do too."""
        self._snapshot = Snapshot(self._topology, workload=self._mix)
        self._taint_class: list[int] = []
        """Per node number: index into ``_taint_classes``."""
        self._taint_classes: list[tuple[Taint, ...] | None] = []
        """Distinct hard-taint sets of the nodes; None for cordoned nodes."""
        self._pod_room: list[int] = []
        """Per node number: pod limit, or ``sys.maxsize`` when unknown."""
        self._waiting: dict[str, tuple[str, str]] = {}
        """Pod uid -> (namespace, name) of GPU pods outside gangs that wait for a node, oldest first."""
        self._freed_quietly = False
        """Reserved GPUs were freed with no API event (Release, expiry): see :meth:`take_requeue`."""
        self._dirty = False
        self.synced = False
        """True once the watches listed everything (readiness)."""

    # ---- feeding (from watches) -----------------------------------------------------------

    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        """A Node was added or changed."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        if name:
            self._nodes[name] = obj
            self._refresh_node(name)

    def delete_node(self, name: str) -> None:
        """A Node was deleted."""
        self._nodes.pop(name, None)
        self._refresh_node(name)

    def upsert_gpunode(self, name: str, status: GPUNodeStatus | None) -> None:
        """A GPUNode was added or changed (None status: agent has not reported yet)."""
        if status is None:
            self._gpunodes.pop(name, None)
        else:
            self._gpunodes[name] = status
        self._refresh_node(name)

    def delete_gpunode(self, name: str) -> None:
        """A GPUNode was deleted."""
        self.upsert_gpunode(name, None)

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        """A GPU pod was added or changed."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if not uid:
            return
        demand = _read_pod(obj)
        self._note_waiting(uid, demand, obj)
        held = _hold(demand) if demand is not None else None
        old = self._pods.get(uid)
        if held == old:
            return
        if old is not None:
            self._forget_pod(old)
        if held is not None:
            if old is None:  # each pod counts once in the workload mix, when it first holds GPUs
                self._mix.observe(TaskShape(max(held.gpus, 1), held.gpu_milli, held.cpu_milli, held.memory_mib))
            self._pods[uid] = held
            self._by_slot[(held.owner, held.index)] = uid
            if not self._dirty:
                self._place_pod(held)

    def _note_waiting(self, uid: str, demand: PodDemand | None, obj: Mapping[str, Any]) -> None:
        """Track ``uid`` in ``_waiting`` while it waits for a node (first sighting keeps its place)."""
        if _waits_for_a_node(demand, obj):
            if uid not in self._waiting:
                meta = obj["metadata"]
                self._waiting[uid] = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        else:
            self._waiting.pop(uid, None)

    def delete_pod(self, uid: str) -> None:
        """A pod was deleted (its GPUs are free again)."""
        self._waiting.pop(uid, None)
        old = self._pods.get(uid)
        if old is not None:
            self._forget_pod(old)

    def replace_all(self, nodes: Sequence[Mapping[str, Any]], gpunodes: Mapping[str, GPUNodeStatus],
                    pods: Sequence[Mapping[str, Any]]) -> None:
        """Replace every source at once (initial list, or relist after 410 Gone); reservations stay."""
        if not self.synced and self._startup_grace > 0:
            self._grace_until = self._clock() + self._startup_grace
        self._nodes = {str(n["metadata"]["name"]): n for n in nodes}
        self._gpunodes = dict(gpunodes)
        self._infos = {}
        for name in set(self._nodes):
            self._refresh_node(name, mark=False)
        self._pods, self._by_slot, self._waiting = {}, {}, {}
        for obj in pods:
            demand = _read_pod(obj)
            self._note_waiting(str((obj.get("metadata") or {}).get("uid", "")), demand, obj)
            held = _hold(demand) if demand is not None else None
            if held is not None:
                self._pods[held.uid] = held
                self._by_slot[(held.owner, held.index)] = held.uid
        self._dirty = True

    def expire(self, now: float | None = None) -> list[str]:
        """Release reservations past their TTL; returns their job UIDs."""
        now = self._clock() if now is None else now
        if self._grace_until is not None and now >= self._grace_until:
            self._grace_until = None
            self._freed_quietly = True  # pods held back during the grace may go now: nudge them
        gone = [job for job, r in self._reservations.items() if r.expires_at <= now]
        for job in gone:
            log.info("reservation of job %s expired with pods %s never created",
                     job, sorted(self._reservations[job].held))
            self._drop_reservation(job)
        return gone

    def take_requeue(self, limit: int) -> list[tuple[str, str]]:
        """Waiting GPU pods to nudge, once, after reserved GPUs were freed without an API event.

        kube-scheduler parks a pod the extender rejected until some cluster event, or for up to
        five minutes. A reservation that ends by Release or expiry changes nothing in the API, so
        pods that wait for exactly those GPUs would sit idle; the caller touches these pods (an
        annotation) so kube-scheduler retries them now. Oldest first, at most ``limit``.
        """
        if not self._freed_quietly:
            return []
        self._freed_quietly = False
        return list(self._waiting.values())[:limit]

    # ---- SchedulerAuthority (kube-scheduler verbs) ------------------------------------------

    def filter(self, pod: PodDemand, nodes: Sequence[str]) -> FilterVerdict:
        """See :class:`SchedulerAuthority`."""
        snap = self._current()
        if not pod.holds_gpus:
            return FilterVerdict(passed=list(nodes))
        if pod.pinned_node is not None:
            return self._filter_pinned(snap, pod, nodes)
        held_back = self._held_back()
        if held_back:
            return FilterVerdict(passed=[], unresolvable=dict.fromkeys(nodes, held_back))
        return self._filter_plain(snap, self._pod_gang(pod), nodes)

    def prioritize(self, pod: PodDemand, nodes: Sequence[str]) -> list[tuple[str, int]]:
        """See :class:`SchedulerAuthority`."""
        snap = self._current()
        if pod.pinned_node is not None or pod.gpus == 0:
            return [(n, MAX_EXTENDER_PRIORITY if n == pod.pinned_node else 0) for n in nodes]
        scores = node_scores(self._pod_gang(pod), snap, nodes)
        return [(n, scores.get(n, 0)) for n in nodes]

    def preempt(self, pod: PodDemand, candidates: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """See :class:`SchedulerAuthority`: whole gangs only, and only if the pod then fits."""
        snap = self._current()
        kept: dict[str, list[str]] = {}
        if pod.pinned_node is None and pod.gpus and self._held_back():
            return kept
        gang = self._pod_gang(pod) if pod.gpus else None
        for node, uids in candidates.items():
            if pod.pinned_node is not None and node != pod.pinned_node:
                continue
            victims = set(uids)
            if not self._whole_gangs(victims):
                continue
            if gang is not None and not self._fits_after(snap, gang, node, victims):
                continue
            kept[node] = list(uids)
        return kept

    # ---- PlacementAuthority (operator over gRPC) ----------------------------------------------

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
            existing.expires_at = now + ttl_seconds
            return ReserveOutcome(result=existing.placement, expires_at=existing.expires_at)
        claimed = sorted(i for (owner, i) in self._by_slot if owner == gang.id)
        if claimed:
            # The gang's pods exist (e.g. the operator re-reserves after an extender restart): their
            # annotations are the reservation. All of them: idempotent answer; some: refuse.
            if claimed == list(range(gang.pods)):
                return ReserveOutcome(result=self._held_placement(snap, gang), expires_at=now + ttl_seconds)
            if placement is not None and self._extends_pods(snap, gang, placement):
                # Some pods exist, the rest were reserved by an extender that restarted since: the
                # operator re-reserves the same placement, and the missing slots are held again.
                return self._reserve_rest(snap, gang, placement, set(claimed), now + ttl_seconds)
            return ReserveOutcome(result=Unplaceable(
                gang_id=gang.id, level=Level.CLUSTER,
                reason=f"job {gang.id} already has pods {claimed} of {gang.pods}; reserve with the placement "
                       "they were created from, or delete the whole gang before reserving it again"))
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

    def _extends_pods(self, snap: Snapshot, gang: GangRequest, placement: Placement) -> bool:
        """``placement`` is for this gang and puts every existing pod where it is held."""
        if placement.gang_id != gang.id or sorted(a.pod for a in placement.assignments) != list(range(gang.pods)):
            return False
        planned = {a.pod: a for a in placement.assignments}
        return all(planned[a.pod].node == a.node and planned[a.pod].gpus == a.gpus
                   for a in snap.allocations_of(gang.id))

    def _reserve_rest(self, snap: Snapshot, gang: GangRequest, placement: Placement, claimed: set[int],
                      expires_at: float) -> ReserveOutcome:
        rest = [a for a in placement.allocations(gang) if a.pod not in claimed]
        try:
            snap.allocate_all(rest)
        except AllocationError as exc:
            return ReserveOutcome(result=Unplaceable(
                gang_id=gang.id, level=placement.level,
                reason=f"pods {sorted(claimed)} of job {gang.id} exist, but the GPUs planned for the others "
                       f"were taken meanwhile: {exc}; delete the whole gang and requeue it"))
        self._reservations[gang.id] = Reservation(gang, placement, expires_at, {a.pod for a in rest})
        return ReserveOutcome(result=placement, expires_at=expires_at)

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
        kept = {a.pod: a for a in snap.allocations_of(gang.id) if a.pod not in lost}
        if not lost:
            return RepairOutcome(result=self._gang_placement(gang, kept))
        missing = sorted(lost)
        sub = dataclasses.replace(gang, pods=len(missing), required_level=None, preferred_level=None)
        found = self._plan_near(snap, sub, gang, kept)
        if isinstance(found, Unplaceable):
            return RepairOutcome(result=found, displaced=tuple(lost[i] for i in missing))
        moved = {index: dataclasses.replace(a, pod=index) for index, a in zip(missing, found.assignments, strict=True)}
        reservation = self._reservations.get(gang.id)
        held = (reservation.held if reservation is not None else set()) | set(missing)
        placement = self._gang_placement(gang, {**kept, **moved})
        snap.allocate_all([a for a in placement.allocations(gang) if a.pod in moved])
        self._reservations[gang.id] = Reservation(gang, placement, self._clock() + ttl_seconds, held)
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

    def take_intrusions(self) -> int:
        """Displacements found since the last call (for the intrusion counter)."""
        self._current()
        count, self._new_intrusions = self._new_intrusions, 0
        return count

    def release(self, job_uid: str) -> int:
        """See :class:`PlacementAuthority`."""
        self._displaced.pop(job_uid, None)
        reservation = self._reservations.get(job_uid)
        if reservation is None:
            return 0
        freed = sum(len(a.gpus) for a in reservation.placement.assignments
                    if a.pod in reservation.held and a.gpu_milli == MILLI)
        self._drop_reservation(job_uid)
        return freed

    def what_if(self, gang: GangRequest, candidates: Sequence[str]) -> WhatIfOutcome:
        """See :class:`PlacementAuthority`: the core's victim chooser, ``plan_preemption``.

        Whole gangs only: evicting a candidate frees everything it holds in the ledger (its pods and
        any slots still reserved for it); the gang's own reservation does not count against it. The
        caller's order is the preference (earlier = preferred victim), given to the planner as the
        candidates' priorities, so the set chosen is the planner's cheapest (fewest GPUs evicted),
        then the one reaching least far down the list. Changes nothing.
        """
        snap = self._current()
        offered = _what_if_candidates(candidates)
        with snap.what_if():
            self._release_reserved(snap, gang.id)
            found = plan_preemption(gang, snap, offered)
            if found is not None:
                position = {c.gang_id: c.priority for c in offered}
                victims = tuple(sorted(found.victims, key=position.__getitem__))
                return WhatIfOutcome(victims=victims, result=found.placement)
            # Why not even every candidate suffices: the gang planned with all of them gone.
            for c in offered:
                if c.gang_id != gang.id:
                    snap.release(c.gang_id)
            result = plan(gang, snap)
        if isinstance(result, Placement):  # only when the planner's search budget ran out
            log.warning("WhatIf for job %s: no victim set found within the search budget among %d candidates",
                        gang.id, len(offered))
            result = Unplaceable(gang_id=gang.id, level=gang.required_level or Level.CLUSTER,
                                 reason=f"no victim set found within the search budget among {len(offered)} "
                                        "candidates")
        return WhatIfOutcome(victims=(), result=result)

    # ---- views -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready dump: nodes with per-GPU free thousandths and holders, pods, reservations."""
        snap = self._current()
        holders: dict[tuple[str, int], list[str]] = {}
        for a in snap.allocations():
            for gpu in a.gpus:
                holders.setdefault((a.node, gpu), []).append(f"{a.owner}#{a.pod}")
        nodes = {}
        for n, info in enumerate(self._topology.nodes):
            nodes[info.name] = {
                "domains": {lvl.label: self._topology.domain_names[lvl][self._topology.domain_of[lvl][n]]
                            for lvl in FABRIC_LEVELS},
                "gpus": [{"index": g.index, "product": g.product, "healthy": g.healthy,
                          "freeMilli": snap.gpu_milli[n][p], "holders": holders.get((info.name, g.index), [])}
                         for p, g in enumerate(info.gpus)],
            }
        return {
            "time": self._clock(),
            "synced": self.synced,
            "startupGraceUntil": self._grace_until,
            "nodes": nodes,
            "pods": {uid: {"pod": h.key, "owner": h.owner, "index": h.index, "node": h.node, "gpus": h.gpus,
                           "gpuIndices": list(h.gpu_indices), "bound": h.bound,
                           "cpuMilli": h.cpu_milli, "memoryMiB": h.memory_mib}
                     for uid, h in sorted(self._pods.items())},
            "reservations": {job: {"expiresAt": r.expires_at, "heldPods": sorted(r.held),
                                   "placement": [{"pod": a.pod, "node": a.node, "gpus": list(a.gpus)}
                                                 for a in r.placement.assignments]}
                             for job, r in sorted(self._reservations.items())},
            "unplaced": dict(sorted(self._unplaced.items())),
            "quarantined": dict(sorted(self._quarantined.items())),
        }

    def gpu_totals(self) -> dict[str, dict[str, int]]:
        """Per product: whole GPUs ``bound`` (pods), ``reserved`` (reservations) and ``free``."""
        snap = self._current()
        out: dict[str, dict[str, int]] = {}
        reserved_slots = {(job, i) for job, r in self._reservations.items() for i in r.held}
        for n, info in enumerate(self._topology.nodes):
            for p, g in enumerate(info.gpus):
                row = out.setdefault(g.product or "unknown", {"bound": 0, "reserved": 0, "free": 0})
                if snap.gpu_milli[n][p] == MILLI:
                    row["free"] += 1
        for a in snap.allocations():
            product = self._topology.nodes[self._topology.node_number[a.node]].gpus
            names = {g.index: g.product or "unknown" for g in product}
            state = "reserved" if (a.owner, a.pod) in reserved_slots else "bound"
            for gpu in a.gpus:
                out.setdefault(names.get(gpu, "unknown"), {"bound": 0, "reserved": 0, "free": 0})[state] += 1
        return out

    @property
    def reservation_count(self) -> int:
        """Reservations held in memory."""
        return len(self._reservations)

    # ---- internals -------------------------------------------------------------------------

    def _held_back(self) -> str:
        """Why GPU pods outside gangs must wait now ("" when they need not).

        Reservations live in memory until their pods exist. After a restart the ledger knows the
        gang pods already created (their annotations hold the GPUs) but not the reservations whose
        pods the operator is still creating; for a short grace, a plain pod could take exactly those
        GPUs and strand the gang. Gang pods are not held back: they only take their planned GPUs.
        """
        if self._grace_until is None:
            return ""
        left = self._grace_until - self._clock()
        if left <= 0:
            return ""
        return (f"extender restarted: GPU pods outside gangs wait {left:.0f}s more until gangs being "
                "created have claimed their reserved GPUs")

    def _current(self) -> Snapshot:
        if self._dirty:
            self._rebuild()
        return self._snapshot

    def _refresh_node(self, name: str, *, mark: bool = True) -> None:
        obj = self._nodes.get(name)
        info = node_info(obj, self._gpunodes.get(name)) if obj is not None else None
        if info == self._infos.get(name):
            return
        if info is None:
            self._infos.pop(name, None)
        else:
            self._infos[name] = info
        if mark:
            self._dirty = True

    def _pod_gang(self, pod: PodDemand) -> GangRequest:
        # GPUs only: kube-scheduler's NodeResourcesFit already checks CPU and memory against every
        # pod on the node, which the ledger (GPU pods only) cannot; it would only slow filter down.
        return GangRequest(id=f"pod/{pod.uid or pod.key}", pods=1, gpus_per_pod=max(pod.gpus, 1),
                           tolerations=pod.tolerations)

    def _filter_plain(self, snap: Snapshot, gang: GangRequest, nodes: Sequence[str]) -> FilterVerdict:
        """``feasible_nodes`` with a fast path, same answers (property tests check it).

        On a node that is not cordoned and whose hard taints the pod tolerates (decided once per
        distinct taint set, not per node), a whole-GPU pod without CPU/memory demands fits iff
        enough GPUs are free and the pod limit is not reached; when it lacks GPUs its reason depends
        only on (free, total): computed once by the core, then reused. That keeps ``filter`` at
        5,000 nodes to one dict lookup and a few list reads per node.
        """
        cap = snap.capacity.get(gang.flavour)
        if cap is None or gang.cpu_milli or gang.memory_mib or gang.fractional:
            return self._filter_core(snap, gang, nodes)
        tolerations = gang.tolerations
        ordinary_class = [
            taints is not None and all(any(t.tolerates(taint) for t in tolerations) for taint in taints)
            for taints in self._taint_classes]
        get, cls, room = self._topology.node_number.get, self._taint_class, self._pod_room
        free, total, used, need = cap.free, cap.total, snap.pods_used, gang.gpus_per_pod
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        memo: dict[int, str] = {}
        append = passed.append
        for name in nodes:
            n = get(name)
            if n is None:
                unresolvable[name] = UNKNOWN_NODE
                continue
            if ordinary_class[cls[n]] and used[n] < room[n]:
                f = free[n]
                if f >= need:
                    append(name)
                    continue
                key = f << 16 | total[n]
                reason = memo.get(key)
                if reason is None:
                    reason = memo[key] = node_reason(snap, n, gang) or ""
            else:
                reason = node_reason(snap, n, gang) or ""
            if reason:
                failed[name] = reason
            else:
                append(name)
        return FilterVerdict(passed=passed, failed=self._name_reservations(failed), unresolvable=unresolvable)

    def _filter_core(self, snap: Snapshot, gang: GangRequest, nodes: Sequence[str]) -> FilterVerdict:
        """The core's ``feasible_nodes``, unknown nodes moved to the unresolvable map."""
        ok, failed = feasible_nodes(gang, snap, nodes)
        unknown = {name: reason for name, reason in failed.items() if reason == UNKNOWN_NODE}
        for name in unknown:
            del failed[name]
        return FilterVerdict(passed=ok, failed=self._name_reservations(failed), unresolvable=unknown)

    def _name_reservations(self, failed: dict[str, str]) -> dict[str, str]:
        """Say so when reservations hold GPUs on a failed node: "has 0 of 8" alone reads like a bug.

        Walks the reservations (few), not the failed nodes (thousands), to keep filter cheap.
        """
        reserved: dict[str, int] = {}
        for reservation in self._reservations.values():
            for a in reservation.placement.assignments:
                if a.pod in reservation.held and a.node in failed:
                    reserved[a.node] = reserved.get(a.node, 0) + len(a.gpus)
        for node, count in reserved.items():
            failed[node] += f" ({count} reserved for gangs whose pods are not created yet)"
        return failed

    def _filter_pinned(self, snap: Snapshot, pod: PodDemand, nodes: Sequence[str]) -> FilterVerdict:
        target = pod.pinned_node or ""
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable = {n: f"pod is planned on node {target} (annotation {NODE_ANNOTATION})"
                        for n in nodes if n != target}
        if target in nodes:
            reason = self._pinned_reason(snap, pod)
            if reason is None:
                passed.append(target)
            else:
                failed[target] = reason
        return FilterVerdict(passed=passed, failed=failed, unresolvable=unresolvable)

    def _pinned_reason(self, snap: Snapshot, pod: PodDemand) -> str | None:
        """None when the pinned node holds this pod's GPUs (reserved or free now)."""
        owner, index = _owner_and_index(pod)
        for a in snap.allocations_of(owner):
            if a.pod == index:
                if a.node == pod.pinned_node:
                    return None
                return f"GPUs for this pod are held on node {a.node}, not {pod.pinned_node}"
        n = self._topology.node_number.get(pod.pinned_node or "")
        if n is None:
            return UNKNOWN_NODE
        info = self._topology.nodes[n]
        position = {g.index: p for p, g in enumerate(info.gpus)}
        if pod.pinned_gpus:
            need = pod.gpu_milli or MILLI
            taken = [g for g in pod.pinned_gpus if g not in position or snap.gpu_milli[n][position[g]] < need]
            if taken:
                return f"planned GPUs {taken} on node {info.name} are held by others (reservation lapsed?)"
            return None
        free = sum(1 for m in snap.gpu_milli[n] if m == MILLI)
        if free < pod.gpus:
            return f"needs {pod.gpus} free GPUs on its planned node; has {free} (reservation lapsed?)"
        return None

    def _whole_gangs(self, victims: set[str]) -> bool:
        """Every gang touched by ``victims`` is entirely in it."""
        owners = {self._pods[uid].owner for uid in victims if uid in self._pods}
        for owner in owners:
            if owner.startswith("pod/"):
                continue
            members = {uid for (o, _), uid in self._by_slot.items() if o == owner}
            if not members <= victims or owner in self._reservations:
                return False
        return True

    def _fits_after(self, snap: Snapshot, gang: GangRequest, node: str, victims: set[str]) -> bool:
        with snap.what_if():
            for uid in victims:
                held = self._pods.get(uid)
                if held is not None:
                    snap.release(held.owner, held.index)
            ok, _ = feasible_nodes(gang, snap, [node])
            return bool(ok)

    def _release_reserved(self, snap: Snapshot, job: str) -> None:
        reservation = self._reservations.get(job)
        if reservation is not None:
            for index in reservation.held:
                snap.release(job, index)

    def _drop_reservation(self, job: str) -> None:
        if self._reservations[job].held:
            self._freed_quietly = True
        if not self._dirty:
            self._release_reserved(self._snapshot, job)
        del self._reservations[job]
        if self._unplaced:
            self._dirty = True  # GPUs were freed: pods that did not fit may fit now

    def _forget_pod(self, old: HeldPod) -> None:
        del self._pods[old.uid]
        if self._by_slot.get((old.owner, old.index)) == old.uid:
            del self._by_slot[(old.owner, old.index)]
        if self._unplaced.pop(old.uid, None) is None and not self._dirty:
            self._snapshot.release(old.owner, old.index)
        if self._unplaced:
            self._dirty = True  # GPUs were freed: pods that did not fit may fit now

    def _place_pod(self, held: HeldPod) -> None:
        """Record a pod in the current snapshot; a conflict schedules a rebuild."""
        reservation = self._reservations.get(held.owner)
        if reservation is not None and held.index in reservation.held:
            reservation.held.discard(held.index)
            self._snapshot.release(held.owner, held.index)
            if not reservation.held:
                del self._reservations[held.owner]
        try:
            self._allocate_pod(self._snapshot, held)
        except AllocationError:
            # Guessed GPU indices may collide with a newly known exact hold: rebuild in order.
            self._dirty = True

    def _allocate_pod(self, snap: Snapshot, held: HeldPod) -> None:
        n = self._topology.node_number.get(held.node)
        if n is None:
            raise AllocationError(f"node {held.node} has no GPUs known to kubegang")
        gpus = held.gpu_indices
        if not gpus:
            info = self._topology.nodes[n]
            free = [g.index for p, g in enumerate(info.gpus) if snap.gpu_milli[n][p] == MILLI]
            if len(free) < held.gpus:
                raise AllocationError(f"node {held.node} has {len(free)} free GPUs; pod needs {held.gpus}")
            gpus = tuple(free[: held.gpus])
        snap.allocate(Allocation(owner=held.owner, pod=held.index, node=held.node, gpus=gpus,
                                 gpu_milli=held.gpu_milli, cpu_milli=held.cpu_milli, memory_mib=held.memory_mib))

    def _rebuild(self) -> None:
        """Recompile the topology and replay every hold: exact GPU indices first, guesses last.

        Bound pods hold their GPUs whatever was planned (kubelet runs them): a bound pod that does not
        fit because reservations or unbound gang pods plan its node's GPUs *displaces* those plans
        (``_displace``), and the gang is told through ``repair``.
        """
        self._topology = self._compile()
        snap = Snapshot(self._topology, workload=self._mix)
        self._unplaced = {}
        self._displaced_pods &= set(self._pods)
        exact = [h for h in self._pods.values() if h.gpu_indices and h.uid not in self._displaced_pods]
        guessed = [h for h in self._pods.values() if not h.gpu_indices]
        for held in sorted(exact, key=lambda h: (h.bound is False, h.uid)):
            self._try_allocate(snap, held)
        for job, reservation in list(self._reservations.items()):
            reservation.held -= {i for (o, i), uid in self._by_slot.items()
                                 if o == job and uid not in self._displaced_pods}
            wanted = [a for a in reservation.placement.allocations(reservation.gang) if a.pod in reservation.held]
            try:
                snap.allocate_all(wanted)
            except AllocationError as exc:
                log.error("reservation of job %s lost after a topology change: %s", job, exc)
                del self._reservations[job]
                self._freed_quietly = True
                continue
            if not reservation.held:
                del self._reservations[job]
        for held in sorted(guessed, key=lambda h: (h.bound is False, h.uid)):
            self._try_allocate(snap, held)
        for uid in [u for u in self._unplaced if self._pods[u].bound]:
            self._displace(snap, self._pods[uid])
        for uid in [u for u in self._unplaced if not self._pods[u].bound]:
            self._note_displaced(self._pods[uid])
        for held in self._pods.values():
            if held.uid in self._displaced_pods:
                self._unplaced.setdefault(held.uid, "its planned GPUs are held by a pod kubegang did not place")
        self._snapshot = snap
        classes: dict[tuple[Taint, ...] | None, int] = {}
        self._taint_class = [
            classes.setdefault(None if node.unschedulable else
                               tuple(t for t in node.taints if t.effect in _HARD_EFFECTS), len(classes))
            for node in self._topology.nodes]
        self._taint_classes = list(classes)
        self._pod_room = [node.max_pods or sys.maxsize for node in self._topology.nodes]
        self._dirty = False

    def _note_displaced(self, pod: HeldPod) -> None:
        """An unbound gang pod that did not fit because a bound pod on its node holds its GPUs."""
        if pod.owner.startswith("pod/"):
            return
        intruder = next((h for h in self._pods.values() if h.bound and h.node == pod.node and h.owner != pod.owner
                         and (not pod.gpu_indices or set(h.gpu_indices) & set(pod.gpu_indices))), None)
        if intruder is None:
            return
        self._displaced_pods.add(pod.uid)
        self._unplaced[pod.uid] = f"its planned GPUs are held by {intruder.key}, which kubegang did not place"
        if pod.index not in self._displaced.setdefault(pod.owner, {}):
            self._new_intrusions += 1
            log.warning("pod %s bound to %s holds GPUs planned for pod %s", intruder.key, pod.node, pod.key)
        self._displaced[pod.owner][pod.index] = Displacement(pod.index, pod.node, intruder.key)

    def _displace(self, snap: Snapshot, intruder: HeldPod) -> None:
        """Make room for a bound pod that does not fit: drop the plans on its node (unclaimed reservation
        slots, then unbound gang pods), fewest first, and remember each as displaced by it."""
        plans: list[tuple[str, int, HeldPod | None]] = []
        for job, reservation in self._reservations.items():
            plans += [(job, a.pod, None) for a in reservation.placement.assignments
                      if a.pod in reservation.held and a.node == intruder.node and job != intruder.owner]
        plans += [(h.owner, h.index, h) for h in self._pods.values()
                  if h.node == intruder.node and not h.bound and h.owner != intruder.owner
                  and h.uid not in self._unplaced and h.uid not in self._displaced_pods]
        for job, index, pod in plans:
            snap.release(job, index)
            if pod is None:
                reservation = self._reservations[job]
                reservation.held.discard(index)
                if not reservation.held:
                    del self._reservations[job]
            else:
                self._displaced_pods.add(pod.uid)
                self._unplaced[pod.uid] = f"its planned GPUs are held by {intruder.key}, which kubegang did not place"
            if index not in self._displaced.setdefault(job, {}):
                self._new_intrusions += 1
                log.warning("pod %s bound to %s took GPUs planned for pod %d of job %s", intruder.key,
                            intruder.node, index, job)
            self._displaced[job][index] = Displacement(index, intruder.node, intruder.key)
            try:
                self._allocate_pod(snap, intruder)
            except AllocationError:
                continue
            del self._unplaced[intruder.uid]
            return

    def _compile(self) -> TopologyIndex:
        """The topology index; an inconsistency degrades only the nodes involved (``_quarantine``)."""
        self._quarantined = {}
        try:
            return compile_index(self._infos.values(), self._labels)
        except TopologyError as exc:
            log.error("topology is inconsistent (%s); degrading the nodes involved", exc)

        def without_gpunode(name: str) -> NodeInfo | None:
            obj = self._nodes.get(name)
            return node_info(obj) if obj is not None else None

        usable, self._quarantined = consistent_nodes(self._infos.values(), without_gpunode, self._labels)
        for name, reason in sorted(self._quarantined.items()):
            log.error("node %s: %s", name, reason)
        try:
            return compile_index(usable, self._labels)
        except TopologyError as exc:  # the quarantine missed a rule of the core: still keep placing
            log.error("topology still inconsistent after quarantine (%s); placing without fabric labels", exc)
        try:
            return compile_index(usable, TopologyLabels(nvlink=None, leaf=None, spine=None, block=None))
        except TopologyError:
            log.exception("topology unusable even without fabric labels; no GPU node is placeable")
            return compile_index([], self._labels)

    def _try_allocate(self, snap: Snapshot, held: HeldPod) -> None:
        try:
            self._allocate_pod(snap, held)
        except AllocationError as exc:
            self._unplaced[held.uid] = str(exc)
            log.warning("pod %s on %s not recorded: %s", held.key, held.node, exc)
