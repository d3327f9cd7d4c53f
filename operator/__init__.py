"""kubegang operator: GPUJobs become all-or-nothing pod groups under hierarchical GPU quotas.

Layers, each with one job: watches feed a cache (``_watches``, ``_cache``); the leader (``_leader``)
runs one loop (``_controller``) of admission (``_admission``) and gang supervision (``_supervisor``,
rules in ``_lifecycle``); pure builders make the pods (``_gang_objects``) and conditions
(``_conditions``); adapters reach quota (``_quota_book``), the extender (``_extender_placement``) and
Kubernetes (``_kube``). See docs/operator.md.
"""

from kubegang.operator._admission import Admission, Outcome
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import CondType, Phase, set_condition, transition
from kubegang.operator._controller import Controller
from kubegang.operator._gang_objects import SCHEDULER_NAME, GangObjects, build_gang
from kubegang.operator._job import JobSpecError, JobView, job_view
from kubegang.operator._leader import LeaderElector, may_acquire
from kubegang.operator._lifecycle import Action, Decision, PodState, decide
from kubegang.operator._ports import Candidate, KubePort, PlacementPort, QueueUsage, QuotaPort
from kubegang.operator._settings import OperatorSettings
from kubegang.operator._supervisor import Supervisor
from kubegang.operator._types import GangPlacement, PlanResult, PodSlot, Verdict
from kubegang.podcontract import GPUS_ANNOTATION, JOB_NAME_LABEL, JOB_UID_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL

__all__ = [
    "GPUS_ANNOTATION",
    "JOB_NAME_LABEL",
    "JOB_UID_LABEL",
    "NODE_ANNOTATION",
    "POD_INDEX_LABEL",
    "SCHEDULER_NAME",
    "Action",
    "Admission",
    "Candidate",
    "ClusterCache",
    "CondType",
    "Controller",
    "Decision",
    "GangObjects",
    "GangPlacement",
    "JobSpecError",
    "JobView",
    "KubePort",
    "LeaderElector",
    "OperatorSettings",
    "Outcome",
    "Phase",
    "PlacementPort",
    "PlanResult",
    "PodSlot",
    "PodState",
    "QueueUsage",
    "QuotaPort",
    "Supervisor",
    "Verdict",
    "build_gang",
    "decide",
    "job_view",
    "may_acquire",
    "set_condition",
    "transition",
]
