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
