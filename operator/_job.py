"""The operator's read-only view of one GPUJob.

The spec is parsed by the API model (``kubegang.api.GPUJob``, the same rules as the CRD schema), so
defaults and GPU counting are defined once. Status is kept as the raw mapping the API returned: the
operator writes it, and reads back only the fields it wrote.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pydantic

from kubegang.api import GPUJob, parse_quantity
from kubegang.operator._conditions import Phase
from kubegang.placement import Toleration


class JobSpecError(ValueError):
    """A GPUJob field the operator cannot act on; the message names the field."""


@dataclasses.dataclass(frozen=True)
class JobView:
    """What the operator reads from a GPUJob object (spec, identity and status)."""

    name: str
    """metadata.name; pods are named ``<name>-<index>``."""
    namespace: str
    """metadata.namespace."""
    uid: str
    """metadata.uid; the key of the extender's reservation and of the quota ledger."""
    generation: int
    """metadata.generation, echoed as status.observedGeneration."""
    created: dt.datetime
    """metadata.creationTimestamp; FIFO order among equals and queue wait time."""
    replicas: int
    """spec.replicas: pods in the gang."""
    gpus_per_replica: int
    """Whole GPUs each pod gets (spec.gpusPerReplica, or the template's nvidia.com/gpu limit)."""
    gpu_product: str | None
    """spec.gpuProduct: the GPU model, which is also the job's quota flavour."""
    template: Mapping[str, Any]
    """spec.template: the per-replica pod template."""
    queue: str
    """spec.queue: the leaf GPUQueue the job enters."""
    priority_class: str | None
    """spec.priorityClassName, copied onto every pod."""
    priority: int | None
    """spec.priority: overrides the PriorityClass value for queueing and preemption."""
    framework: str
    """spec.framework: none, torchrun or mpi."""
    required_level: str | None
    """spec.topology.required."""
    preferred_level: str | None
    """spec.topology.preferred."""
    restart_limit: int
    """spec.restartLimit: whole-gang restarts allowed after a pod fails."""
    gang_timeout_seconds: int
    """spec.gangTimeoutSeconds: time from pod creation until every pod must be bound."""
    suspend: bool
    """spec.suspend: a suspended job holds nothing."""
    ttl_seconds_after_finished: int | None
    """spec.ttlSecondsAfterFinished: delete the finished job after this long."""
    status: Mapping[str, Any]
    """status as last seen (phase, conditions, admission, restarts)."""
    cpu_milli: int = 0
    """CPU one pod requests, in millicores (containers summed, the largest init container if more)."""
    memory_mib: int = 0
    """Memory one pod requests, in MiB (same rule as ``cpu_milli``)."""
    tolerations: tuple[Toleration, ...] = ()
    """The template's tolerations: placement must see the tainted GPU nodes the pods may use."""
    flavor: str | None = None
    """The quota flavour assigned for this admission attempt (Kueue's flavour assignment); None on
    the view read from the API, set on the views ``QuotaPort.flavor_options`` returns."""

    @property
    def key(self) -> str:
        """``namespace/name``, the form used in logs, events and messages."""
        return f"{self.namespace}/{self.name}"

    @property
    def total_gpus(self) -> int:
        """GPUs the whole gang needs."""
        return self.replicas * self.gpus_per_replica

    @property
    def phase(self) -> Phase:
        """status.phase, Pending when unset or unknown."""
        try:
            return Phase(self.status.get("phase") or Phase.PENDING)
        except ValueError:
            return Phase.PENDING

    @property
    def restarts(self) -> int:
        """status.restarts: whole-gang restarts so far."""
        return int(self.status.get("restarts") or 0)

    @property
    def admitted_at(self) -> str | None:
        """status.admittedAt: set while the job holds an admission."""
        value = self.status.get("admittedAt")
        return str(value) if value else None

    @property
    def attempt(self) -> str:
        """Identity of the current admission, stamped on its pods (label kubegang.io/attempt).

        Derived from ``admittedAt`` so it survives a leader change without a status field of its own;
        pods of any other attempt are stale.
        """
        return "".join(ch for ch in (self.admitted_at or "none") if ch.isalnum())

    @property
    def excluded_nodes(self) -> frozenset[str]:
        """status.excludedNodes: nodes that failed to bind this gang in time."""
        return frozenset(self.status.get("excludedNodes") or ())

    @property
    def previous_domain(self) -> str | None:
        """status.placement.domain: where the gang last ran (preferred again after a restart)."""
        placement = self.status.get("placement")
        return placement.get("domain") if isinstance(placement, Mapping) else None


