"""The vocabulary of the admission cycle: answers of its ports, the effects it asks its driver to
carry out, and the typed outcome it gives each job.

Generic in the job type ``J`` and the placement type ``P``: the operator drives the cycle with its
``JobView`` and the API's ``Placement``; the simulator with its own jobs and the core's placement.
The cycle reads only the few attributes of :class:`Workload`; everything else goes through ports.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from kubegang.quota import Decision, Ok, Unschedulable


class Workload(Protocol):
    """What the cycle itself reads of a job (the ports know the rest)."""

    @property
    def uid(self) -> str:
        """Identity: the key of quota, reservations and every map the cycle keeps."""
        ...

    @property
    def key(self) -> str:
        """``namespace/name``, for messages."""
        ...

    @property
    def queue(self) -> str:
        """The leaf queue it waits in."""
        ...

    @property
    def generation(self) -> int:
        """Spec generation: a new one retries a job found Unschedulable or failing."""
        ...

    @property
    def excluded_nodes(self) -> frozenset[str]:
        """Nodes never to place it on (where an earlier attempt failed to bind)."""
        ...

    @property
    def previous_domain(self) -> str | None:
        """Where it last ran (preferred again)."""
        ...

    @property
    def requests_gpus(self) -> bool:
        """Whether its pods ask for any GPU (whole or a share)."""
        ...

    @property
    def time_limit(self) -> float | None:
        """Seconds it may run once started (the user's limit, Slurm's ``--time``); None: none given.
        Backfill plans with it: it may run on another job's reserved nodes if it ends in time."""
        ...


J = TypeVar("J", bound=Workload)
P = TypeVar("P")


class AdmitResult(enum.StrEnum):
    """What one admission attempt ended in."""

    ADMITTED = "Admitted"
    QUEUED = "Queued"
    UNSCHEDULABLE = "Unschedulable"
    PREEMPTING = "Preempting"
    ERROR = "Error"


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
    QUEUE_INACTIVE = "QueueInactive"
    """spec.queue names a GPUQueue left out of the quota tree (its parent does not exist, its parents
    form a cycle): the queue's Active condition says why."""
    NOT_A_LEAF_QUEUE = "NotALeafQueue"
    """spec.queue names a queue with children; jobs enter leaves only."""
    NAMESPACE_NOT_SERVED = "NamespaceNotServed"
    """The queue's spec.namespaces does not list the job's namespace."""
    EXCEEDS_CLUSTER = "ExceedsCluster"
    """A pod asks for more GPUs than any node of its flavour has, or the gang more than any domain of
    its required level could hold with every GPU free: it cannot fit until the cluster changes (tried
    every cycle, unlike the reasons the queue tree decides)."""
    NO_GPUS_REQUESTED = "NoGPUsRequested"
    """The job asks for no GPU at all: kubegang places GPU gangs."""
    GANG_DISPLACED = "GangDisplaced"
    """Pods kubegang did not place took GPUs of the gang's slots and no other place was found near
    the rest of it: the gang is requeued whole (the message names the pods)."""
    INVALID_SPEC = "InvalidSpec"
    """A field the API server let through (inside the pod template, or written without the schema) that
    the operator cannot act on; the message names it. Never admitted until the job is edited."""
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    """spec.priorityClassName names no PriorityClass: the API server would refuse the gang's pods, so it
    is not admitted (nor preempts) until the class is created or the field is changed."""
    ADMISSION_ERROR = "AdmissionError"
    """Handling this job failed (a bug, a refused write); it is retried with backoff, others go on."""
    WAITING_FOR_PODS = "WaitingForPods"
    """A pod group's (labelled or native PodGroup) controller has not made every pod of the gang yet: it is
    admitted once all of them exist. The message names the group, the label or field its size is read
    from, and how many pods are missing."""
    PREVIOUS_PODS_TERMINATING = "PreviousPodsTerminating"
    """Pods of an earlier attempt of the gang are still there past their deletion grace period (a
    finalizer holds them, or their node does not confirm they stopped): the gang is not placed again until
    they are gone, since they may still hold its GPUs and its pods' names. The message names them and why."""
    RESIZED = "Resized"
    """The gang's shape (``spec.replicas``, the GPUs per replica) was edited while it held an admission:
    the whole gang is requeued at its new size. Not a restart: ``restartLimit`` is not spent."""


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
    """The condition reason when it is no (None: the cycle's default for the step)."""


