"""Gangs whose pods another controller makes: a KubeRay ``RayCluster`` or a labelled pod group (issue 17).

kubegang admits only GPUJobs, so a workload it does not create pods for is represented by one: the
operator writes a GPUJob with ``spec.podSource`` naming the workload, and that GPUJob goes through the
one admission path (quota, fair share, placement, preemption, status, ``kubectl gang why``), the way
Kueue represents every integrated job by a ``Workload``. What differs is only who makes the pods: the
owning controller does, and kubegang *adopts* them as they appear, matched by labels (never by names
kubegang chose), pinning each to a slot of the admitted placement.

This module holds the rules both the operator and the extender need, once:

- :func:`source_selector`: which pods belong to a source (the extender refuses to place one that
  kubegang has not pinned yet; the operator pins them);
- :func:`pod_group_member`: what a pod of a pod group says about its group (labels
  ``kubegang.io/pod-group``, ``kubegang.io/group-size``, ``kubegang.io/queue``), with an error that
  names the label for anything it cannot use.
- :func:`native_pod_group`: what Kubernetes' own ``scheduling.k8s.io/v1alpha2`` PodGroup (named by
  the pods' ``spec.schedulingGroup.podGroupName``) says about its gang: the size from
  ``spec.schedulingPolicy.gang.minCount``, the queue from a ``kubegang.io/queue`` label on the
  PodGroup, its Workload or the pods, with an error that names the field.

Pure: reads JSON as a watch delivers it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kubegang.api._gpujob import PodSourceKind, Topology
from kubegang.api._requests import PodRequests, RequestError, pod_spec_requests

POD_GROUP_LABEL = "kubegang.io/pod-group"
"""Names the pod group a pod belongs to (one gang per name and namespace)."""
GROUP_SIZE_LABEL = "kubegang.io/group-size"
"""How many pods the group has: it is admitted and placed for that many, all or none."""
QUEUE_LABEL = "kubegang.io/queue"
"""The GPUQueue a RayCluster (or RayJob) or a pod group waits in: the label that hands it to kubegang."""
TOPOLOGY_REQUIRED_ANNOTATION = "kubegang.io/topology-required"
"""A level name (``leaf``, ``nvlink``, ...): every pod of the gang inside one such domain."""
TOPOLOGY_PREFERRED_ANNOTATION = "kubegang.io/topology-preferred"
"""A level name tried first, narrower than or equal to the required one."""
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label on every pod of a RayCluster: the cluster's name."""
SOURCE_KIND_LABEL = "kubegang.io/source-kind"
"""On a GPUJob the operator made for a source: ``RayCluster``, ``PodGroup`` or ``SchedulingGroup``."""
SOURCE_NAME_LABEL = "kubegang.io/source-name"
"""On such a GPUJob: the source's name."""

SCHEDULING_API_VERSION = "scheduling.k8s.io/v1alpha2"
"""Kubernetes 1.36's Workload and PodGroup (feature gate GenericWorkload, alpha, off by default)."""

_MAX_GROUP = 10_000


_PREFIX = {PodSourceKind.RAY_CLUSTER: "raycluster", PodSourceKind.POD_GROUP: "podgroup",
           PodSourceKind.SCHEDULING_GROUP: "schedulinggroup"}


def source_job_name(kind: PodSourceKind, name: str) -> str:
    """The name of the GPUJob that represents a source (``raycluster-<name>``, ``podgroup-<name>``,
    ``schedulinggroup-<name>``)."""
    full = f"{_PREFIX[kind]}-{name}"
    if len(full) <= 253:
        return full
    return f"{full[:240]}-{hashlib.sha256(full.encode()).hexdigest()[:12]}"


