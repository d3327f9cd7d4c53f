"""Small value types the operator's modules pass between them.

They are the operator's vocabulary for quota and placement answers, so the admission cycle can be
written and tested against them while the adapters (``_quota_book``, ``_extender_placement``)
translate to and from the core and the extender. A gang's placement is the API's own
``kubegang.api.Placement`` (what ``status.placement`` stores), from the gRPC edge to the pods.
"""

from __future__ import annotations

import dataclasses

from kubegang.api import Placement


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A yes/no answer with the reason a human needs when it is no."""

    ok: bool
    """Whether the request can proceed."""
    reason: str = ""
    """Why not (empty when ok)."""
    never: bool = False
    """True when the answer cannot change while the queue tree stays as it is (Unschedulable)."""


@dataclasses.dataclass(frozen=True)
class PlanResult:
    """The extender's answer to Plan: a placement, or the reason there is none."""

    placement: Placement | None
    """The placement when the gang fits now."""
    reason: str = ""
    """Why it does not fit (for the Queued condition)."""
