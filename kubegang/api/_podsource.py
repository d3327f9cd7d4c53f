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
"""On a GPUJob the operator made for a source: ``RayCluster`` or ``PodGroup`` (for selectors)."""
SOURCE_NAME_LABEL = "kubegang.io/source-name"
"""On such a GPUJob: the source's name."""

_MAX_GROUP = 10_000


_PREFIX = {PodSourceKind.RAY_CLUSTER: "raycluster", PodSourceKind.POD_GROUP: "podgroup"}


def source_job_name(kind: PodSourceKind, name: str) -> str:
    """The name of the GPUJob that represents a source (``raycluster-<name>``, ``podgroup-<name>``)."""
    full = f"{_PREFIX[kind]}-{name}"
    if len(full) <= 253:
        return full
    return f"{full[:240]}-{hashlib.sha256(full.encode()).hexdigest()[:12]}"


def job_name_of(reference: str) -> str:
    """The GPUJob name a user means: ``raycluster/NAME`` and ``podgroup/NAME`` name the job that represents
    that source (``kubectl gang why raycluster/rc``); anything else is a GPUJob's own name."""
    kind, _, name = reference.partition("/")
    kinds = {"raycluster": PodSourceKind.RAY_CLUSTER, "rayclusters": PodSourceKind.RAY_CLUSTER,
             "podgroup": PodSourceKind.POD_GROUP, "podgroups": PodSourceKind.POD_GROUP}
    if name and kind.lower() in kinds:
        return source_job_name(kinds[kind.lower()], name)
    return reference


def source_selector(kind: PodSourceKind, name: str) -> dict[str, str]:
    """The labels every pod of the source carries (in the source's namespace)."""
    if kind is PodSourceKind.RAY_CLUSTER:
        return {RAY_CLUSTER_LABEL: name}
    return {POD_GROUP_LABEL: name}


def selected_source(labels: Mapping[str, Any]) -> tuple[PodSourceKind, str] | None:
    """The source a pod with ``labels`` may belong to (a pod group first), or None."""
    group = labels.get(POD_GROUP_LABEL)
    if isinstance(group, str) and group:
        return PodSourceKind.POD_GROUP, group
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
