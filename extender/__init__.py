"""kubegang's scheduler extender: the single placement authority (see docs/extender.md).

A thin protocol layer (kube-scheduler's extender verbs over HTTPS, the Placement gRPC service)
over one pure :class:`Ledger`, which a watch feed keeps in step with the API server.

Public API::

    Ledger                                 the GPU ledger; SchedulerAuthority + PlacementAuthority
    SchedulerAuthority, PlacementAuthority the seams the adapters call
    PlacementClient, channel_credentials   the operator's async gRPC client
    ExtenderSettings, run_extender         run a whole extender in-process
    render_scheduler_config, SchedulerConfigValues   the one KubeSchedulerConfiguration
    NODE_ANNOTATION, GPUS_ANNOTATION, JOB_UID_LABEL, POD_INDEX_LABEL   the pod contract
    api_placement, core_placement          status.placement <-> the core's Placement
"""

from kubegang.extender._admitted import api_placement, core_placement
from kubegang.extender._authority import (
    FilterVerdict,
    PlacementAuthority,
    ReserveOutcome,
    SchedulerAuthority,
    WhatIfOutcome,
)
from kubegang.extender._ledger import Ledger
from kubegang.extender._pods import (
    GPU_RESOURCE,
    GPUS_ANNOTATION,
    JOB_UID_LABEL,
    NODE_ANNOTATION,
    POD_INDEX_LABEL,
    PodDemand,
    format_gpu_indices,
    pod_demand,
)
from kubegang.extender._runtime import RunningExtender, run_extender
from kubegang.extender._settings import ExtenderSettings
from kubegang.extender.client import PlacementClient, channel_credentials
from kubegang.extender.scheduler_config import SchedulerConfigValues, render_scheduler_config

__all__ = [
    "GPUS_ANNOTATION",
    "GPU_RESOURCE",
    "JOB_UID_LABEL",
    "NODE_ANNOTATION",
    "POD_INDEX_LABEL",
    "ExtenderSettings",
    "FilterVerdict",
    "Ledger",
    "PlacementAuthority",
    "PlacementClient",
    "PodDemand",
    "ReserveOutcome",
    "RunningExtender",
    "SchedulerAuthority",
    "SchedulerConfigValues",
    "WhatIfOutcome",
    "api_placement",
    "channel_credentials",
    "core_placement",
    "format_gpu_indices",
    "pod_demand",
    "render_scheduler_config",
    "run_extender",
]
