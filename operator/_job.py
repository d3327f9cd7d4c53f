"""The operator's read-only view of one GPUJob.

The controllers need a dozen facts about a job (its gang shape, queue, limits) and its identity.
Reading them in one place means every controller agrees on defaults, and a malformed object is
refused once, with an error that names the field, rather than deep inside a handler.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubegang.operator._conditions import Phase, parse_rfc3339

GPU_RESOURCE = "nvidia.com/gpu"

FRAMEWORKS = ("none", "torchrun", "mpi")


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
    """GPUs each pod gets (spec.gpusPerReplica, or the template's nvidia.com/gpu limit)."""
    template: Mapping[str, Any]
    """spec.template: the per-replica pod template."""
    queue: str
    """spec.queue: the leaf GPUQueue the job enters."""
    priority_class: str | None
    """spec.priorityClassName, copied onto every pod."""
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
    def attempt(self) -> int:
        """status.attempt: bumped whenever the gang is torn down and requeued (labels its pods)."""
        return int(self.status.get("attempt") or 0)

    @property
    def admission(self) -> Mapping[str, Any] | None:
        """status.admission: the recorded admission (placement, admitted time), if any."""
        value = self.status.get("admission")
        return value if isinstance(value, Mapping) else None


def _int_field(spec: Mapping[str, Any], field: str, default: int | None, minimum: int) -> int | None:
    value = spec.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobSpecError(f"spec.{field} must be an integer >= {minimum}, got {value!r}")
    return value


def _template_gpus(template: Mapping[str, Any]) -> int:
    total = 0
    for container in (template.get("spec") or {}).get("containers") or []:
        limits = ((container or {}).get("resources") or {}).get("limits") or {}
        raw = limits.get(GPU_RESOURCE)
        if raw is None:
            continue
        try:
            total += int(str(raw))
        except ValueError:
            raise JobSpecError(
                f"spec.template.spec.containers[].resources.limits[{GPU_RESOURCE}] must be a whole "
                f"number, got {raw!r}"
            ) from None
    return total


def job_view(body: Mapping[str, Any]) -> JobView:
    """The view of a GPUJob object; JobSpecError names the first field it cannot use."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    for field in ("name", "namespace", "uid"):
        if not meta.get(field):
            raise JobSpecError(f"metadata.{field} is required")
    replicas = _int_field(spec, "replicas", None, 1)
    if replicas is None:
        raise JobSpecError("spec.replicas is required (an integer >= 1)")
    template = spec.get("template") or {}
    if not isinstance(template, Mapping):
        raise JobSpecError("spec.template must be a pod template object")
    gpus = _int_field(spec, "gpusPerReplica", None, 0)
    if gpus is None:
        gpus = _template_gpus(template)
    queue = spec.get("queue")
    if not isinstance(queue, str) or not queue:
        raise JobSpecError("spec.queue is required: the name of a leaf GPUQueue")
    framework = spec.get("framework") or "none"
    if framework not in FRAMEWORKS:
        raise JobSpecError(f"spec.framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    topology = spec.get("topology") or {}
    created_raw = meta.get("creationTimestamp")
    created = parse_rfc3339(created_raw) if created_raw else dt.datetime.now(dt.UTC)
    return JobView(
        name=str(meta["name"]),
        namespace=str(meta["namespace"]),
        uid=str(meta["uid"]),
        generation=int(meta.get("generation") or 1),
        created=created,
        replicas=replicas,
        gpus_per_replica=gpus,
        template=template,
        queue=queue,
        priority_class=spec.get("priorityClassName"),
        framework=str(framework),
        required_level=topology.get("required"),
        preferred_level=topology.get("preferred"),
        restart_limit=_int_field(spec, "restartLimit", 3, 0) or 0,
        gang_timeout_seconds=_int_field(spec, "gangTimeoutSeconds", 300, 1) or 300,
        suspend=bool(spec.get("suspend", False)),
        ttl_seconds_after_finished=_int_field(spec, "ttlSecondsAfterFinished", None, 0),
        status=body.get("status") or {},
    )
