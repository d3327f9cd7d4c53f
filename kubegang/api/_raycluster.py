"""A KubeRay ``RayCluster`` read as one kubegang gang: its head and every worker group (issue 17).

The first piece of "Ray clusters as gangs" (docs/decisions.md): what a labelled RayCluster asks for,
counted the way the KubeRay operator will create its pods, so that the GPUs kubegang admits and
charges to the queue are exactly the GPUs of the pods that later appear. Two rules are KubeRay's and
are mirrored here, not invented: a worker group's pod count is ``GetWorkerGroupDesiredReplicas``
(ray-operator v1.5.0, controllers/ray/utils/util.go: a suspended group has none; ``minReplicas``
above ``maxReplicas`` means ``maxReplicas``; ``replicas`` clamped into ``[min, max]``; times
``numOfHosts``), and the pods carry ``ray.io/cluster``, ``ray.io/group`` (``headgroup`` for the head)
and ``ray.io/node-type``, which is how the extender will recognise them (by labels, never by the
names KubeRay picks). What one pod asks for is :func:`kubegang.api.pod_spec_requests`, the one rule
the GPUJob path uses too.

Pure: it reads a RayCluster as JSON (what a watch delivers) and raises :class:`RayGangError` naming
the field for anything it cannot count.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubegang.api._gpujob import Topology
from kubegang.api._podsource import (
    QUEUE_LABEL,
    RAY_CLUSTER_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    SourceError,
    source_topology,
)
from kubegang.api._requests import GPU_RESOURCE, PodRequests, RequestError, pod_spec_requests

RAY_QUEUE_LABEL = QUEUE_LABEL
"""The label that hands a RayCluster (or RayJob) to kubegang: the GPUQueue it waits in."""
RAY_TOPOLOGY_REQUIRED_ANNOTATION = TOPOLOGY_REQUIRED_ANNOTATION
RAY_TOPOLOGY_PREFERRED_ANNOTATION = TOPOLOGY_PREFERRED_ANNOTATION
RAY_GROUP_LABEL = "ray.io/group"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_HEAD_GROUP = "headgroup"
"""The ``ray.io/group`` value KubeRay gives the head pod."""

_INT32_MAX = 2**31 - 1


class RayGangError(SourceError):
    """A RayCluster kubegang cannot count; the message names the field and what is allowed."""


class RayNodeType(enum.StrEnum):
    """``ray.io/node-type`` of a group's pods."""

    HEAD = "head"
    WORKER = "worker"


@dataclass(frozen=True, slots=True)
class RayGroup:
    """One group of identical pods: the head, or one worker group."""

    name: str
    """``headgroup`` or the worker group's ``groupName``."""
    node_type: RayNodeType
    pods: int
    """How many pods KubeRay will create for it now."""
    requests: PodRequests
    """What each of them asks for."""
    where: str = field(default="", compare=False)
    """The group's field in the RayCluster (``spec.headGroupSpec``, ``spec.workerGroupSpecs[0]``)."""
    idle: str | None = field(default=None, compare=False)
    """When ``pods`` is 0: which field says so and how to make the group want pods
    (:func:`why_no_worker_pods`)."""

    def pod_labels(self, cluster: str) -> dict[str, str]:
        """The labels KubeRay puts on this group's pods: what identifies them as they appear."""
        return {RAY_CLUSTER_LABEL: cluster, RAY_GROUP_LABEL: self.name, RAY_NODE_TYPE_LABEL: self.node_type.value}


@dataclass(frozen=True, slots=True)
class RayGang:
    """A RayCluster's whole demand: admitted all together or not at all."""

    namespace: str
    name: str
    queue: str
    topology: Topology
    groups: tuple[RayGroup, ...]
    """The head first, then the worker groups in spec order."""

    @property
    def pods(self) -> int:
        return sum(g.pods for g in self.groups)

    @property
    def gpus(self) -> int:
        """Every GPU of every pod: what the queue is charged."""
        return sum(g.pods * g.requests.gpus for g in self.groups)

    @property
    def gpu_groups(self) -> tuple[RayGroup, ...]:
        """The groups whose pods ask for GPUs and that want pods now: the gang."""
        return tuple(g for g in self.groups if g.pods and g.requests.gpus)

    @property
    def idle_gpu_groups(self) -> tuple[RayGroup, ...]:
        """The groups whose pods ask for GPUs but that want no pod now (``replicas: 0`` to autoscale from
        zero, ``numOfHosts: 0``, a suspended group): not in the gang until they want pods."""
        return tuple(g for g in self.groups if not g.pods and g.requests.gpus)

    def idle_message(self) -> str:
        """Why a cluster whose GPU groups all want no pod gets no GPUJob: each group's field, what it says
        and what to change."""
        return "; ".join(f"{g.where} ({g.name!r}): asks for {g.requests.gpus} {GPU_RESOURCE} per pod but 0 pods "
                         f"are desired ({g.idle})" for g in self.idle_gpu_groups)


