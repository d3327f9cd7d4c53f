"""A trace-driven discrete-event simulator over kubegang's production core.

Public API::

    load_cluster(name_or_path, limit=None) -> Cluster     a shape from hack/shapes, compiled
    GangWorkload, generate(...) -> list[Job]              multi-node gang workloads (documented)
    Policy, Step, simulate(policy, cluster, jobs)         the engine
    KubegangPolicy, DefaultSchedulerModel, GangBinpackModel,
    VolcanoHyperNodeModel, SlurmTreeModel                 the policies compared
    narrowest_level                                       the neutral narrowest-domain judge
    POLICIES                                              name -> factory
    openb: load_tasks, inflate, replay, OPENB_POLICIES    the FGD paper's workload-inflation experiment
"""

from collections.abc import Callable

from ._baselines import (
    RENDEZVOUS_TIMEOUT_S,
    DefaultSchedulerModel,
    GangBinpackModel,
    SlurmTreeModel,
    VolcanoHyperNodeModel,
    tree_select,
)
from ._cluster import Cluster, load_cluster, shape_nodes
from ._engine import Policy, RunResult, Step, Wrapped, simulate
from ._kubegang import KubegangPolicy
from ._metrics import RunMetrics, gang_request, percentile
from ._oracle import narrowest_level
from ._workload import (
    KALOS_SIZES,
    PHILLY_SIZES,
    GangWorkload,
    Job,
    benchmark_spec,
    for_cluster,
    generate,
    offered_load,
    round_up_limit,
    size_stats,
)

POLICIES: dict[str, Callable[[], Policy]] = {
    "kubegang": KubegangPolicy,
    "default-scheduler": DefaultSchedulerModel,
    "gang-binpack": GangBinpackModel,
    "volcano-hypernode": VolcanoHyperNodeModel,
    "slurm-tree": SlurmTreeModel,
}
"""The policies compared on gang workloads, by name. Every one orders jobs by priority then arrival
in one queue: kubegang runs with a single GPUQueue (no fair share), as the models have none."""

__all__ = [
    "KALOS_SIZES",
    "PHILLY_SIZES",
    "POLICIES",
    "RENDEZVOUS_TIMEOUT_S",
    "Cluster",
    "DefaultSchedulerModel",
    "GangBinpackModel",
    "GangWorkload",
    "Job",
    "KubegangPolicy",
    "Policy",
    "RunMetrics",
    "RunResult",
    "SlurmTreeModel",
    "Step",
    "VolcanoHyperNodeModel",
    "Wrapped",
    "benchmark_spec",
    "for_cluster",
    "gang_request",
    "generate",
    "load_cluster",
    "narrowest_level",
    "offered_load",
    "percentile",
    "round_up_limit",
    "shape_nodes",
    "simulate",
    "size_stats",
    "tree_select",
]
