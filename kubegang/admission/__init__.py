"""The admission cycle: who runs next, in one piece of pure code the operator and the simulator share.

``AdmissionCycle.schedule`` walks the queue heads (fair share, quota up the tree, placement, one
victim chooser, backfill reservation) and yields every placement question and action as an effect;
``run_async`` (the operator: gRPC and API writes) or ``run_sync`` (the simulator) answers them.
"""

from kubegang.admission._cycle import (
    BACKOFF_FIRST_SECONDS,
    BACKOFF_MAX_SECONDS,
    AdmissionCycle,
    Cycle,
    CycleSettings,
    run_async,
    run_sync,
)
from kubegang.admission._ports import QuotaPort
from kubegang.admission._types import (
    Admit,
    AdmitResult,
    Effect,
    Entry,
    Evict,
    Plan,
    PlanAnswer,
    Preemptible,
    Release,
    Reserve,
    Verdict,
    WaitReason,
    WhatIf,
    WhatIfAnswer,
    Workload,
    quota_verdict,
)

__all__ = [
    "BACKOFF_FIRST_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "AdmissionCycle",
    "Admit",
    "AdmitResult",
    "Cycle",
    "CycleSettings",
    "Effect",
    "Entry",
    "Evict",
    "Plan",
    "PlanAnswer",
    "Preemptible",
    "QuotaPort",
    "Release",
    "Reserve",
    "Verdict",
    "WaitReason",
    "WhatIf",
    "WhatIfAnswer",
    "Workload",
    "quota_verdict",
    "run_async",
    "run_sync",
]