def job_name_of(reference: str) -> str:
    """The GPUJob name a user means: ``raycluster/NAME``, ``podgroup/NAME`` and ``schedulinggroup/NAME``
    name the job that represents that source (``kubectl gang why raycluster/rc``); anything else is a
    GPUJob's own name (with ``gpujob/`` or ``gj/`` allowed before it, as kubectl allows). ValueError for
    any other ``KIND/NAME``, naming the kinds allowed: a GPUJob's name has no ``/``."""
    kind, slash, name = reference.partition("/")
    kinds = {"raycluster": PodSourceKind.RAY_CLUSTER, "rayclusters": PodSourceKind.RAY_CLUSTER,
             "podgroup": PodSourceKind.POD_GROUP, "podgroups": PodSourceKind.POD_GROUP,
             "schedulinggroup": PodSourceKind.SCHEDULING_GROUP, "schedulinggroups": PodSourceKind.SCHEDULING_GROUP}
    if not slash:
        return reference
    if name and "/" not in name and kind.lower() in kinds:
        return source_job_name(kinds[kind.lower()], name)
    if name and "/" not in name and kind.lower() in ("gpujob", "gpujobs", "gj"):
        return name
    raise ValueError(f"{reference!r}: expected a GPUJob name, or gpujob/NAME, raycluster/NAME, podgroup/NAME or "
                     "schedulinggroup/NAME")


def source_selector(kind: PodSourceKind, name: str) -> dict[str, str]:
    """The labels every pod of the source carries (in the source's namespace).

    A ``SchedulingGroup``'s pods carry no label of it (they name it in ``spec.schedulingGroup``, which
    no label or field selector reaches): asking for its selector is a programming error."""
    if kind is PodSourceKind.RAY_CLUSTER:
        return {RAY_CLUSTER_LABEL: name}
    if kind is PodSourceKind.SCHEDULING_GROUP:
        raise ValueError(f"the pods of {kind.value} {name!r} are named by spec.schedulingGroup, not by labels")
    return {POD_GROUP_LABEL: name}


def scheduling_group_name(pod_spec: Mapping[str, Any]) -> str | None:
    """The native PodGroup a pod names (``spec.schedulingGroup.podGroupName``), or None."""
    group = pod_spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def selected_source(labels: Mapping[str, Any], scheduling_group: str | None = None
                    ) -> tuple[PodSourceKind, str] | None:
    """The source a pod with ``labels`` (and the native PodGroup its ``spec.schedulingGroup`` names, if
    any) may belong to: a labelled pod group first, then the native PodGroup, then a RayCluster; or None.

    The label wins over the spec field because it is kubegang's own, stated on purpose."""
    group = labels.get(POD_GROUP_LABEL)
    if isinstance(group, str) and group:
        return PodSourceKind.POD_GROUP, group
    if scheduling_group:
        return PodSourceKind.SCHEDULING_GROUP, scheduling_group
    cluster = labels.get(RAY_CLUSTER_LABEL)
    if isinstance(cluster, str) and cluster:
        return PodSourceKind.RAY_CLUSTER, cluster
    return None


class SourceError(ValueError):
    """A RayCluster or pod group kubegang cannot admit; the message names the label or field."""


class PodGroupError(SourceError):
    """A pod group kubegang cannot admit; the message names the label or field."""


@dataclass(frozen=True, slots=True)
class PodGroupMember:
    """What one pod says about the group it belongs to."""

    group: str
    size: int
    queue: str
    topology: Topology
    requests: PodRequests
    """What this pod asks for (every member must ask for the same)."""
    priority_class_name: str | None


def source_topology(annotations: Mapping[str, Any]) -> Topology:
    """``topology`` from the ``kubegang.io/topology-required`` / ``-preferred`` annotations;
    :class:`SourceError` names the annotation."""
    values = {field: annotations.get(key) for field, key in (
        ("required", TOPOLOGY_REQUIRED_ANNOTATION), ("preferred", TOPOLOGY_PREFERRED_ANNOTATION))}
    try:
        return Topology.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = {"required": TOPOLOGY_REQUIRED_ANNOTATION, "preferred": TOPOLOGY_PREFERRED_ANNOTATION}.get(
            str(first["loc"][0]) if first["loc"] else "", f"{TOPOLOGY_REQUIRED_ANNOTATION}/preferred")
        raise SourceError(f"metadata.annotations[{key}]: {first['msg']}") from None


