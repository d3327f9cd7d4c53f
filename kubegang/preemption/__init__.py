"""Gang-granular, placement-aware preemption.

Public API::

    Candidate(gang_id, priority, start_time)      a gang that policy allows to evict
    plan_preemption(gang, snapshot, candidates)   -> PreemptionPlan | None
    PreemptionPlan(victims, gpus_evicted, placement)
"""

from kubegang.preemption._planner import Candidate, PreemptionPlan, plan_preemption

__all__ = ["Candidate", "PreemptionPlan", "plan_preemption"]
