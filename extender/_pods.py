"""What a pod asks of the extender, read from the pod kube-scheduler sends.

One place turns a ``v1.Pod`` into a :class:`PodDemand` (GPU count, pin, gang membership), so the
HTTP verbs, the ledger's watch and the tests agree on what "a gang pod" and "its GPU count" mean.
The annotation and label keys are the contract with the operator, which writes them on every pod
it creates (see docs/extender.md, "Contract with the operator").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubegang.extender._wire import Pod

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the extender manages (``managedResources`` in the scheduler config)."""
NODE_ANNOTATION = "kubegang.io/node"
"""Planned node of a gang pod; the filter passes this node only."""
GPUS_ANNOTATION = "kubegang.io/gpus"
"""Comma-separated GPU indices planned (or, after binding, used) on that node, e.g. ``0,1,2,3``."""
JOB_UID_LABEL = "kubegang.io/job-uid"
"""UID of the GPUJob a pod belongs to; every pod of one gang carries the same value."""
POD_INDEX_LABEL = "kubegang.io/pod-index"
"""Index of the pod within its gang (0..replicas-1), matching the plan's pod index."""

_INT_QUANTITY = re.compile(r"^\+?(\d+)$")


class DemandError(ValueError):
    """A pod whose kubegang fields cannot be read; the message names the field."""


def parse_gpu_quantity(value: str | int | float, where: str) -> int:
    """Whole GPUs from a resource quantity; extended resources must be integers."""
    if isinstance(value, bool):
        raise DemandError(f"{where}: expected a whole number of GPUs, got {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise DemandError(f"{where}: {GPU_RESOURCE} must be a whole number, got {value!r}")
        count = int(value)
    else:
        match = _INT_QUANTITY.match(value.strip())
        if match is None:
            raise DemandError(f"{where}: {GPU_RESOURCE} must be a whole number, got {value!r}")
        count = int(match.group(1))
    if count < 0:
        raise DemandError(f"{where}: {GPU_RESOURCE} must not be negative, got {value!r}")
    return count


def parse_gpu_indices(text: str) -> tuple[int, ...]:
    """``"0,1,3"`` -> ``(0, 1, 3)``; an empty string means none."""
    text = text.strip()
    if not text:
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise DemandError(
                f"annotation {GPUS_ANNOTATION}: expected comma-separated GPU indices, got {text!r}"
            )
        out.append(int(part))
    if len(set(out)) != len(out):
        raise DemandError(f"annotation {GPUS_ANNOTATION}: repeated GPU index in {text!r}")
    return tuple(out)


def format_gpu_indices(indices: tuple[int, ...] | list[int]) -> str:
    """Inverse of :func:`parse_gpu_indices`."""
    return ",".join(str(i) for i in indices)


@dataclass(frozen=True)
class PodDemand:
    """What one pod asks for, independent of how it arrived (extender request or watch event)."""

    uid: str
    """Pod UID ("" when the scheduler did not send one)."""
    namespace: str
    """Pod namespace."""
    name: str
    """Pod name."""
    gpus: int
    """Whole GPUs requested: max(sum over containers, largest init container)."""
    pinned_node: str | None = None
    """Planned node from ``kubegang.io/node``; None for pods kubegang did not plan."""
    pinned_gpus: tuple[int, ...] = ()
    """Planned GPU indices from ``kubegang.io/gpus``."""
    job_uid: str | None = None
    """GPUJob UID from the ``kubegang.io/job-uid`` label; None outside gangs."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """The pod's nodeSelector (used for GPU product matching)."""
    node_name: str = ""
    """``spec.nodeName`` once bound."""

    @property
    def key(self) -> str:
        """``namespace/name``, for logs and reasons."""
        return f"{self.namespace}/{self.name}"


def _container_gpus(resources_limits: Mapping[str, str | int | float],
                    resources_requests: Mapping[str, str | int | float], where: str) -> int:
    raw = resources_limits.get(GPU_RESOURCE, resources_requests.get(GPU_RESOURCE))
    return 0 if raw is None else parse_gpu_quantity(raw, where)


def pod_demand(pod: Pod) -> PodDemand:
    """Read a :class:`PodDemand`; raises :class:`DemandError` naming the bad field."""
    spec, meta = pod.spec, pod.metadata
    total = sum(
        _container_gpus(c.resources.limits, c.resources.requests,
                        f"spec.containers[{i}].resources")
        for i, c in enumerate(spec.containers)
    )
    init = max(
        (
            _container_gpus(c.resources.limits, c.resources.requests,
                            f"spec.initContainers[{i}].resources")
            for i, c in enumerate(spec.init_containers)
        ),
        default=0,
    )
    pinned = meta.annotations.get(NODE_ANNOTATION, "").strip() or None
    gpus_text = meta.annotations.get(GPUS_ANNOTATION, "")
    return PodDemand(
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        gpus=max(total, init),
        pinned_node=pinned,
        pinned_gpus=parse_gpu_indices(gpus_text),
        job_uid=meta.labels.get(JOB_UID_LABEL) or None,
        node_selector=dict(spec.node_selector),
        node_name=spec.node_name,
    )
