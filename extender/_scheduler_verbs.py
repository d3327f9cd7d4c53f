"""kube-scheduler's extender verbs on the ledger: filter, prioritize, preempt (``SchedulerAuthority``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kubegang.extender._authority import FilterVerdict
from kubegang.extender._holds import _owner_and_index
from kubegang.extender._ledger_state import LedgerState
from kubegang.extender._pods import JOB_UID_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL, PodDemand
from kubegang.extender._wire import MAX_EXTENDER_PRIORITY
from kubegang.placement import (
    MILLI,
    UNKNOWN_NODE,
    GangRequest,
    Snapshot,
    feasible_nodes,
    node_reason,
    node_scores,
)


def _unpinned_reason(pod: PodDemand) -> str:
    kind, name = pod.source or ("", "")
    return (f"waits for kubegang to admit its gang ({kind} {name}) and pin it to a reserved slot "
            f"(annotation {NODE_ANNOTATION}); see the GPUJob that represents it")


class SchedulerVerbs(LedgerState):
    """Filter, prioritize and preempt for one pod over candidate nodes."""

    def filter(self, pod: PodDemand, nodes: Sequence[str]) -> FilterVerdict:
        """See :class:`SchedulerAuthority`."""
        snap = self._current()
        if not pod.holds_gpus:
            return FilterVerdict(passed=list(nodes))
        if pod.pinned_node is None and self.adopted(pod):
            return FilterVerdict(passed=[], unresolvable=dict.fromkeys(nodes, _unpinned_reason(pod)))
        if pod.pinned_node is not None:
            return self._filter_pinned(snap, pod, nodes)
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
        if pod.pinned_node is None and self.adopted(pod):
            return kept  # it waits for its gang's admission: nothing is evicted for one pod of it
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
                if a.pod in reservation.held and a.pod not in reservation.pending and a.node in failed:
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
        holder = self._pods.get(self._by_slot.get((owner, index), ""))
        if pod.uid and holder is not None and holder.uid != pod.uid:
            return (f"pod {index} of job {owner} is {holder.key}; this pod carries the same labels "
                    f"{JOB_UID_LABEL} and {POD_INDEX_LABEL} (a copy)")
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

