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
from kubegang.extender._authority import Displacement

PlanResult = PlanAnswer[Placement]
"""The extender's answer to Plan, in the API's placement type."""

__all__ = ["PlanResult", "RepairResult", "Verdict", "WaitReason"]


@dataclasses.dataclass(frozen=True)
class RepairResult:
    """The extender's answer to Repair."""

    placement: Placement | None
    """The whole gang's placement now; None when the moved slots fit nowhere (or no answer came)."""
    moved: tuple[Displacement, ...] = ()
    """Slots that moved (empty: nothing was displaced)."""
    reason: str = ""
    """Why there is no placement."""
