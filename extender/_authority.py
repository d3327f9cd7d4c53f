"""The interface between the protocol adapters and the placement authority behind them.

The HTTPS verbs (:mod:`._http`) and the gRPC service (:mod:`._grpc`) only translate wire formats;
every decision is made by an object satisfying these protocols (the :class:`~._ledger.Ledger` in
production, small fakes in adapter tests). Keeping the seam here means the adapters are tested for
what they do (parse, validate, answer, count) without a cluster, and the ledger is tested for what
it decides without a socket.

Calls are synchronous on purpose: decisions are in-memory and sub-millisecond, and a single thread
of mutation (the event loop) is what makes "filter, then reserve" free of races.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubegang.extender._pods import PodDemand
from kubegang.placement import GangRequest, Placement, PlanResult


@dataclass(frozen=True)
class FilterVerdict:
    """Outcome of ``filter`` for one pod over candidate nodes."""

    passed: list[str]
    """Nodes the pod may go to, in the order they were given."""
    failed: dict[str, str] = field(default_factory=dict)
    """Node -> reason, where preemption might help (GPUs taken by lower-priority pods)."""
    unresolvable: dict[str, str] = field(default_factory=dict)
    """Node -> reason, where preemption cannot help (not the planned node, no such GPUs)."""


class SchedulerAuthority(Protocol):
    """What kube-scheduler's extender verbs ask. Implemented by the ledger."""

    def filter(self, pod: PodDemand, nodes: Sequence[str]) -> FilterVerdict:
        """Which of ``nodes`` can take ``pod`` now, and why not for the others."""
        ...

    def prioritize(self, pod: PodDemand, nodes: Sequence[str]) -> list[tuple[str, int]]:
        """A score 0..10 per node (higher is better), for every node given."""
        ...

    def preempt(self, pod: PodDemand, candidates: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """Filter kube-scheduler's victim sets (node -> victim pod UIDs).

        Returns the nodes still usable with the victims to evict there; a node whose set would
        break a gang without taking the whole gang is dropped.
        """
        ...

    def snapshot(self) -> dict[str, Any]:
        """The ledger as JSON-ready data, for ``/debug/snapshot`` and offline replay."""
        ...


@dataclass(frozen=True)
class ReserveOutcome:
    """Answer to Reserve: the placement now held, or why none is."""

    result: PlanResult
    """``Placement`` when reserved, ``Unplaceable`` (with the reason) when not."""
    expires_at: float = 0.0
    """Unix time at which the reservation lapses if no pod claims it (0 when not reserved)."""


@dataclass(frozen=True)
class Displacement:
    """A slot of a gang whose planned GPUs a pod kubegang did not place took (an intruder)."""

    index: int
    """The gang's pod index."""
    node: str
    """Where the slot was planned."""
    intruder: str
    """``namespace/name`` of the pod that holds those GPUs now."""


@dataclass(frozen=True)
class RepairOutcome:
    """Answer to Repair: the gang's placement with its displaced slots placed again, or why not."""

    result: PlanResult
    """The whole gang's ``Placement`` (unchanged when nothing was displaced), or ``Unplaceable`` when
    the displaced slots fit nowhere within the gang's required level (requeue the gang whole)."""
    displaced: tuple[Displacement, ...] = ()
    """The slots that had to move, with who took their GPUs."""


@dataclass(frozen=True)
class WhatIfOutcome:
    """Answer to WhatIf."""

    victims: tuple[str, ...]
    """Job UIDs to evict, a subset of the candidates in their order (empty when infeasible)."""
    result: PlanResult
    """Where the gang would go after those evictions, or why not even all candidates suffice."""


class PlacementAuthority(Protocol):
    """What the operator asks over gRPC. Implemented by the ledger.

    Gangs are the core's :class:`~kubegang.placement.GangRequest` (``id`` is the GPUJob UID) and
    answers the core's ``Placement | Unplaceable``: the adapter only translates them.
    """

    def plan(self, gang: GangRequest) -> PlanResult:
        """Where would the gang go now; changes nothing."""
        ...

    def reserve(self, gang: GangRequest, placement: Placement | None, ttl_seconds: float) -> ReserveOutcome:
        """Hold ``placement`` (or a fresh plan when None) for the gang; idempotent per gang id."""
        ...

    def release(self, job_uid: str) -> int:
        """Drop the gang's in-memory reservation; returns the whole GPUs freed (0: none held)."""
        ...

    def repair(self, gang: GangRequest, ttl_seconds: float) -> RepairOutcome:
        """Place again the slots of ``gang`` that intruders displaced, near its other pods, and hold them."""
        ...

    def what_if(self, gang: GangRequest, candidates: Sequence[str], gone: Sequence[str] = ()) -> WhatIfOutcome:
        """Smallest set of ``candidates`` (in their order) whose eviction makes the gang fit once the
        ``gone`` gangs (evicted in any case) are gone too; none of ``gone`` is ever a victim."""
        ...

    def room(self) -> int:
        """The room epoch: moved by every change that can free room, so a ``plan`` refused at an epoch is
        refused again while the epoch is unchanged (never 0)."""
        ...
