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

from kubegang.api import PodSourceKind, RequestError, pod_requests, selected_source
from kubegang.extender._wire import Pod
from kubegang.placement import MILLI, Toleration
from kubegang.podcontract import (
    GPU_MILLI_ANNOTATION,
    GPU_RESOURCE,
    GPUS_ANNOTATION,
    JOB_UID_LABEL,
    NODE_ANNOTATION,
    POD_INDEX_LABEL,
)

__all__ = ["GPUS_ANNOTATION", "GPU_RESOURCE", "JOB_UID_LABEL", "NODE_ANNOTATION", "POD_INDEX_LABEL"]

REQUEUE_ANNOTATION = "kubegang.io/requeued-at"
"""Written by the extender on waiting GPU pods when reserved GPUs are freed, so kube-scheduler
retries them now (see ``Ledger.take_requeue``); the value is the time, for humans."""


class DemandError(ValueError):
    """A pod whose kubegang fields cannot be read; the message names the field."""


_NUMBER = re.compile(r"[0-9]{1,18}")
"""A non-negative integer as the operator writes one: ASCII digits only. ``str.isdigit`` also takes
``"²"`` and other Unicode digits, which ``int()`` refuses (a ValueError that is no DemandError), and
``int()`` refuses numbers over 4,300 digits too: 18 digits is far above any index or share."""


def _number(text: str) -> int | None:
    """``text`` as a non-negative integer, or None when it is not ASCII digits (at most 18)."""
    return int(text) if _NUMBER.fullmatch(text) else None


def parse_gpu_indices(text: str) -> tuple[int, ...]:
    """``"0,1,3"`` -> ``(0, 1, 3)``; an empty string means none."""
    text = text.strip()
    if not text:
        return ()
    out: list[int] = []
    for part in text.split(","):
        index = _number(part.strip())
        if index is None:
            raise DemandError(
                f"annotation {GPUS_ANNOTATION}: expected comma-separated GPU indices (ASCII digits, e.g. 0,1,2,3), "
                f"got {text!r}"
            )
        out.append(index)
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
    gpu_milli: int = 0
    """Thousandths of one shared GPU (annotation ``kubegang.io/gpu-milli``, set by the operator on a
    ``gpuFraction`` pod it planned); 0 for whole-GPU pods."""
    source: tuple[PodSourceKind, str] | None = None
    """The pod group or RayCluster the pod's labels name, or the native PodGroup its
    ``spec.schedulingGroup`` names (``kubegang.api.selected_source``): such a pod is placed only once
    the operator pinned it to a slot of its gang's admission."""

    @property
    def holds_gpus(self) -> bool:
        """Whether the pod takes GPU capacity (whole GPUs or a planned share of one)."""
        return self.gpus > 0 or self.gpu_milli > 0

    @property
    def key(self) -> str:
        """``namespace/name``, for logs and reasons."""
        return f"{self.namespace}/{self.name}"


def _gpu_milli(text: str, gpus: int, pinned: str | None, pinned_gpus: tuple[int, ...]) -> int:
    """The planned GPU share of a pod; a share is honoured only as kubegang plans it: pinned to a node
    and one GPU index, without whole GPUs."""
    text = text.strip()
    if not text:
        return 0
    milli = _number(text)
    if milli is None or not 0 < milli < MILLI:
        raise DemandError(f"annotation {GPU_MILLI_ANNOTATION}: expected thousandths of one GPU (1..999 in ASCII "
                          f"digits), got {text!r}")
    if gpus or pinned is None or len(pinned_gpus) != 1:
        raise DemandError(
            f"annotation {GPU_MILLI_ANNOTATION}: a GPU share needs annotations {NODE_ANNOTATION} and one index in "
            f"{GPUS_ANNOTATION}, and no {GPU_RESOURCE} request (got {gpus} GPUs, indices {list(pinned_gpus)})"
        )
    return milli


def pod_demand(pod: Pod) -> PodDemand:
    """Read a :class:`PodDemand`; raises :class:`DemandError` naming the bad field."""
    spec, meta = pod.spec, pod.metadata
    try:
        requests = pod_requests(
            ((c.resources.requests, c.resources.limits) for c in spec.containers),
            ((c.resources.requests, c.resources.limits, c.restart_policy) for c in spec.init_containers),
        )
    except RequestError as exc:
        raise DemandError(str(exc)) from None
    pinned = meta.annotations.get(NODE_ANNOTATION, "").strip() or None
    index_text = meta.labels.get(POD_INDEX_LABEL, "").strip()
    pod_index = _number(index_text) if index_text else None
    if index_text and pod_index is None:
        raise DemandError(f"label {POD_INDEX_LABEL}: expected a pod index (0, 1, ... in ASCII digits), "
                          f"got {index_text!r}")
    tolerations = []
    for i, t in enumerate(spec.tolerations):
        try:
            tolerations.append(Toleration(key=t.key, operator=t.operator or "Equal", value=t.value,
                                          effect=t.effect))
        except ValueError as exc:
            raise DemandError(f"spec.tolerations[{i}]: {exc}") from None
    pinned_gpus = parse_gpu_indices(meta.annotations.get(GPUS_ANNOTATION, ""))
    gpu_milli = _gpu_milli(meta.annotations.get(GPU_MILLI_ANNOTATION, ""), requests.gpus, pinned, pinned_gpus)
    return PodDemand(
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        gpus=requests.gpus,
        pinned_node=pinned,
        pinned_gpus=pinned_gpus,
        job_uid=meta.labels.get(JOB_UID_LABEL) or None,
        node_selector=dict(spec.node_selector),
        node_name=spec.node_name,
        pod_index=pod_index,
        tolerations=tuple(tolerations),
        cpu_milli=requests.cpu_milli,
        memory_mib=requests.memory_mib,
        gpu_milli=gpu_milli,
        source=selected_source(meta.labels, spec.scheduling_group.pod_group_name if spec.scheduling_group else None),
    )
