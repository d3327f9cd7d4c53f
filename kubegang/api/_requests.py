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


def _per_pod(running: list[Decimal], init: list[Decimal]) -> Decimal:
    """kube-scheduler's rule: the sum over containers, or the largest init container when larger."""
    return max(sum(running, Decimal(0)), max(init, default=Decimal(0)))


def pod_requests(
    containers: Iterable[ContainerResources],
    init_containers: Iterable[ContainerResources] = (),
    *,
    where: str = "spec",
) -> PodRequests:
    """The demand of a pod with these containers; :class:`RequestError` names a bad quantity."""
    groups = (("containers", list(containers)), ("initContainers", list(init_containers)))
    totals: dict[str, tuple[list[Decimal], list[Decimal]]] = {"gpu": ([], []), "cpu": ([], []), "memory": ([], [])}
    for slot, (key, group) in enumerate(groups):
        for i, (requests, limits) in enumerate(group):
            at = f"{where}.{key}[{i}]"
            gpu = _raw(requests, limits, GPU_RESOURCE)
            if gpu is not None:
                totals["gpu"][slot].append(Decimal(_gpus(gpu, at)))
            for resource in ("cpu", "memory"):
                raw = _raw(requests, limits, resource)
                if raw is not None:
                    totals[resource][slot].append(_quantity(raw, at, resource))
    return PodRequests(
        gpus=int(_per_pod(*totals["gpu"])),
        cpu_milli=math.ceil(_per_pod(*totals["cpu"]) * 1000),
        memory_mib=math.ceil(_per_pod(*totals["memory"]) / _MIB),
    )


def _resources_of(container: Any) -> ContainerResources:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}, {}
    requests, limits = resources.get("requests"), resources.get("limits")
    return (requests if isinstance(requests, Mapping) else {}), (limits if isinstance(limits, Mapping) else {})


def pod_spec_requests(pod_spec: Mapping[str, Any], *, where: str = "spec") -> PodRequests:
    """:func:`pod_requests` of a pod spec in its JSON form (a pod's or a template's ``spec``)."""
    return pod_requests(
        (_resources_of(c) for c in pod_spec.get("containers") or ()),
        (_resources_of(c) for c in pod_spec.get("initContainers") or ()),
        where=where,
    )
