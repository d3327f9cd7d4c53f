"""What a pod asks of the extender, read from the pod kube-scheduler sends.

One place turns a ``v1.Pod`` into a :class:`PodDemand` (GPU count, pin, gang membership), so the
HTTP verbs, the ledger's watch and the tests agree on what "a gang pod" and "its GPU count" mean.
The annotation and label keys are the contract with the operator, which writes them on every pod
it creates (see docs/extender.md, "Contract with the operator").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

from kubegang.api import parse_quantity, whole_count
from kubegang.extender._wire import Pod, ResourceRequirements
from kubegang.placement import Toleration
from kubegang.podcontract import GPU_RESOURCE, GPUS_ANNOTATION, JOB_UID_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL

N = TypeVar("N", int, Decimal)  # whole GPUs, or a CPU/memory quantity

__all__ = ["GPUS_ANNOTATION", "GPU_RESOURCE", "JOB_UID_LABEL", "NODE_ANNOTATION", "POD_INDEX_LABEL"]

REQUEUE_ANNOTATION = "kubegang.io/requeued-at"
"""Written by the extender on waiting GPU pods when reserved GPUs are freed, so kube-scheduler
retries them now (see ``Ledger.take_requeue``); the value is the time, for humans."""


class DemandError(ValueError):
    """A pod whose kubegang fields cannot be read; the message names the field."""


def parse_gpu_quantity(value: str | int | float, where: str) -> int:
    """Whole GPUs from a resource quantity; extended resources must be whole numbers."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return whole_count(value if isinstance(value, int | str) else str(value))
    except ValueError as exc:
        raise DemandError(f"{where}: {GPU_RESOURCE} {exc}") from None


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
    pod_index: int | None = None
    """Index within the gang from ``kubegang.io/replica-index``; None outside gangs."""
    tolerations: tuple[Toleration, ...] = ()
    """The pod's tolerations, in the core's form (GPU nodes are often tainted)."""
    cpu_milli: int = 0
    """CPU requested, in millicores, as kube-scheduler counts it (see :func:`pod_demand`)."""
    memory_mib: int = 0
    """Memory requested, in MiB (rounded up)."""

    @property
    def key(self) -> str:
        """``namespace/name``, for logs and reasons."""
        return f"{self.namespace}/{self.name}"


def _container_gpus(resources_limits: Mapping[str, str | int | float],
                    resources_requests: Mapping[str, str | int | float], where: str) -> int:
    raw = resources_limits.get(GPU_RESOURCE, resources_requests.get(GPU_RESOURCE))
    return 0 if raw is None else parse_gpu_quantity(raw, where)


def _request(resources: ResourceRequirements, name: str, where: str) -> Decimal:
    """A container's request of ``name``; the limit stands in when only a limit is set (as the API
    server defaults it)."""
    raw = resources.requests.get(name, resources.limits.get(name))
    if raw is None:
        return Decimal(0)
    if isinstance(raw, float):
        raw = str(raw)
    try:
        return parse_quantity(raw)
    except ValueError as exc:
        raise DemandError(f"{where}.requests.{name}: {exc}") from None


def _per_pod(pod: Pod, read: Callable[[ResourceRequirements, str], N], zero: N) -> N:
    """Sum over containers, or the largest init container when larger: kube-scheduler's rule."""
    spec = pod.spec
    total = sum((read(c.resources, f"spec.containers[{i}].resources") for i, c in enumerate(spec.containers)), zero)
    init = max(
        (read(c.resources, f"spec.initContainers[{i}].resources") for i, c in enumerate(spec.init_containers)),
        default=zero,
    )
    return max(total, init)


def _pod_request(pod: Pod, name: str) -> Decimal:
    return _per_pod(pod, lambda resources, where: _request(resources, name, where), Decimal(0))


def pod_demand(pod: Pod) -> PodDemand:
    """Read a :class:`PodDemand`; raises :class:`DemandError` naming the bad field."""
    spec, meta = pod.spec, pod.metadata
    gpus = _per_pod(pod, lambda resources, where: _container_gpus(resources.limits, resources.requests, where), 0)
    pinned = meta.annotations.get(NODE_ANNOTATION, "").strip() or None
    index_text = meta.labels.get(POD_INDEX_LABEL, "").strip()
    if index_text and not index_text.isdigit():
        raise DemandError(f"label {POD_INDEX_LABEL}: expected a pod index (0, 1, ...), got {index_text!r}")
    tolerations = []
    for i, t in enumerate(spec.tolerations):
        try:
            tolerations.append(Toleration(key=t.key, operator=t.operator or "Equal", value=t.value,
                                          effect=t.effect))
        except ValueError as exc:
            raise DemandError(f"spec.tolerations[{i}]: {exc}") from None
    gpus_text = meta.annotations.get(GPUS_ANNOTATION, "")
    return PodDemand(
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        gpus=gpus,
        pinned_node=pinned,
        pinned_gpus=parse_gpu_indices(gpus_text),
        job_uid=meta.labels.get(JOB_UID_LABEL) or None,
        node_selector=dict(spec.node_selector),
        node_name=spec.node_name,
        pod_index=int(index_text) if index_text else None,
        tolerations=tuple(tolerations),
        cpu_milli=math.ceil(_pod_request(pod, "cpu") * 1000),
        memory_mib=math.ceil(_pod_request(pod, "memory") / (1024 * 1024)),
    )
