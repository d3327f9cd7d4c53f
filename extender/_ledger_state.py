"""The ledger's sources and what is derived from them (the first of its three parts).

Sources: nodes, GPUNode statuses, pods holding GPUs, admitted GPUJobs' recorded placements and
in-memory reservations, fed by the watches (:mod:`._watch`) and the operator's Reserve. Derived: the
compiled topology and the core :class:`Snapshot`, updated incrementally and rebuilt from the sources
on a conflict or a topology change (``_rebuild``), where a bound pod always holds its GPUs and the
plans it collides with are displaced. The verbs that decide on this state are
:mod:`._scheduler_verbs` (kube-scheduler) and :mod:`._reservations` (the operator).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubegang.api import PodSourceKind
from kubegang.api.gpunode import GPUNodeStatus
from kubegang.extender._admitted import AdmittedGang, admitted_gang
from kubegang.extender._authority import Displacement
from kubegang.extender._holds import (
    HeldPod,
    Reservation,
    _hold,
    _read_pod,
    _waits_for_a_node,
)
from kubegang.extender._nodes import keep_last_known, node_info, without_fabric_facts
from kubegang.extender._pods import PodDemand
from kubegang.extender._quarantine import consistent_nodes
from kubegang.placement import (
    MILLI,
    Allocation,
    AllocationError,
    PodAssignment,
    Snapshot,
    TaskShape,
    WorkloadMix,
)
from kubegang.topology import (
    FABRIC_LEVELS,
    NodeInfo,
    Taint,
    TopologyError,
    TopologyIndex,
    TopologyLabels,
    compile_index,
    with_node_facts,
)

log = logging.getLogger(__name__)

_HARD_EFFECTS = ("NoSchedule", "NoExecute")
_HELD_KINDS = frozenset({PodSourceKind.POD_GROUP, PodSourceKind.SCHEDULING_GROUP})
"""Sources whose GPU pods wait unpinned whether or not a GPUJob represents them yet (``adopted``)."""


class LedgerState:
    """The ledger's sources, its derived snapshot, and how both are kept current."""

    def __init__(self, labels: TopologyLabels | None = None, clock: Callable[[], float] = time.time) -> None:
        self._labels = labels or TopologyLabels()
        self._clock = clock
        self._nodes: dict[str, Mapping[str, Any]] = {}
        self._gpunodes: dict[str, GPUNodeStatus] = {}
        self._infos: dict[str, NodeInfo] = {}
        self._pods: dict[str, HeldPod] = {}
        self._reservations: dict[str, Reservation] = {}
        self._admissions: dict[str, str] = {}
        """Job UID -> ``status.admittedAt`` of the admission its GPUJob records (see :meth:`upsert_gpujob`)."""
        self._adopted: dict[str, tuple[str, str]] = {}
        """Job UID -> (namespace, RayCluster name) of GPUJobs that adopt a RayCluster's pods
        (``spec.podSource``): those pods wait, unplaced, until the operator pins them."""
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
        self._guessed: set[str] = set()
        """Nodes whose unhealthy GPUs were chosen by the ledger (allocatable short of capacity, and the
        GPUNode does not say which): chosen again at each rebuild, away from the GPUs pods hold."""
        self._topology: TopologyIndex = compile_index([], self._labels)
        self._mix = WorkloadMix()
        """The pod shapes this cluster runs (decayed), which single-pod scoring measures fragmentation
        against (FGD); it outlives every snapshot rebuild, so its memoised values do too."""
        self._snapshot = Snapshot(self._topology, workload=self._mix)
        self._taint_class: list[int] = []
        """Per node number: the number of its class in ``_taint_classes``."""
        self._taint_classes: dict[tuple[Taint, ...] | None, int] = {}
        """Distinct hard-taint sets of the nodes (None for cordoned nodes) -> their class number, in order."""
        self._pod_room: list[int] = []
        """Per node number: pod limit, or ``sys.maxsize`` when unknown."""
        self._waiting: dict[str, tuple[str, str]] = {}
        """Pod uid -> (namespace, name) of GPU pods outside gangs that wait for a node, oldest first."""
        self._freed_quietly = False
        """Reserved GPUs were freed with no API event (Release, expiry): see :meth:`take_requeue`."""
        self._room = secrets.randbelow(2**62) + 1
        """The room epoch (:meth:`room`): random at start, so an operator's refusals kept from an
        extender that restarted are never mistaken for current ones."""
        self._dirty = False
        self.synced = False
        """True once the watches listed everything (readiness)."""

    def room(self) -> int:
        """The room epoch: moved by every change that can free GPUs or room for a gang (a pod gone or
        holding less or elsewhere, a reservation released or expired, a node or GPUNode changed, a
        rebuild), never by one that only takes room (a reservation, a new pod) or changes nothing a plan
        reads (a bind, a pod starting). So a ``plan`` refused at epoch E would be refused again while
        it is E: the operator keeps its refusals by it (``AdmissionCycle._ask_plan``). A pending
        rebuild is made first, since it may move the epoch."""
        self._current()
        return self._room

    def _freed(self) -> None:
        """Something that may free room happened: move the room epoch."""
        self._room += 1

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
            self._gpunodes[name] = keep_last_known(status, self._gpunodes.get(name))
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
        holder = self._slot_holder(held) if held is not None else None
        if held is not None and holder is not None:
            held = self._outside_gang(held, holder)
        old = self._pods.get(uid)
        if held == old:
            return
        if old is not None:
            if held is None or dataclasses.replace(old, bound=held.bound) != held:
                self._freed()  # gone, or holding something else now; a bind alone frees nothing
            self._forget_pod(old)
        if held is not None:
            if old is None:  # each pod counts once in the workload mix, when it first holds GPUs
                self._mix.observe(TaskShape(max(held.gpus, 1), held.gpu_milli, held.cpu_milli, held.memory_mib))
            self._pods[uid] = held
            self._by_slot[(held.owner, held.index)] = uid
            if not self._dirty:
                self._place_pod(held)

    def _slot_holder(self, held: HeldPod) -> HeldPod | None:
        """Another live pod holding the gang slot ``held`` claims (a copy of a gang pod: the same
        job-uid and replica-index labels), or None."""
        if held.owner.startswith("pod/"):
            return None
        uid = self._by_slot.get((held.owner, held.index))
        return self._pods.get(uid) if uid is not None and uid != held.uid else None

    @staticmethod
    def _outside_gang(held: HeldPod, holder: HeldPod) -> HeldPod:
        """``held`` held under its own key, as a pod outside gangs: the slot stays with ``holder``, so the
        copy neither takes the original's slot nor, once deleted, frees it (then preemption would see
        the gang without that pod and could evict half of it)."""
        log.warning("pod %s claims pod %d of job %s, which pod %s holds; it holds its GPUs as a pod outside "
                    "the gang", held.key, held.index, held.owner, holder.key)
        return dataclasses.replace(held, owner=f"pod/{held.uid}", index=0)

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
            self._freed()
            self._forget_pod(old)

    def replace_all(self, nodes: Sequence[Mapping[str, Any]], gpunodes: Mapping[str, GPUNodeStatus],
                    pods: Sequence[Mapping[str, Any]], gpujobs: Sequence[Mapping[str, Any]] = ()) -> None:
        """Replace every source at once (the initial list); in-memory reservations stay.

        The GPUJobs come last: an admitted job's recorded placement is held for the pods that do not
        exist yet, so no GPU a gang is being created on is free after a restart, not even briefly.
        """
        self._nodes = {str(n["metadata"]["name"]): n for n in nodes}
        self._gpunodes = {name: keep_last_known(status, self._gpunodes.get(name)) for name, status in gpunodes.items()}
        self._infos, self._guessed = {}, set()
        for name in set(self._nodes):
            self._refresh_node(name, mark=False)
        self._pods, self._by_slot, self._waiting, self._adopted = {}, {}, {}, {}
        born: dict[str, str] = {}
        """Pod uid -> creationTimestamp, of the pods holding a gang slot: of two copies, the older keeps it."""
        for obj in pods:
            try:
                self._load_pod(obj, born)
            except Exception:
                # One object must not keep the ledger from its first sync (and the extender unready).
                meta = obj.get("metadata") or {}
                log.exception("pod %s/%s: not read at sync", meta.get("namespace"), meta.get("name"))
        self._dirty = True
        for job in gpujobs:
            try:
                self.upsert_gpujob(job)
            except Exception:
                # One object must not keep the ledger from its first sync (and the extender unready).
                meta = job.get("metadata") or {}
                log.exception("GPUJob %s/%s: not read at sync", meta.get("namespace"), meta.get("name"))

    def _load_pod(self, obj: Mapping[str, Any], born: dict[str, str]) -> None:
        """One pod of the initial list into the sources (no snapshot yet)."""
        meta = obj.get("metadata") or {}
        demand = _read_pod(obj)
        self._note_waiting(str(meta.get("uid", "")), demand, obj)
        held = _hold(demand) if demand is not None else None
        if held is None:
            return
        created = str(meta.get("creationTimestamp") or "")
        holder = self._slot_holder(held)
        if holder is not None:
            if (born.get(holder.uid, ""), holder.uid) <= (created, held.uid):
                held = self._outside_gang(held, holder)
            else:  # the list order is no age: the older copy keeps the slot, whichever came first
                moved = self._outside_gang(holder, held)
                self._pods[moved.uid] = moved
                self._by_slot[(moved.owner, moved.index)] = moved.uid
        self._pods[held.uid] = held
        self._by_slot[(held.owner, held.index)] = held.uid
        born[held.uid] = created

    def upsert_gpujob(self, obj: Mapping[str, Any]) -> None:
        """A GPUJob was added or changed: hold or stop holding its recorded placement.

        An in-memory reservation becomes durable (no TTL) once the job's status records the same
        placement. The first time an admission is seen with no reservation in memory (a restart, a
        relist, a leader that wrote it while this extender was away), the slots without a pod are
        held from the record. Later events of the same admission change nothing: a slot a pod gave
        back (finished, deleted) is not taken again, and a stale event after Release holds only
        until the event that gives the admission back.
        """
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        source = (obj.get("spec") or {}).get("podSource")
        if isinstance(source, Mapping) and source.get("kind") == PodSourceKind.RAY_CLUSTER.value:
            self._adopted[uid] = (str(meta.get("namespace") or ""), str(source.get("name") or ""))
        else:
            self._adopted.pop(uid, None)
        admitted = admitted_gang(obj)
        if admitted is None:
            self.delete_gpujob(uid)
            return
        seen = self._admissions.get(uid)
        self._admissions[uid] = admitted.attempt
        reservation = self._reservations.get(uid)
        if reservation is not None:
            if _same_slots(reservation.placement.assignments, admitted.placement.assignments):
                reservation.durable, reservation.expires_at = True, math.inf
            return
        if seen != admitted.attempt:
            self._hold_recorded(admitted)

    def forget_gpujob(self, uid: str) -> None:
        """A GPUJob was deleted: it adopts nothing any more, and its durable reservation ends."""
        self._adopted.pop(uid, None)
        self.delete_gpujob(uid)

    def adopted(self, pod: PodDemand) -> bool:
        """Whether ``pod`` belongs to a source kubegang admits (a pod group, labelled or native; a
        RayCluster some GPUJob adopts): such a pod is placed only once the operator pinned it to a slot
        of the admission.

        A GPU pod that names a native PodGroup is held even before its GPUJob exists: its pods appear
        before the operator has represented the group, and placing them one by one in that gap would
        break the all-or-nothing the PodGroup asks for (a RayCluster has no such gap: it is created
        suspended)."""
        if pod.source is None:
            return False
        kind, name = pod.source
        return kind in _HELD_KINDS or (pod.namespace, name) in self._adopted.values()

    def delete_gpujob(self, uid: str) -> None:
        """A GPUJob was deleted or gave its admission back: its durable reservation ends."""
        if self._admissions.pop(uid, None) is None:
            return
        reservation = self._reservations.get(uid)
        if reservation is not None and reservation.durable:
            self._drop_reservation(uid)

    def _hold_recorded(self, admitted: AdmittedGang) -> None:
        job = admitted.gang.id
        held = {a.pod for a in admitted.placement.assignments if (job, a.pod) not in self._by_slot}
        if not held:
            return
        log.info("job %s: holding the recorded placement of pods %s until they exist", job, sorted(held))
        self._reservations[job] = Reservation(admitted.gang, admitted.placement, math.inf, held, durable=True)
        self._dirty = True  # the rebuild places it slot by slot; a bound pod in its way displaces it

    def expire(self, now: float | None = None) -> list[str]:
        """Release reservations past their TTL; returns their job UIDs."""
        now = self._clock() if now is None else now
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

    def take_intrusions(self) -> int:
        """Displacements found since the last call (for the intrusion counter)."""
        self._current()
        count, self._new_intrusions = self._new_intrusions, 0
        return count

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
            "nodes": nodes,
            "pods": {uid: {"pod": h.key, "owner": h.owner, "index": h.index, "node": h.node, "gpus": h.gpus,
                           "gpuIndices": list(h.gpu_indices), "bound": h.bound,
                           "cpuMilli": h.cpu_milli, "memoryMiB": h.memory_mib}
                     for uid, h in sorted(self._pods.items())},
            "reservations": {job: {"expiresAt": None if r.durable else r.expires_at, "durable": r.durable,
                                   "heldPods": sorted(r.held), "pendingPods": sorted(r.pending),
                                   "placement": [{"pod": a.pod, "node": a.node, "gpus": list(a.gpus)}
                                                 for a in r.placement.assignments]}
                             for job, r in sorted(self._reservations.items())},
            "unplaced": dict(sorted(self._unplaced.items())),
            "quarantined": dict(sorted(self._quarantined.items())),
        }

    def gpu_totals(self) -> dict[str, dict[str, int]]:
        """Per product, each GPU once: ``free`` (nothing on it), else ``bound`` (a pod holds some or all
        of it), else ``reserved`` (only reservations do); the three add up to the GPUs there are.

        Counted per GPU, not per allocation: two pods sharing one GPU would count it twice (a 2-GPU
        node read 2 bound and 1 free)."""
        snap = self._current()
        out: dict[str, dict[str, int]] = {}
        reserved_slots = {(job, i) for job, r in self._reservations.items() for i in r.held}
        held: dict[tuple[str, int], str] = {}
        for a in snap.allocations():
            state = "reserved" if (a.owner, a.pod) in reserved_slots else "bound"
            for gpu in a.gpus:
                if held.get((a.node, gpu)) != "bound":
                    held[(a.node, gpu)] = state
        for n, info in enumerate(self._topology.nodes):
            for p, g in enumerate(info.gpus):
                row = out.setdefault(g.product or "unknown", {"bound": 0, "reserved": 0, "free": 0})
                if snap.gpu_milli[n][p] == MILLI:
                    row["free"] += 1
                else:
                    row[held.get((info.name, g.index), "bound")] += 1
        return out

    @property
    def reservation_count(self) -> int:
        """Reservations held (after any pending rebuild, which may displace or complete some)."""
        self._current()
        return len(self._reservations)

    def _current(self) -> Snapshot:
        if self._dirty:
            self._rebuild()
        return self._snapshot

    def _node_info(self, name: str, gpunode: GPUNodeStatus | None) -> NodeInfo | None:
        """``node_info`` of the Node ``name`` with ``gpunode``; records in ``_guessed`` whether the ledger
        had to choose which GPUs are the unhealthy ones."""
        obj = self._nodes.get(name)
        guessed = False

        def in_use() -> set[int]:
            nonlocal guessed
            guessed = True
            return self._indices_in_use(name)

        info = node_info(obj, gpunode, in_use) if obj is not None else None
        if guessed:
            self._guessed.add(name)
        else:
            self._guessed.discard(name)
        return info

    def _indices_in_use(self, node: str) -> set[int]:
        """GPU indices that pods (bound or planned) and reservation slots are known to hold on ``node``."""
        used = {g for h in self._pods.values() if h.node == node for g in h.gpu_indices}
        for r in self._reservations.values():
            used.update(g for a in r.placement.assignments if a.node == node and a.pod in r.held for g in a.gpus)
        return used

    def _refresh_node(self, name: str, *, mark: bool = True) -> None:
        info = self._node_info(name, self._gpunodes.get(name))
        if info == self._infos.get(name):
            return
        self._freed()  # a node back, uncordoned, with a GPU healthy again or a taint gone: room
        if info is None:
            self._infos.pop(name, None)
        else:
            self._infos[name] = info
        if mark and not (info is not None and self._swap_node_facts(info)):
            self._dirty = True

    def _swap_node_facts(self, info: NodeInfo) -> bool:
        """Apply a change of only taints or cordon in place (no recompile, no replay); False when the
        change is structural or a rebuild is due anyway. A flapping node costs a lookup, not O(nodes)."""
        if self._dirty:
            return False
        index = with_node_facts(self._topology, info)
        if index is None:
            return False
        self._topology = index
        self._snapshot.use_topology(index)
        n = index.node_number[info.name]
        self._taint_class[n] = self._taint_class_of(info)
        return True

    def _taint_class_of(self, node: NodeInfo) -> int:
        """The number of the node's hard-taint class (None: cordoned), numbered in order of first sight."""
        key = None if node.unschedulable else tuple(t for t in node.taints if t.effect in _HARD_EFFECTS)
        return self._taint_classes.setdefault(key, len(self._taint_classes))

    def _release_reserved(self, snap: Snapshot, job: str) -> None:
        reservation = self._reservations.get(job)
        if reservation is not None:
            for index in reservation.held:
                snap.release(job, index)

    def _drop_reservation(self, job: str) -> None:
        self._freed()
        if self._reservations[job].held:
            self._freed_quietly = True
        if not self._dirty:
            self._release_reserved(self._snapshot, job)
        del self._reservations[job]
        if self._waits_for_room():
            self._dirty = True  # GPUs were freed: pods and slots that did not fit may fit now

    def _forget_pod(self, old: HeldPod) -> None:
        del self._pods[old.uid]
        if self._by_slot.get((old.owner, old.index)) == old.uid:
            del self._by_slot[(old.owner, old.index)]
        if self._unplaced.pop(old.uid, None) is None and not self._dirty:
            self._snapshot.release(old.owner, old.index)
        if self._waits_for_room():
            self._dirty = True  # GPUs were freed: pods and slots that did not fit may fit now

    def _waits_for_room(self) -> bool:
        """Whether some pod or reservation slot is not in the snapshot for want of its GPUs."""
        return bool(self._unplaced) or any(r.pending for r in self._reservations.values())

    def _place_pod(self, held: HeldPod) -> None:
        """Record a pod in the current snapshot; a conflict schedules a rebuild."""
        reservation = self._reservations.get(held.owner)
        if reservation is not None and held.index in reservation.held:
            slot = next((a for a in reservation.placement.assignments if a.pod == held.index), None)
            if slot is None or (slot.node, tuple(slot.gpus)) != (held.node, held.gpu_indices):
                self._freed()  # the pod is not where its slot was held: the slot's GPUs are free
            reservation.held.discard(held.index)
            reservation.pending.discard(held.index)
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
        self._freed()  # a rebuild places afresh (displacements, quarantine): a plan may find room now
        for name in sorted(self._guessed):  # which GPUs are unhealthy was chosen away from the pods then
            self._refresh_node(name, mark=False)
        self._topology = self._compile()
        snap = Snapshot(self._topology, workload=self._mix)
        self._unplaced = {}
        self._displaced_pods &= set(self._pods)
        exact = [h for h in self._pods.values() if h.gpu_indices and h.uid not in self._displaced_pods]
        guessed = [h for h in self._pods.values() if not h.gpu_indices]
        # Bound pods first (kubelet runs them), and of two copies of one gang pod the one holding the slot.
        for held in sorted(exact, key=lambda h: (h.bound is False, h.owner.startswith("pod/"), h.uid)):
            self._try_allocate(snap, held)
        for job, reservation in list(self._reservations.items()):
            reservation.held -= {i for (o, i), uid in self._by_slot.items()
                                 if o == job and uid not in self._displaced_pods}
            self._replay_reservation(snap, job, reservation)
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
        self._taint_classes = {}
        self._taint_class = [self._taint_class_of(node) for node in self._topology.nodes]
        self._pod_room = [node.max_pods or sys.maxsize for node in self._topology.nodes]
        self._dirty = False

    def _replay_reservation(self, snap: Snapshot, job: str, reservation: Reservation) -> None:
        """Hold a reservation's slots in a rebuilt snapshot.

        A slot whose GPUs a bound pod holds is displaced by it (told to the operator through
        ``repair``). A slot that fails otherwise (its node is gone, its GPUs vanished or are unhealthy:
        a Node deleted and created again, a device plugin restarting) stays the gang's, *pending*: it is
        placed again at the next rebuild, which the node's return causes. Losing it would free the
        GPUs for good, the recorded admission being seen already (``upsert_gpujob``).
        """
        was_pending, reservation.pending = reservation.pending, set()
        for a in reservation.placement.allocations(reservation.gang):
            if a.pod not in reservation.held:
                continue
            try:
                snap.allocate(a)
                continue
            except AllocationError as exc:
                intruder = self._bound_intruder(a.node, job, a.gpus)
                if intruder is None:
                    reservation.pending.add(a.pod)
                    if a.pod not in was_pending:
                        log.warning("reservation of job %s: pod %d's slot on %s cannot be held now (%s); kept, "
                                    "and held again once the node has its GPUs", job, a.pod, a.node, exc)
                    continue
            reservation.held.discard(a.pod)
            self._record_displacement(job, a.pod, intruder, None)
        if not reservation.held:
            del self._reservations[job]

    def _bound_intruder(self, node: str, owner: str, gpus: Sequence[int]) -> HeldPod | None:
        """A bound pod of another owner on ``node`` holding any of ``gpus`` (any GPU when ``gpus`` is empty)."""
        wanted = set(gpus)
        return next((h for h in self._pods.values() if h.bound and h.node == node and h.owner != owner
                     and (not wanted or wanted & set(h.gpu_indices))), None)

    def _note_displaced(self, pod: HeldPod) -> None:
        """An unbound gang pod that did not fit because a bound pod on its node holds its GPUs."""
        if pod.owner.startswith("pod/"):
            return
        intruder = self._bound_intruder(pod.node, pod.owner, pod.gpu_indices)
        if intruder is not None:
            self._record_displacement(pod.owner, pod.index, intruder, pod)

    def _record_displacement(self, job: str, index: int, intruder: HeldPod, pod: HeldPod | None) -> None:
        """Slot ``index`` of ``job`` (held by the unbound ``pod``, or by a reservation when None) lost its
        GPUs to the bound ``intruder``: remember it for ``repair`` and count it once."""
        if pod is not None:
            self._displaced_pods.add(pod.uid)
            self._unplaced[pod.uid] = f"its planned GPUs are held by {intruder.key}, which kubegang did not place"
        if index not in self._displaced.setdefault(job, {}):
            self._new_intrusions += 1
            log.warning("pod %s bound to %s took GPUs planned for pod %d of job %s", intruder.key,
                        intruder.node, index, job)
        self._displaced[job][index] = Displacement(index, intruder.node, intruder.key)

    def _displace(self, snap: Snapshot, intruder: HeldPod) -> None:
        """Make room for a bound pod that does not fit: drop the plans in its way (unclaimed reservation
        slots, then unbound gang pods) and remember each as displaced by it.

        In its way: on its node and, when its GPU indices are known, on one of them; a plan on other
        GPUs of the node is left alone. Nothing is dropped when dropping every such plan would not make
        it fit either (one of its GPUs is gone or unhealthy, another bound pod holds it)."""
        placed = {(a.owner, a.pod): set(a.gpus) for a in snap.allocations() if a.node == intruder.node}
        wanted = set(intruder.gpu_indices)

        def in_the_way(owner: str, index: int) -> bool:
            gpus = placed.get((owner, index))
            return gpus is not None and (not wanted or bool(gpus & wanted))

        plans: list[tuple[str, int, HeldPod | None]] = []
        for job, reservation in self._reservations.items():
            plans += [(job, a.pod, None) for a in reservation.placement.assignments
                      if a.pod in reservation.held and a.pod not in reservation.pending and a.node == intruder.node
                      and job != intruder.owner and in_the_way(job, a.pod)]
        plans += [(h.owner, h.index, h) for h in self._pods.values()
                  if h.node == intruder.node and not h.bound and h.owner != intruder.owner
                  and h.uid not in self._unplaced and h.uid not in self._displaced_pods
                  and in_the_way(h.owner, h.index)]
        with snap.what_if():
            for job, index, _ in plans:
                snap.release(job, index)
            try:
                self._allocate_pod(snap, intruder)
            except AllocationError as exc:
                log.warning("pod %s on %s does not fit even without the plans in its way (%s); none displaced",
                            intruder.key, intruder.node, exc)
                return
        for job, index, pod in plans:
            snap.release(job, index)
            if pod is None:
                reservation = self._reservations[job]
                reservation.held.discard(index)
                if not reservation.held:
                    del self._reservations[job]
            self._record_displacement(job, index, intruder, pod)
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
            # Only the facts that can clash are set aside: a quarantined node's unhealthy GPUs stay so.
            status = self._gpunodes.get(name)
            return self._node_info(name, without_fabric_facts(status) if status is not None else None)

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


def _same_slots(ours: Sequence[PodAssignment], recorded: Sequence[PodAssignment]) -> bool:
    """The same pods on the same nodes and GPUs (scores and domain names aside)."""
    def key(a: PodAssignment) -> tuple[int, str, tuple[int, ...], int]:
        return a.pod, a.node, tuple(a.gpus), a.gpu_milli
    return sorted(map(key, ours)) == sorted(map(key, recorded))
