"""The operator's read-only view of one GPUJob.

The spec is the API model (``kubegang.api.GPUJobSpec``, the same rules as the CRD schema), so
defaults and GPU counting are defined once. Status is kept as the raw mapping the API returned: the
operator writes it as merge patches, and reads back only the fields it wrote (``placement`` through
the API's ``Placement`` model).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
from collections.abc import Mapping
from typing import Any

import pydantic

from kubegang.api import (
    GPU_RESOURCE,
    GPUJob,
    GPUJobSpec,
    GPUJobStatus,
    Placement,
    PodRequests,
    RequestError,
    pod_spec_requests,
    replica_gpu_milli,
)
from kubegang.operator._conditions import Phase, parse_rfc3339
from kubegang.placement import MILLI, Toleration


class JobSpecError(ValueError):
    """A GPUJob field the operator cannot act on; the message names the field."""


@dataclasses.dataclass(frozen=True)
class JobView:
    """What the operator reads from a GPUJob object: its identity, the typed spec and the status.

    The spec is the API model itself (``GPUJobSpec``, the same rules as the CRD schema), never a copy
    of its fields, so a field the API gains is one the operator has. The properties below only name
    what the operator asks most often.
    """

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
    spec: GPUJobSpec
    """The job's spec, as the API model parsed it."""
    status: Mapping[str, Any]
    """status as last seen (phase, conditions, admission, restarts): the operator writes it as merge
    patches and reads back the fields it wrote."""
    template: Mapping[str, Any]
    """spec.template as the pods are built from it (unknown fields included), dumped once per spec."""
    pod: PodRequests
    """What each pod of the gang asks for, counted by the one rule (:func:`kubegang.api.pod_requests`)
    over the pod as the operator builds it (``gpusPerReplica`` included)."""
    tolerations: tuple[Toleration, ...] = ()
    """The template's tolerations: placement must see the tainted GPU nodes the pods may use."""
    flavor: str | None = None
    """The quota flavour assigned for this admission attempt (Kueue's flavour assignment); None on
    the view read from the API, set on the views ``QuotaPort.flavor_options`` returns."""
    flavor_product: str | None = None
    """The GPU product placement must use because the assigned flavour is one (None: ``spec.gpuProduct``)."""
    resource_version: str = ""
    """metadata.resourceVersion as read: the precondition of a fenced status write."""

    @property
    def key(self) -> str:
        """``namespace/name``, the form used in logs, events and messages."""
        return f"{self.namespace}/{self.name}"

    @property
    def replicas(self) -> int:
        """spec.replicas: pods in the gang."""
        return self.spec.replicas

    @property
    def queue(self) -> str:
        """spec.queue: the leaf GPUQueue the job enters."""
        return self.spec.queue

    @property
    def gpu_product(self) -> str | None:
        """The GPU product the gang must be placed on (its flavour's, or spec.gpuProduct)."""
        return self.flavor_product or self.spec.gpu_product

    @property
    def gpus_per_replica(self) -> int:
        """Whole GPUs each pod gets (0 for a shared-GPU pod)."""
        return self.pod.gpus

    @property
    def gpu_milli(self) -> int:
        """spec.gpuFraction: thousandths of one shared GPU (0 for whole-GPU jobs)."""
        return self.spec.gpu_fraction or 0

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the whole gang needs."""
        return self.replicas * self.gpus_per_replica

    @property
    def gpu_milli_per_replica(self) -> int:
        """One pod's GPU demand in thousandths of a GPU: the spec's rule (``replica_gpu_milli``) over the
        count made once per view (``pod``). The spec's own method dumps and counts the template on every
        call, which the supervisor's every look at a job paid (5% of the leader in a burst's profile)."""
        return replica_gpu_milli(self.spec.gpu_fraction, self.gpus_per_replica)

    @property
    def requested_gpus(self) -> float:
        """GPUs the whole gang asks for, a share of one GPU included (``status.totalGPUs``)."""
        return self.replicas * self.gpu_milli_per_replica / MILLI

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

    @functools.cached_property
    def attempt(self) -> str:
        """Identity of the current admission, stamped on its pods (label kubegang.io/attempt).

        Derived from ``admittedAt`` so it survives a leader change without a status field of its own;
        pods of any other attempt are stale. Derived once per view: the supervisor compares it with
        every pod of the job on every look.
        """
        return "".join(ch for ch in (self.admitted_at or "none") if ch.isalnum())

    @property
    def pods_created_at(self) -> str | None:
        """status.podsCreatedAt: when the current attempt's pods were created (assumed, then written)."""
        value = self.status.get("podsCreatedAt")
        return str(value) if value else None

    @property
    def ready_replicas(self) -> int | None:
        """status.readyReplicas as last written (None before the first write)."""
        value = self.status.get("readyReplicas")
        return int(value) if value is not None else None

    @property
    def excluded_nodes(self) -> frozenset[str]:
        """status.excludedNodes: nodes that failed to bind this gang in time."""
        return frozenset(self.status.get("excludedNodes") or ())

    @property
    def previous_domain(self) -> str | None:
        """Where the gang last ran (status.placement.domain): preferred again when it is placed anew."""
        placement = self.placement
        return placement.domain if placement is not None else None

    @property
    def requests_gpus(self) -> bool:
        """Whether its pods ask for any GPU (whole GPUs or a share of one)."""
        return self.gpus_per_replica > 0 or self.gpu_milli > 0

    @property
    def time_limit(self) -> float | None:
        """spec.timeLimitSeconds: how long the gang may run once Running (None: no limit)."""
        limit = self.spec.time_limit_seconds
        return float(limit) if limit is not None else None

    def status_time(self, field: str) -> dt.datetime | None:
        """A timestamp of the status (``admittedAt``, ``startedAt``, ...); None when absent or malformed."""
        raw = self.status.get(field)
        if not isinstance(raw, str):
            return None
        try:
            return parse_rfc3339(raw)
        except ValueError:
            return None

    @property
    def started_at(self) -> dt.datetime | None:
        """status.startedAt: when every replica of the current attempt was last seen Running."""
        return self.status_time("startedAt")

    @functools.cached_property
    def placement(self) -> Placement | None:
        """status.placement, parsed (the one place that reads it); None when absent or malformed.

        Parsed once per view: a view is immutable, and a status the operator changes is a new view."""
        raw = self.status.get("placement")
        if not isinstance(raw, Mapping):
            return None
        try:
            return Placement.model_validate(raw)
        except pydantic.ValidationError:
            return None


