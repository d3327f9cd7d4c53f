"""kubegang's Kubernetes API (group ``kubegang.io``, version ``v1alpha1``) as pydantic models.

The models are the single source of truth: ``python -m kubegang.api.crdgen`` generates ``crds/``
from them, and the same validators run in Python (core, operator, CLI) and, as OpenAPI + CEL rules,
in kube-apiserver. To add a kind, see :mod:`kubegang.api._registry`.

Wire names are camelCase (``gpusPerReplica``); Python attributes are snake_case
(``gpus_per_replica``). Parse a manifest with :func:`parse_manifest`, serialise with ``to_dict()``.
"""

from kubegang.api._common import API_VERSION, GROUP, VERSION, ApiModel, Condition, ObjectMeta
from kubegang.api._crd import crd_document, crd_name, openapi_schema
from kubegang.api._gpujob import (
    GPUJob,
    GPUJobSpec,
    GPUJobStatus,
    JobConditionType,
    JobPhase,
    Placement,
    PodSource,
    PodSourceKind,
    QueuePosition,
    ReplicaPlacement,
    Topology,
)
from kubegang.api._gpuqueue import (
    FlavorAmount,
    FlavorQuota,
    GPUQueue,
    GPUQueueSpec,
    GPUQueueStatus,
    PreemptionPolicy,
)
from kubegang.api._levels import LEVEL_NAMES
from kubegang.api._podsource import (
    GROUP_SIZE_LABEL,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    RAY_CLUSTER_LABEL,
    SOURCE_KIND_LABEL,
    SOURCE_NAME_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    PodGroupError,
    PodGroupMember,
    SourceError,
    pod_group_member,
    selected_source,
    source_selector,
    source_topology,
)
from kubegang.api._podtemplate import Container, PodSpec, PodTemplateSpec, ResourceRequirements
from kubegang.api._quantity import parse_quantity, whole_count
from kubegang.api._raycluster import (
    RAY_GROUP_LABEL,
    RAY_HEAD_GROUP,
    RAY_NODE_TYPE_LABEL,
    RAY_QUEUE_LABEL,
    RAY_TOPOLOGY_PREFERRED_ANNOTATION,
    RAY_TOPOLOGY_REQUIRED_ANNOTATION,
    RayGang,
    RayGangError,
    RayGroup,
    RayNodeType,
    desired_worker_pods,
    ray_cluster_gang,
)
from kubegang.api._registry import KINDS, UnknownKindError, kind_model, parse_manifest
from kubegang.api._requests import GPU_RESOURCE, PodRequests, RequestError, pod_requests, pod_spec_requests
from kubegang.api._resource import KindInfo, PrinterColumn, Resource
from kubegang.api._schema import SchemaError, structural

__all__ = [
    "API_VERSION",
    "GPU_RESOURCE",
    "GROUP",
    "GROUP_SIZE_LABEL",
    "KINDS",
    "LEVEL_NAMES",
    "POD_GROUP_LABEL",
    "QUEUE_LABEL",
    "RAY_CLUSTER_LABEL",
    "RAY_GROUP_LABEL",
    "RAY_HEAD_GROUP",
    "RAY_NODE_TYPE_LABEL",
    "RAY_QUEUE_LABEL",
    "RAY_TOPOLOGY_PREFERRED_ANNOTATION",
    "RAY_TOPOLOGY_REQUIRED_ANNOTATION",
    "SOURCE_KIND_LABEL",
    "SOURCE_NAME_LABEL",
    "TOPOLOGY_PREFERRED_ANNOTATION",
    "TOPOLOGY_REQUIRED_ANNOTATION",
    "VERSION",
    "ApiModel",
    "Condition",
    "Container",
    "FlavorAmount",
    "FlavorQuota",
    "GPUJob",
    "GPUJobSpec",
    "GPUJobStatus",
    "GPUQueue",
    "GPUQueueSpec",
    "GPUQueueStatus",
    "JobConditionType",
    "JobPhase",
    "KindInfo",
    "ObjectMeta",
    "Placement",
    "PodGroupError",
    "PodGroupMember",
    "PodRequests",
    "PodSource",
    "PodSourceKind",
    "PodSpec",
    "PodTemplateSpec",
    "PreemptionPolicy",
    "PrinterColumn",
    "QueuePosition",
    "RayGang",
    "RayGangError",
    "RayGroup",
    "RayNodeType",
    "ReplicaPlacement",
    "RequestError",
    "Resource",
    "ResourceRequirements",
    "SchemaError",
    "SourceError",
    "Topology",
    "UnknownKindError",
    "crd_document",
    "crd_name",
    "desired_worker_pods",
    "kind_model",
    "openapi_schema",
    "parse_manifest",
    "parse_quantity",
    "pod_group_member",
    "pod_requests",
    "pod_spec_requests",
    "ray_cluster_gang",
    "selected_source",
    "source_selector",
    "source_topology",
    "structural",
    "whole_count",
]
