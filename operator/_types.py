"""Small value types the operator's modules pass between them.

They are the operator's own vocabulary for a gang's placement and for quota and placement answers, so
the admission cycle can be written and tested against them while the adapters (``_quota_book``,
``_extender_placement``) translate to and from the core and the extender.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class PodSlot:
    """Where one replica of a gang goes."""

    index: int
    """Replica index (0 is the torchrun master / MPI launcher)."""
    node: str
    """The planned node, enforced by the extender's filter and a required node affinity."""
    gpus: tuple[int, ...] = ()
    """GPU indices on that node, when the extender assigns them."""


@dataclasses.dataclass(frozen=True)
class GangPlacement:
    """A whole gang's placement: one slot per replica."""

    slots: tuple[PodSlot, ...]
    """Slots ordered by replica index."""
    domain: str | None = None
    """The narrowest topology domain that holds the gang (preferred again on a restart)."""
    level: str | None = None
    """That domain's level name (node, nvlink, leaf, ...)."""

    @property
    def nodes(self) -> frozenset[str]:
        """Every node the gang uses."""
        return frozenset(slot.node for slot in self.slots)

    def to_status(self) -> dict[str, Any]:
        """The form stored in GPUJob ``status.placement``."""
        return {
            "level": self.level,
            "domain": self.domain,
            "pods": [{"index": s.index, "node": s.node, "gpus": list(s.gpus)} for s in self.slots],
        }

    @classmethod
    def from_status(cls, value: Mapping[str, Any]) -> GangPlacement:
        """The placement recorded by :meth:`to_status`; ValueError names what is malformed."""
        pods = value.get("pods")
        if not isinstance(pods, Sequence):
            raise ValueError("status.placement.pods must be a list")
        slots = []
        for pod in pods:
            try:
                slots.append(PodSlot(index=int(pod["index"]), node=str(pod["node"]), gpus=tuple(pod.get("gpus") or ())))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"status.placement.pods entry is malformed: {pod!r}") from None
        return cls(
            slots=tuple(sorted(slots, key=lambda s: s.index)),
            domain=value.get("domain"),
            level=value.get("level"),
        )


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

    placement: GangPlacement | None
    """The placement when the gang fits now."""
    reason: str = ""
    """Why it does not fit (for the Queued condition)."""
