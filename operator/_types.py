"""Small value types the operator's modules pass between them.

They are the operator's vocabulary for quota and placement answers, so the admission cycle can be
written and tested against them while the adapters (``_quota_book``, ``_extender_placement``)
translate to and from the core and the extender. A gang's placement is the API's own
``kubegang.api.Placement`` (what ``status.placement`` stores), from the gRPC edge to the pods.
"""

from __future__ import annotations

import dataclasses
import enum

from kubegang.api import Placement


class WaitReason(enum.StrEnum):
    """Why a job is not admitted: the ``reason`` of its Queued or Unschedulable condition.

    Decisions branch on these, never on message text; the message says the numbers.
    """

    WAITING_IN_QUEUE = "WaitingInQueue"
    """Behind other jobs of its queue (not tried this cycle)."""
    QUOTA_EXHAUSTED = "QuotaExhausted"
    """Quota up the tree is used by others now."""
    INSUFFICIENT_GPUS = "InsufficientGPUs"
    """Quota allows it, but no domain has the free GPUs now."""
    RESERVATION_FAILED = "ReservationFailed"
    """The planned GPUs were taken before they could be reserved."""
    PREEMPTING = "Preempting"
    """Evicting lower-priority or borrowing gangs to make room; its queue waits for it."""
    EXCEEDS_QUEUE_CAPACITY = "ExceedsQueueCapacity"
    """More than the queue could ever hold, even with every other queue idle."""
    QUEUE_NOT_FOUND = "QueueNotFound"
    """spec.queue names no GPUQueue."""
    NOT_A_LEAF_QUEUE = "NotALeafQueue"
    """spec.queue names a queue with children; jobs enter leaves only."""
    NAMESPACE_NOT_SERVED = "NamespaceNotServed"
    """The queue's spec.namespaces does not list the job's namespace."""
    NO_NODE_LARGE_ENOUGH = "NoNodeLargeEnough"
    """A pod asks for more GPUs than any node of its flavour has, or the gang more than any domain
    of its required level: it cannot fit until the cluster changes."""
    NO_GPUS_REQUESTED = "NoGPUsRequested"
    """The job asks for no GPU at all (gpusPerReplica 0, no limit, no gpuFraction): kubegang places
    GPU gangs; such pods need no gang reservation."""
    GANG_DISPLACED = "GangDisplaced"
    """Pods kubegang did not place took GPUs of the gang's slots and no other place was found near the
    rest of it: the gang is requeued whole (the message names the pods)."""
    ADMISSION_ERROR = "AdmissionError"
    """Handling this job failed (a bug, a refused write); it is retried with backoff, others go on."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A yes/no answer with the reason a human needs when it is no."""

    ok: bool
    """Whether the request can proceed."""
    reason: str = ""
    """Why not (empty when ok)."""
    never: bool = False
    """True when the answer cannot change while the queue tree stays as it is (Unschedulable)."""
    cause: WaitReason | None = None
    """The condition reason when it is no (None: the caller's default for this step)."""


@dataclasses.dataclass(frozen=True)
class PlanResult:
    """The extender's answer to Plan: a placement, or the reason there is none."""

    placement: Placement | None
    """The placement when the gang fits now."""
    reason: str = ""
    """Why it does not fit (for the Queued condition)."""
    never: bool = False
    """True when no node or domain of the cluster as it is could ever hold the gang."""


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
