"""The three things the operator talks to, as small interfaces.

The admission cycle and the gang supervisor are written against these Protocols, so they are tested
with in-memory fakes and wired in production to the core quota tree (``_quota_book.QuotaBook``), the
extender's gRPC client (``_extender_placement.ExtenderPlacement``) and the Kubernetes API (``_kube.KubeApi``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kubegang.admission import QuotaPort as CycleQuotaPort
from kubegang.admission import WhatIfAnswer
from kubegang.api import Placement, QueueConditionReason
from kubegang.operator._cache import UnreadHolding
from kubegang.operator._job import JobView
from kubegang.operator._types import PlanResult, RepairResult, Verdict


@dataclasses.dataclass(frozen=True)
class QueueUsage:
    """What a GPUQueue's status reports."""

    usage: Mapping[str, float]
    """GPUs in use per flavour (admitted jobs of this queue and its descendants; fractions for shares)."""
    borrowed: Mapping[str, float]
    """GPUs used above nominal quota per flavour."""
    fair_share: float = 0.0
    """The queue's current (dominant) share, weighted."""


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """Why a GPUQueue is not in the quota tree (its ``Active`` condition)."""

    reason: QueueConditionReason
    message: str


class QuotaPort(CycleQuotaPort[JobView], Protocol):
    """Hierarchical quota: the admission cycle's quota port, plus what the operator's housekeeping needs."""

    def set_queues(self, queues: Sequence[Mapping[str, Any]]) -> list[str]:
        """Replace the tree with these GPUQueue objects; return the problems found (empty if valid)."""
        ...

    def record(self, job: JobView) -> bool:
        """Account a job that already holds an admission, without checking limits (rebuilds); True
        when it was not counted before."""
        ...

    def record_holder(self, holder: UnreadHolding) -> bool:
        """Count a holding job whose spec was never readable from its status (``ClusterCache.unread_holding``),
        without checking limits; True when it was not counted so before. It is no preemption candidate and
        not among the running jobs: the cycle cannot evict or plan around what it cannot read."""
        ...

    def release_holder(self, job_uid: str) -> bool:
        """Release ``job_uid`` if it is counted as such a holder; True when it was."""
        ...

    def begin_cycle(self) -> None:
        """A cycle starts: what the port keeps of the held gangs for the cycle's questions (their start,
        their priority) is read afresh."""
        ...

    def usage(self) -> Mapping[str, QueueUsage]:
        """Per-queue usage for GPUQueue status."""
        ...

    def finished_run(self, job: JobView, seconds: float) -> None:
        """``job`` succeeded ``seconds`` after it started: a run time for backfill's predictions."""
        ...

    @property
    def left_out(self) -> Mapping[str, LeftOut]:
        """GPUQueues the tree could not take, and why."""
        ...


class PlacementPort(Protocol):
    """The extender's Placement service: where a gang goes."""

    async def plan(self, job: JobView, *, excluded_nodes: frozenset[str], preferred_domain: str | None) -> PlanResult:
        """A placement for the whole gang now, or the reason there is none (with the room epoch it was
        refused at, :attr:`PlanAnswer.room`)."""
        ...

    async def room(self) -> int | None:
        """The extender's room epoch now, read once before each cycle (``AdmissionCycle.schedule``'s
        ``room``); None when it cannot be read (every ``Plan`` of that cycle is asked)."""
        ...

    async def reserve(self, job: JobView, placement: Placement) -> Verdict:
        """Hold ``placement`` for ``job`` (keyed by UID, TTL-bound until its pods exist)."""
        ...

    async def release(self, job_uid: str) -> None:
        """Drop the reservation of ``job_uid`` (no-op when there is none)."""
        ...

    async def repair(self, job: JobView) -> RepairResult:
        """Re-place (and hold) the slots of admitted ``job`` whose GPUs pods kubegang did not place took."""
        ...

    async def what_if(self, job: JobView, candidates: Sequence[JobView], *,
                      excluded_nodes: frozenset[str] = frozenset(), gone: Sequence[JobView] = ()) -> WhatIfAnswer:
        """The smallest set of ``candidates`` whose eviction, with the ``gone`` gangs gone too (evicted in
        any case, never victims), makes ``job`` placeable (``()`` when it is placeable already or by
        ``gone`` alone; None when evicting all of them would not be enough), and where it would go."""
        ...


class KubePort(Protocol):
    """The Kubernetes writes the operator makes."""

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create ``manifest``; True if created, False if it already existed (success either way)."""
        ...

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete a namespaced object (Pod, Service, ConfigMap, GPUJob); NotFound is success."""
        ...

    async def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch a namespaced object (Pod, RayCluster, GPUJob); False when it does not exist."""
        ...

    async def reserve_background(self) -> None:
        """Wait for, and take, one write of the background lane (used before a ``prepaid`` write)."""
        ...

    async def patch_job_status(
        self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False, resource_version: str | None = None
    ) -> str | None:
        """Merge-patch ``job``'s status subresource (urgent lane, unless ``reserve_background`` paid);
        with ``resource_version``, only if the job is still at that version (409 otherwise). Returns the
        job's new resourceVersion when the API said it."""
        ...

    async def patch_named_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch the status of a GPUJob the operator could not read into a ``JobView``
        (background lane: a report)."""
        ...

    async def patch_queue_status(self, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch a GPUQueue's status subresource (background lane: a report)."""
        ...

    async def event(self, job: JobView, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event on ``job`` (background lane; best effort: failures are logged, never raised)."""
        ...

    async def event_on(self, involved: Mapping[str, str], reason: str, message: str, *,
                       warning: bool = False) -> None:
        """Record an Event on any object (``involvedObject``: apiVersion, kind, name, namespace, uid)."""
        ...