def quota_verdict(decision: Decision) -> Verdict:
    """The cycle's answer for a quota tree's ``Decision`` (``Unschedulable`` is never, and says so)."""
    if isinstance(decision, Ok):
        return Verdict(True)
    never = isinstance(decision, Unschedulable)
    return Verdict(False, decision.reason, never=never, cause=WaitReason.EXCEEDS_QUEUE_CAPACITY if never else None)


@dataclasses.dataclass(frozen=True)
class PlanAnswer(Generic[P]):
    """The placement port's answer to :class:`Plan`: a placement, or the reason there is none."""

    placement: P | None
    """The placement when the gang fits now."""
    reason: str = ""
    """Why it does not fit (for the Queued condition)."""
    never: bool = False
    """True when no node of the cluster as it is could ever hold the gang."""
    room: int | None = None
    """The placement side's room epoch when it answered (:attr:`AdmissionCycle.schedule`'s ``room``): a
    refusal stays true while that epoch is unchanged, so the cycle answers the same question again
    from memory instead of asking. None: the port keeps no epoch (every refusal is asked again)."""


@dataclasses.dataclass(frozen=True)
class WhatIfAnswer:
    """The placement port's answer to :class:`WhatIf`."""

    victims: tuple[str, ...] | None
    """UIDs of the smallest set of the candidates whose eviction, with :attr:`WhatIf.gone` gone,
    makes the gang placeable (``()``: placeable already, or by ``gone`` alone), or None when evicting
    all of them too would not be enough."""
    nodes: frozenset[str] = frozenset()
    """The nodes the gang would be placed on after those evictions (and ``gone``)."""


@dataclasses.dataclass(frozen=True)
class Preemptible(Generic[J]):
    """A running gang the quota policy allows a waiting job to evict, and why."""

    job: J
    """The gang that may be evicted."""
    why: str
    """The policy that allows it, as the victim's condition will say ("to reclaim nominal quota")."""


# -- effects: what the cycle asks its driver to do (the only I/O of an admission) ---------------------
@dataclasses.dataclass(frozen=True)
class Plan(Generic[J]):
    """Where would the whole gang go now? Answer: :class:`PlanAnswer`."""

    job: J
    excluded_nodes: frozenset[str]
    preferred_domain: str | None


@dataclasses.dataclass(frozen=True)
class Reserve(Generic[J, P]):
    """Hold ``placement`` for the gang until its pods exist. Answer: :class:`Verdict`."""

    job: J
    placement: P


@dataclasses.dataclass(frozen=True)
class WhatIf(Generic[J]):
    """Which of ``candidates``, gone (on top of ``gone``), make the gang placeable? Changes nothing.
    Answer: :class:`WhatIfAnswer`."""

    job: J
    candidates: tuple[J, ...]
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes it may not be placed on (as ``Plan``'s: reserved or claimed for others): room freed there
    would not let it run."""
    gone: tuple[J, ...] = ()
    """Gangs taken as gone before choosing (evicted in any case: the preemptor's quota victims), never
    victims themselves: the answer is the cheapest set of ``candidates`` to evict *on top of them*
    (``()`` when they alone free a place). Without it the planner, which picks the fewest GPUs among
    what it is offered, chose gangs whose room these free anyway. Disjoint from ``candidates``."""


@dataclasses.dataclass(frozen=True)
class Release(Generic[J]):
    """Drop the placement the gang holds, if any (an attempt that failed). Answer: None."""

    job: J


@dataclasses.dataclass(frozen=True)
class Evict(Generic[J]):
    """Evict ``victim`` whole for ``preemptor`` and requeue it (its quota is given back). Answer: None."""

    victim: J
    preemptor: J
    why: str


@dataclasses.dataclass(frozen=True)
class Admit(Generic[J, P]):
    """The gang is admitted (quota taken, placement reserved): record it and start it. Answer: None."""

    job: J
    placement: P


Effect = Plan[J] | Reserve[J, P] | WhatIf[J] | Release[J] | Evict[J] | Admit[J, P]


@dataclasses.dataclass(frozen=True)
class Entry(Generic[J, P]):
    """The typed outcome of one job in one cycle."""

    job: J
    """The job as tried (its flavour option when one was chosen)."""
    result: AdmitResult
    """Admitted, Queued, Unschedulable, Preempting or Error."""
    reason: WaitReason | None = None
    """The condition reason when not admitted."""
    message: str = ""
    """What the job's condition says."""
    placement: P | None = None
    """Where it was admitted."""
    victims: Sequence[J] = ()
    """The gangs it evicted (Preempting)."""
    reservation: frozenset[str] = frozenset()
    """Nodes reserved for it (backfill) while it waits for them to drain."""