def pod_group_member(pod: Mapping[str, Any]) -> PodGroupMember | None:
    """The group of a pod labelled ``kubegang.io/pod-group`` (None without the label).

    :class:`PodGroupError` names the label when the size or queue is missing or unusable.
    """
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    labels: Mapping[str, Any] = meta.get("labels") or {}
    group = labels.get(POD_GROUP_LABEL)
    if not isinstance(group, str) or not group:
        return None
    size_text = str(labels.get(GROUP_SIZE_LABEL) or "")
    if not size_text.isdigit() or not 1 <= int(size_text) <= _MAX_GROUP:
        raise PodGroupError(f"metadata.labels[{GROUP_SIZE_LABEL}]: required, the number of pods in group "
                            f"{group!r} (1..{_MAX_GROUP}), got {size_text or 'nothing'!r}")
    queue = labels.get(QUEUE_LABEL)
    if not isinstance(queue, str) or not queue:
        raise PodGroupError(f"metadata.labels[{QUEUE_LABEL}]: required, the GPUQueue pod group {group!r} waits in")
    spec: Mapping[str, Any] = pod.get("spec") or {}
    try:
        requests = pod_spec_requests(spec, where="spec")
    except RequestError as exc:
        raise PodGroupError(str(exc)) from None
    priority = spec.get("priorityClassName")
    return PodGroupMember(group=group, size=int(size_text), queue=queue,
                          topology=source_topology(meta.get("annotations") or {}), requests=requests,
                          priority_class_name=str(priority) if priority else None)


@dataclass(frozen=True, slots=True)
class NativeGroup:
    """What a ``scheduling.k8s.io`` PodGroup (with its Workload) says about the gang kubegang admits."""

    name: str
    size: int
    """``spec.schedulingPolicy.gang.minCount``: admitted and placed for that many pods, all or none."""
    queue: str
    topology: Topology


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def native_pod_group(podgroup: Mapping[str, Any], workload: Mapping[str, Any] | None,
                     pod_labels: Mapping[str, Any]) -> NativeGroup:
    """The gang of a native PodGroup; :class:`SourceError` names the field it cannot use.

    Size: ``spec.schedulingPolicy.gang.minCount`` (a ``basic`` policy asks for no gang, which kubegang,
    admitting GPU gangs, cannot place as one). Queue: the ``kubegang.io/queue`` label of the PodGroup,
    else of the Workload its ``spec.podGroupTemplateRef`` names, else of the pods (``pod_labels``, the
    first pod's). Topology: the ``kubegang.io/topology-*`` annotations of the PodGroup, else the Workload.
    """
    meta: Mapping[str, Any] = podgroup.get("metadata") or {}
    name = str(meta.get("name") or "")
    policy = (podgroup.get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        got = ", ".join(sorted(policy)) if isinstance(policy, Mapping) and policy else "nothing"
        raise SourceError(f"spec.schedulingPolicy.gang: required on PodGroup {name!r} for kubegang, which admits "
                          f"and places GPU gangs whole (got {got}); set gang.minCount, or remove "
                          f"spec.schedulingGroup from the pods to place them one by one")
    size = gang.get("minCount")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= _MAX_GROUP:
        raise SourceError(f"spec.schedulingPolicy.gang.minCount: the number of pods of PodGroup {name!r} "
                          f"(1..{_MAX_GROUP}), got {size!r}")
    queue = next((q for q in (_labels(podgroup).get(QUEUE_LABEL), _labels(workload).get(QUEUE_LABEL),
                              pod_labels.get(QUEUE_LABEL)) if isinstance(q, str) and q), None)
    if queue is None:
        raise SourceError(f"metadata.labels[{QUEUE_LABEL}]: required on PodGroup {name!r}, its Workload or its "
                          f"pods: the GPUQueue the group waits in")
    annotations = meta.get("annotations") or {}
    if not any(k in annotations for k in (TOPOLOGY_REQUIRED_ANNOTATION, TOPOLOGY_PREFERRED_ANNOTATION)):
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
    return NativeGroup(name=name, size=size, queue=queue, topology=source_topology(annotations))


def workload_name(podgroup: Mapping[str, Any]) -> str | None:
    """The Workload a PodGroup was made from (``spec.podGroupTemplateRef.workload.workloadName``), or None."""
    ref = ((podgroup.get("spec") or {}).get("podGroupTemplateRef") or {})
    workload = ref.get("workload") if isinstance(ref, Mapping) else None
    name = workload.get("workloadName") if isinstance(workload, Mapping) else None
    return name if isinstance(name, str) and name else None
