"""Hierarchical GPU quotas: the queue tree, fair-share admission order and preemption policy.

Pure accounting, no Kubernetes: the operator converts GPUQueue objects into ``QueueSpec`` values,
builds a ``QuotaTree``, keeps pending jobs in ``PendingQueues``, lets ``Backfill`` say which blocked
heads step aside or reserve their nodes, asks ``candidates_for`` whom a waiting job may evict and
``quota_victims`` which of those quota needs gone; ``RunTimeHistory`` predicts run times from
finished gangs for backfill.
Semantics and examples: docs/quota.md.
"""

from kubegang.quota._backfill import (
    DEFAULT_PLANNED_RESERVE_AFTER_SECONDS,
    DEFAULT_RESERVE_AFTER_SECONDS,
    Backfill,
    BackfillPolicy,
    BackfillReservation,
    QueueingStrategy,
)
from kubegang.quota._candidates import (
    Candidate,
    CandidateReason,
    RunningJob,
    candidates_for,
    fits_after_eviction,
    quota_victims,
)
from kubegang.quota._decision import Decision, Ok, Refusal, Shortfall, Unschedulable
from kubegang.quota._fairshare import dominant_share, share_path
from kubegang.quota._pending import PendingJob, PendingQueues, QueueLanes, Rank, admission_order, leaf_heads
from kubegang.quota._position import QueuePosition, queue_positions
from kubegang.quota._runtime import RunClass, RunTimeHistory
from kubegang.quota._spec import (
    MIG_FLAVOR_PREFIX,
    BorrowWithinParent,
    FlavorQuota,
    PreemptionPolicy,
    ProblemKind,
    QueueSpec,
    QuotaSpecError,
    ReclaimFromBorrowers,
    SpecProblem,
    WithinQueue,
    is_mig_flavor,
    some_named,
    validate_specs,
)
from kubegang.quota._tree import BindingLimit, FairSharing, LimitKind, QueueNames, QueueStatus, QuotaTree

__all__ = [
    "DEFAULT_PLANNED_RESERVE_AFTER_SECONDS",
    "DEFAULT_RESERVE_AFTER_SECONDS",
    "MIG_FLAVOR_PREFIX",
    "Backfill",
    "BackfillPolicy",
    "BackfillReservation",
    "BindingLimit",
    "BorrowWithinParent",
    "Candidate",
    "CandidateReason",
    "Decision",
    "FairSharing",
    "FlavorQuota",
    "LimitKind",
    "Ok",
    "PendingJob",
    "PendingQueues",
    "PreemptionPolicy",
    "ProblemKind",
    "QueueLanes",
    "QueueNames",
    "QueuePosition",
    "QueueSpec",
    "QueueStatus",
    "QueueingStrategy",
    "QuotaSpecError",
    "QuotaTree",
    "Rank",
    "ReclaimFromBorrowers",
    "Refusal",
    "RunClass",
    "RunTimeHistory",
    "RunningJob",
    "Shortfall",
    "SpecProblem",
    "Unschedulable",
    "WithinQueue",
    "admission_order",
    "candidates_for",
    "dominant_share",
    "fits_after_eviction",
    "is_mig_flavor",
    "leaf_heads",
    "queue_positions",
    "quota_victims",
    "share_path",
    "some_named",
    "validate_specs",
]