def _int(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise RayGangError(f"{where}: must be an integer from 0 to {_INT32_MAX}, got {value!r}")
    return value


def desired_worker_pods(group: Mapping[str, Any], where: str) -> int:
    """KubeRay's ``GetWorkerGroupDesiredReplicas`` (see the module docstring), CRD defaults included."""
    if group.get("suspend") is True:
        return 0
    low = _int(group.get("minReplicas"), f"{where}.minReplicas", 0)
    high = _int(group.get("maxReplicas"), f"{where}.maxReplicas", _INT32_MAX)
    replicas = _int(group.get("replicas"), f"{where}.replicas", 0)
    hosts = _int(group.get("numOfHosts"), f"{where}.numOfHosts", 1)
    return (high if low > high else min(max(replicas, low), high)) * hosts


def why_no_worker_pods(group: Mapping[str, Any], where: str) -> str | None:
    """Which field of a worker group makes :func:`desired_worker_pods` 0, and what to change (``where``
    names the group); None when the group wants pods. Read with the same defaults, so the two agree."""
    if desired_worker_pods(group, where):
        return None
    if group.get("suspend") is True:
        return "suspend: true; set it to false"
    if group.get("numOfHosts") == 0:
        return "numOfHosts: 0; set it to at least 1"
    if group.get("maxReplicas") == 0:
        return "maxReplicas: 0; set it to at least 1"
    return (f"replicas: {group.get('replicas') or 0}, minReplicas: {group.get('minReplicas') or 0}; set replicas or "
            f"minReplicas to at least 1")


def _template_requests(group: Mapping[str, Any], where: str) -> PodRequests:
    template = group.get("template")
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping) or not spec.get("containers"):
        raise RayGangError(f"{where}.template.spec.containers: required (at least one container)")
    try:
        return pod_spec_requests(spec, where=f"{where}.template.spec")
    except RequestError as exc:
        raise RayGangError(str(exc)) from None


def _topology(annotations: Mapping[str, Any]) -> Topology:
    try:
        return source_topology(annotations)
    except SourceError as exc:
        raise RayGangError(str(exc)) from None


def ray_cluster_gang(obj: Mapping[str, Any]) -> RayGang:
    """The gang of a RayCluster labelled ``kubegang.io/queue``; :class:`RayGangError` otherwise."""
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    labels = meta.get("labels") or {}
    queue = labels.get(RAY_QUEUE_LABEL) if isinstance(labels, Mapping) else None
    if not isinstance(queue, str) or not queue:
        raise RayGangError(f"metadata.labels[{RAY_QUEUE_LABEL}]: required (the GPUQueue the Ray cluster waits in)")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("headGroupSpec"), Mapping):
        raise RayGangError("spec.headGroupSpec: required (every Ray cluster has a head)")
    groups = [RayGroup(RAY_HEAD_GROUP, RayNodeType.HEAD, 1,
                       _template_requests(spec["headGroupSpec"], "spec.headGroupSpec"), where="spec.headGroupSpec")]
    workers = spec.get("workerGroupSpecs") or []
    if not isinstance(workers, list):
        raise RayGangError("spec.workerGroupSpecs: must be a list of worker groups")
    seen: set[str] = set()
    for i, group in enumerate(workers):
        where = f"spec.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            raise RayGangError(f"{where}: must be a worker group (an object)")
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise RayGangError(f"{where}.groupName: required (a non-empty name)")
        if name in seen or name == RAY_HEAD_GROUP:
            raise RayGangError(f"{where}.groupName: {name!r} is used twice (the head's group is {RAY_HEAD_GROUP!r})")
        seen.add(name)
        groups.append(RayGroup(name, RayNodeType.WORKER, desired_worker_pods(group, where),
                               _template_requests(group, where), where=where, idle=why_no_worker_pods(group, where)))
    annotations = meta.get("annotations") or {}
    return RayGang(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), queue=queue,
                   topology=_topology(annotations if isinstance(annotations, Mapping) else {}),
                   groups=tuple(groups))