def job_view(body: Mapping[str, Any]) -> JobView:
    """The view of a GPUJob object; JobSpecError names the first field it cannot use."""
    try:
        model = GPUJob.model_validate({k: v for k, v in body.items() if k != "status"})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise JobSpecError(f"{field}: {first['msg']}") from None
    meta = model.metadata
    spec = model.spec
    for field in ("name", "namespace", "uid"):
        if not getattr(meta, field):
            raise JobSpecError(f"metadata.{field} is required")
    raw_spec = body.get("spec") or {}
    template = raw_spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    cpu_milli, memory_mib = pod_requests(pod_spec)
    return JobView(
        name=str(meta.name),
        namespace=str(meta.namespace),
        uid=str(meta.uid),
        generation=int(meta.generation or 1),
        created=meta.creation_timestamp or dt.datetime.now(dt.UTC),
        replicas=spec.replicas,
        gpus_per_replica=spec.whole_gpus_per_replica(),
        gpu_product=spec.gpu_product,
        template=template,
        queue=spec.queue,
        priority_class=spec.priority_class_name,
        priority=spec.priority,
        framework=spec.framework,
        required_level=spec.topology.required,
        preferred_level=spec.topology.preferred,
        restart_limit=spec.restart_limit,
        gang_timeout_seconds=spec.gang_timeout_seconds,
        suspend=spec.suspend,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        status=body.get("status") or {},
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        tolerations=tolerations_of(pod_spec),
    )


_MIB = 1 << 20


def _request(container: Mapping[str, Any], resource: str, where: str) -> Decimal:
    resources = container.get("resources") or {}
    # Kubernetes defaults a missing request to the limit; a pod with neither asks for nothing.
    raw = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
    if raw is None:
        return Decimal(0)
    try:
        value = parse_quantity(raw if isinstance(raw, int | str) else str(raw))
    except ValueError as exc:
        raise JobSpecError(f"{where}.resources.requests.{resource}: {exc}") from None
    if value < 0:
        raise JobSpecError(f"{where}.resources.requests.{resource}: must not be negative, got {raw!r}")
    return value


def pod_requests(pod_spec: Mapping[str, Any]) -> tuple[int, int]:
    """(CPU millicores, memory MiB) one pod requests, with kube-scheduler's rule: the sum over
    containers, or the largest init container when that is more. Rounded up, so placement never
    counts a pod smaller than kube-scheduler will."""
    totals = []
    for resource, unit in (("cpu", Decimal("0.001")), ("memory", Decimal(_MIB))):
        spec = "spec.template.spec"
        running = sum(
            (_request(c, resource, f"{spec}.containers[{i}]") for i, c in enumerate(pod_spec.get("containers") or ())),
            Decimal(0),
        )
        init = max(
            (
                _request(c, resource, f"{spec}.initContainers[{i}]")
                for i, c in enumerate(pod_spec.get("initContainers") or ())
            ),
            default=Decimal(0),
        )
        totals.append(int(-(-max(running, init) // unit)))
    return totals[0], totals[1]


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """The template's tolerations in the core's form; JobSpecError names a bad one."""
    out = []
    for i, raw in enumerate(pod_spec.get("tolerations") or ()):
        if not isinstance(raw, Mapping):
            raise JobSpecError(f"spec.template.spec.tolerations[{i}]: expected an object")
        try:
            out.append(
                Toleration(
                    key=str(raw.get("key") or ""),
                    operator=str(raw.get("operator") or "Equal"),
                    value=str(raw.get("value") or ""),
                    effect=str(raw.get("effect") or ""),
                )
            )
        except ValueError as exc:
            raise JobSpecError(f"spec.template.spec.tolerations[{i}]: {exc}") from None
    return tuple(out)
