"""Small value types the operator's modules pass between them.

The admission vocabulary (``Verdict``, ``WaitReason``, ``PlanAnswer``) is the core's
(``kubegang.admission``); the adapters (``_quota_book``, ``_extender_placement``) translate to it. A
gang's placement is the API's own ``kubegang.api.Placement`` (what ``status.placement`` stores), from
the gRPC edge to the pods.
"""

from __future__ import annotations

import dataclasses

from kubegang.admission import PlanAnswer, Verdict, WaitReason
from kubegang.api import Placement

PlanResult = PlanAnswer[Placement]
"""The extender's answer to Plan, in the API's placement type."""

__all__ = ["Moved", "PlanResult", "RepairResult", "Verdict", "WaitReason"]


@dataclasses.dataclass(frozen=True)
class Moved:
    """A gang slot that had to move because a pod kubegang did not place took its GPUs."""

    index: int
    """The replica index."""
    node: str
    """The node it was planned on."""
    intruder: str
    """``namespace/name`` of the pod that holds those GPUs now."""


@dataclasses.dataclass(frozen=True)
class RepairResult:
    """The extender's answer to Repair."""

    placement: Placement | None
    """The whole gang's placement now; None when the moved slots fit nowhere (or no answer came)."""
    moved: tuple[Moved, ...] = ()
    """Slots that moved (empty: nothing was displaced)."""
    reason: str = ""
    """Why there is no placement."""
