"""What one pod asks for: whole GPUs, CPU and memory, by kube-scheduler's rule.

The one place that says how a pod's requests are counted, used by the API models (GPUs per
replica), the operator (the gang request it plans and the pods it builds) and the extender (every
pod kube-scheduler sends it). Three copies of "containers summed, or the largest init container
when that is more" had drifted apart (one ignored init containers); a pod the operator planned as
8 GPUs must be an 8-GPU pod to the extender, so there is one function.

Why it takes ``(requests, limits)`` pairs rather than a pod: the extender reads pods through its
own wire model on the hot path of ``filter``, the operator reads templates as plain mappings; both
hand over their containers' two maps without converting anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubegang.api._quantity import parse_quantity, whole_count

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource name of a whole NVIDIA GPU (device plugin)."""

_MIB = 1 << 20

ContainerResources = tuple[Mapping[str, Any], Mapping[str, Any]]
"""A container's ``(resources.requests, resources.limits)``."""

InitContainerResources = tuple[Mapping[str, Any], Mapping[str, Any], Any]
"""An init container's ``(resources.requests, resources.limits, restartPolicy)``."""


class RequestError(ValueError):
    """A quantity that cannot be counted; the message names the field."""


@dataclass(frozen=True, slots=True)
class PodRequests:
    """One pod's demand, rounded up so placement never counts a pod smaller than kube-scheduler does."""

    gpus: int = 0
    """Whole ``nvidia.com/gpu`` devices."""
    cpu_milli: int = 0
    """CPU in millicores."""
    memory_mib: int = 0
    """Memory in MiB."""


def _raw(requests: Mapping[str, Any], limits: Mapping[str, Any], resource: str) -> Any:
    # Kubernetes defaults a missing request to the limit; a container with neither asks for nothing.
    return requests.get(resource, limits.get(resource))


_INT64_MAX = 2**63 - 1


def _quantity(raw: Any, where: str, resource: str) -> Decimal:
    if isinstance(raw, float):
        raw = str(raw)
    try:
        value = parse_quantity(raw if isinstance(raw, int | str) else str(raw))
    except ValueError as exc:
        raise RequestError(f"{where}.resources.requests.{resource}: {exc}") from None
    if value < 0:
        raise RequestError(f"{where}.resources.requests.{resource}: must not be negative, got {raw!r}")
    if value * 1000 > _INT64_MAX:
        # kube-scheduler counts requests in int64 milli-units; beyond that no node can hold it, and the
        # extender's wire (int64 fields) could not carry it either.
        raise RequestError(f"{where}.resources.requests.{resource}: {raw!r} is beyond what a node can offer")
    return value


def _gpus(raw: Any, where: str) -> int:
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    try:
        return whole_count(raw if isinstance(raw, int | str) else str(raw))
    except ValueError as exc:
        raise RequestError(f"{where}.resources.limits.{GPU_RESOURCE}: {exc}") from None


SIDECAR_RESTART_POLICY = "Always"
"""An init container's ``restartPolicy`` that makes it a native sidecar (KEP-753)."""


def _per_pod(running: list[Decimal], init: list[tuple[Decimal, bool]]) -> Decimal:
    """kube-scheduler's rule for one resource, native sidecars included (KEP-753, GA in Kubernetes 1.33).

    An init container with ``restartPolicy: Always`` is a sidecar: it starts in order with the other
    init containers but keeps running beside the app containers, so it is not "one at a time". As in
    kube-scheduler's ``AggregateContainerRequests``, init container ``i`` needs its own request plus
    every sidecar started before it (for a sidecar: the sidecars up to and including itself), and the
    pod needs the larger of the most any init container needs and the app containers plus all sidecars.
    Without sidecars this is the old rule: the containers' sum, or the largest init container.
    """
    sidecars = Decimal(0)
    most_init = Decimal(0)
    for request, sidecar in init:
        if sidecar:
            sidecars += request
            most_init = max(most_init, sidecars)
        else:
            most_init = max(most_init, request + sidecars)
    return max(sum(running, Decimal(0)) + sidecars, most_init)


def pod_requests(
    containers: Iterable[ContainerResources],
    init_containers: Iterable[ContainerResources | InitContainerResources] = (),
    *,
    where: str = "spec",
) -> PodRequests:
    """The demand of a pod with these containers; :class:`RequestError` names a bad quantity.

    An init container may come with its ``restartPolicy`` as a third item; ``"Always"`` makes it a
    native sidecar, counted as kube-scheduler does (see :func:`_per_pod`).
    """
    running: dict[str, list[Decimal]] = {"gpu": [], "cpu": [], "memory": []}
    init: dict[str, list[tuple[Decimal, bool]]] = {"gpu": [], "cpu": [], "memory": []}

    def read(requests: Mapping[str, Any], limits: Mapping[str, Any], at: str) -> dict[str, Decimal]:
        # A container that does not name a resource asks for none of it.
        values = {"gpu": Decimal(0), "cpu": Decimal(0), "memory": Decimal(0)}
        gpu = _raw(requests, limits, GPU_RESOURCE)
        if gpu is not None:
            values["gpu"] = Decimal(_gpus(gpu, at))
        for resource in ("cpu", "memory"):
            raw = _raw(requests, limits, resource)
            if raw is not None:
                values[resource] = _quantity(raw, at, resource)
        return values

    for i, (requests, limits) in enumerate(containers):
        for resource, value in read(requests, limits, f"{where}.containers[{i}]").items():
            running[resource].append(value)
    for i, (requests, limits, *policy) in enumerate(init_containers):
        sidecar = bool(policy) and policy[0] == SIDECAR_RESTART_POLICY
        for resource, value in read(requests, limits, f"{where}.initContainers[{i}]").items():
            init[resource].append((value, sidecar))
    return PodRequests(
        gpus=int(_per_pod(running["gpu"], init["gpu"])),
        cpu_milli=math.ceil(_per_pod(running["cpu"], init["cpu"]) * 1000),
        memory_mib=math.ceil(_per_pod(running["memory"], init["memory"]) / _MIB),
    )


def _resources_of(container: Any) -> ContainerResources:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}, {}
    requests, limits = resources.get("requests"), resources.get("limits")
    return (requests if isinstance(requests, Mapping) else {}), (limits if isinstance(limits, Mapping) else {})


def _init_resources_of(container: Any) -> InitContainerResources:
    policy = container.get("restartPolicy") if isinstance(container, Mapping) else None
    return (*_resources_of(container), policy)


def pod_spec_requests(pod_spec: Mapping[str, Any], *, where: str = "spec") -> PodRequests:
    """:func:`pod_requests` of a pod spec in its JSON form (a pod's or a template's ``spec``)."""
    return pod_requests(
        (_resources_of(c) for c in pod_spec.get("containers") or ()),
        (_init_resources_of(c) for c in pod_spec.get("initContainers") or ()),
        where=where,
    )