def job_view(body: Mapping[str, Any]) -> JobView:
    """The view of a GPUJob object; JobSpecError names the first field it cannot use."""
    try:
        model = GPUJob.model_validate({k: v for k, v in body.items() if k != "status"})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        # A rule over several fields is raised by a model validator (no location): its message names them.
        message = first["msg"].removeprefix("Value error, ")
        raise JobSpecError(f"{field}: {message}" if field else message) from None
    meta = model.metadata
    spec = model.spec
    for field in ("name", "namespace", "uid"):
        if not getattr(meta, field):
            raise JobSpecError(f"metadata.{field} is required")
    template = spec.template.as_dict()
    pod_spec = template.get("spec") or {}
    try:
        requests = pod_spec_requests(with_gpu_limit(pod_spec, spec.gpus_per_replica), where="spec.template.spec")
    except RequestError as exc:
        raise JobSpecError(str(exc)) from None
    return JobView(
        name=str(meta.name),
        namespace=str(meta.namespace),
        uid=str(meta.uid),
        generation=int(meta.generation or 1),
        resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
        created=meta.creation_timestamp or dt.datetime.now(dt.UTC),
        spec=spec,
        status=body.get("status") or {},
        template=template,
        pod=requests,
        tolerations=tolerations_of(pod_spec),
    )


def with_gpu_limit(pod_spec: Mapping[str, Any], gpus: int | None) -> dict[str, Any]:
    """``pod_spec`` with ``spec.gpusPerReplica`` written as the first container's GPU limit and request.

    The schema refuses a template that sets a GPU limit of its own together with ``gpusPerReplica``,
    so this never overrides what the user wrote. The pod builder and the gang request both use it, so
    the pods carry exactly the GPUs that were planned and charged.
    """
    spec = copy.deepcopy(dict(pod_spec))
    if gpus is None:
        return spec
    containers = spec.get("containers") or []
    if containers:
        resources = containers[0].setdefault("resources", {})
        for key in ("limits", "requests"):
            resources[key] = {**(resources.get(key) or {}), GPU_RESOURCE: gpus}
    return spec


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


def status_fields(fields: GPUJobStatus) -> dict[str, Any]:
    """The merge patch that writes the fields set on ``fields`` (a field set to None deletes it).

    Status is written through the API model, so every key is a field mypy checks (the pydantic
    plugin types the constructor) and the wire name and format come from the model that makes the
    CRD schema: ``GPUJobStatus(admitted_at=now, pods_created_at=None)`` -> ``{"admittedAt": "...Z",
    "podsCreatedAt": None}``.
    """
    return fields.model_dump(mode="json", by_alias=True, exclude_unset=True)


def timestamp(moment: dt.datetime) -> dt.datetime:
    """``moment`` as status records it: UTC, whole seconds (what ``kubectl`` shows and labels derive from)."""
    return moment.astimezone(dt.UTC).replace(microsecond=0)
