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

from kubegang.extender._holds import HeldPod, Reservation, held_pod
from kubegang.extender._reservations import PlacementVerbs
from kubegang.extender._scheduler_verbs import SchedulerVerbs
from kubegang.placement import Snapshot

__all__ = ["HeldPod", "Ledger", "Reservation", "held_pod"]


class Ledger(SchedulerVerbs, PlacementVerbs):
    """Implements both :class:`SchedulerAuthority` (``_scheduler_verbs``) and :class:`PlacementAuthority`
    (``_reservations``) over one state (``_ledger_state``): three modules, one object, because
    "filter, then reserve" must see the same snapshot."""

    def placement_snapshot(self) -> Snapshot:
        """The core snapshot the verbs decide on, current (read it, never change it): ``kubectl gang
        nodes`` measures the largest placeable gang per level on the very state the extender places on."""
        return self._current()
