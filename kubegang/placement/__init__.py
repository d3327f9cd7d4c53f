"""The gang placement engine: where a whole gang fits, on a transactional snapshot.

Public API::

    GangRequest, Toleration, MILLI          what a gang asks for
    Snapshot, Allocation, Checkpoint         cluster state with checkpoint / rollback / commit
    plan(gang, snapshot) -> Placement | Unplaceable
    feasible_nodes, node_score, node_scores  the extender's filter / prioritize helpers
    TaskShape, WorkloadMix                   the pod mix fragmentation is measured against (FGD)
    largest_placeable                        fragmentation metric per level
    fill_random                              random background load (benchmarks, tests)
    choose_gpus, wiring_of, GpuWiring        which GPUs of a node a pod gets (NVLink, PCIe, NUMA)
"""

from kubegang.placement._fit import node_reason, pods_fit
from kubegang.placement._fragmentation import DEFAULT_MIX, TaskShape, WorkloadMix
from kubegang.placement._gpus import GpuWiring, choose_gpus, wiring_of
from kubegang.placement._metrics import largest_placeable
from kubegang.placement._occupancy import fill_random
from kubegang.placement._plan import explain_node, plan
from kubegang.placement._request import MILLI, GangRequest, Toleration
from kubegang.placement._result import Placement, PlanResult, PodAssignment, Unplaceable
from kubegang.placement._single import MAX_SCORE, UNKNOWN_NODE, feasible_nodes, node_score, node_scores
from kubegang.placement._snapshot import Allocation, AllocationError, Checkpoint, Snapshot

__all__ = [
    "DEFAULT_MIX",
    "MAX_SCORE",
    "MILLI",
    "UNKNOWN_NODE",
    "Allocation",
    "AllocationError",
    "Checkpoint",
    "GangRequest",
    "GpuWiring",
    "Placement",
    "PlanResult",
    "PodAssignment",
    "Snapshot",
    "TaskShape",
    "Toleration",
    "Unplaceable",
    "WorkloadMix",
    "choose_gpus",
    "explain_node",
    "feasible_nodes",
    "fill_random",
    "largest_placeable",
    "node_reason",
    "node_score",
    "node_scores",
    "plan",
    "pods_fit",
    "wiring_of",
]
