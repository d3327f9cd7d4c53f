"""The per-replica pod template: opaque except for what kubegang reads (containers' GPU limits).

Why partly typed: the template is a whole PodTemplateSpec that the operator copies into every pod,
and kube-apiserver validates it properly only when a pod is created, which for a gang is after
admission. The one thing kubegang needs from it, the ``nvidia.com/gpu`` limit, is declared (and
checked at ``kubectl apply`` time by a CEL rule) so a bad GPU count fails early; every other field
is preserved unknown.
"""

from __future__ import annotations

from typing import Annotated, Any, Self, TypeAlias

from pydantic import ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from kubegang.api._common import PRESERVE_UNKNOWN, OpenModel, cel, cel_rules
from kubegang.api._quantity import whole_count
from kubegang.api._requests import GPU_RESOURCE, PodRequests, pod_spec_requests

QuantityValue: TypeAlias = StrictInt | Annotated[StrictStr, Field(max_length=64)]
"""A resource quantity as written in a manifest: ``8`` or ``"8"``, ``"500m"``, ``"1Gi"``."""

_GPU = f"self['{GPU_RESOURCE}']"
GPU_LIMIT_MESSAGE = (
    f"{GPU_RESOURCE} must be a non-negative whole number of GPUs (use spec.gpuFraction for a share of one GPU)"
)
GPU_LIMIT_RULE = cel(
    f"!('{GPU_RESOURCE}' in self) || (type({_GPU}) == int ? {_GPU} >= 0 : "
    f"(isQuantity({_GPU}) && quantity({_GPU}).isInteger() && !quantity({_GPU}).isLessThan(quantity('0'))))",
    GPU_LIMIT_MESSAGE,
    reason="FieldValueInvalid",
)
"""CEL twin of :meth:`ResourceRequirements._gpu_limit_is_whole`."""


_REQUEST, _LIMIT = f"self.requests['{GPU_RESOURCE}']", f"self.limits['{GPU_RESOURCE}']"
GPU_REQUEST_MESSAGE = (
    f"an {GPU_RESOURCE} request needs a limit of the same count (Kubernetes does not overcommit "
    f"GPUs and refuses the pod otherwise); set limits.{GPU_RESOURCE}, the request may be left out"
)
GPU_REQUEST_RULE = cel(
    f"!has(self.requests) || !('{GPU_RESOURCE}' in self.requests) || (has(self.limits) && "
    f"'{GPU_RESOURCE}' in self.limits && (!isQuantity(string({_REQUEST})) || !isQuantity(string({_LIMIT})) || "
    f"quantity(string({_REQUEST})).compareTo(quantity(string({_LIMIT}))) == 0))",
    GPU_REQUEST_MESSAGE,
    reason="FieldValueInvalid",
)
"""CEL twin of :meth:`ResourceRequirements._gpu_request_is_the_limit`: what kube-apiserver demands of
an extended resource in a pod, checked at ``kubectl apply`` of the GPUJob instead of at pod creation,
after admission (where the job was requeued again and again, preempting others each time)."""


class ResourceRequirements(OpenModel):
    """A container's ``resources``: the GPU count in either map must be whole, and a GPU request
    must come with an equal limit (as Kubernetes demands of every extended resource)."""

    model_config = ConfigDict(json_schema_extra={**PRESERVE_UNKNOWN, **cel_rules(GPU_REQUEST_RULE)})

    limits: dict[str, QuantityValue] | None = Field(
        default=None, max_length=64, json_schema_extra=cel_rules(GPU_LIMIT_RULE)
    )
    """Resource limits; ``nvidia.com/gpu`` gives the replica's GPU count."""
    requests: dict[str, QuantityValue] | None = Field(
        default=None, max_length=64, json_schema_extra=cel_rules(GPU_LIMIT_RULE)
    )
    """Resource requests; an ``nvidia.com/gpu`` request must equal its limit (Kubernetes demands it)."""

    @field_validator("limits", "requests")
    @classmethod
    def _gpu_limit_is_whole(cls, limits: dict[str, int | str] | None) -> dict[str, int | str] | None:
        if limits is not None and GPU_RESOURCE in limits:
            try:
                whole_count(limits[GPU_RESOURCE])
            except ValueError as error:
                raise ValueError(f"{GPU_LIMIT_MESSAGE}: {error}") from None
        return limits

    @model_validator(mode="after")
    def _gpu_request_is_the_limit(self) -> Self:
        if self.requests is None or GPU_RESOURCE not in self.requests:
            return self
        if self.limits is None or GPU_RESOURCE not in self.limits:
            raise ValueError(GPU_REQUEST_MESSAGE)
        request, limit = whole_count(self.requests[GPU_RESOURCE]), whole_count(self.limits[GPU_RESOURCE])
        if request != limit:
            raise ValueError(f"{GPU_REQUEST_MESSAGE} (requests {request}, limits {limit})")
        return self

    def sets_gpus(self) -> bool:
        """Whether the limits or the requests name ``nvidia.com/gpu``."""
        return any(m is not None and GPU_RESOURCE in m for m in (self.limits, self.requests))


class Container(OpenModel):
    """One container of the template; only ``name`` and ``resources`` are read."""

    name: str = Field(min_length=1, max_length=63)
    """Container name."""
    resources: ResourceRequirements | None = None
    """Compute resources."""


class PodSpec(OpenModel):
    """The template's pod spec; the containers' resources and the node selector are read."""

    containers: list[Container] = Field(min_length=1, max_length=256)
    """The pod's containers (at least one)."""
    init_containers: list[Container] | None = Field(default=None, max_length=256, alias="initContainers")
    """Init containers, counted as kube-scheduler counts them: one that runs alone counts with the native
    sidecars (``restartPolicy: Always``) started before it, and sidecars also count beside the containers."""
    node_selector: dict[str, StrictStr] | None = Field(default=None, max_length=256, alias="nodeSelector")
    """Node labels the pods' nodes must carry; placement keeps to such nodes. Values are strings, as in
    any pod (``"true"``, not ``true``): the planner compares them with node labels."""


class PodTemplateSpec(OpenModel):
    """A PodTemplateSpec (``metadata`` and ``spec``), kept whole for the pods the operator creates."""

    spec: PodSpec
    """The pod spec."""

    def sets_gpus(self) -> bool:
        """Whether some container or init container names ``nvidia.com/gpu`` (the count is given here)."""
        containers = [*self.spec.containers, *(self.spec.init_containers or ())]
        return any(c.resources is not None and c.resources.sets_gpus() for c in containers)

    def requests(self) -> PodRequests:
        """What one pod of this template asks for (:func:`kubegang.api.pod_requests`, the one rule)."""
        return pod_spec_requests(self.as_dict()["spec"], where="spec.template.spec")

    def as_dict(self) -> dict[str, Any]:
        """The template as the operator copies it into a pod (unknown fields included)."""
        return self.model_dump(mode="json", exclude_none=True)


_NAMES_GPUS = (
    f"has(c.resources) && ((has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits) || "
    f"(has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests))"
)
HAS_TEMPLATE_GPU_LIMIT = (
    f"self.template.spec.containers.exists(c, {_NAMES_GPUS}) || "
    f"(has(self.template.spec.initContainers) && self.template.spec.initContainers.exists(c, {_NAMES_GPUS}))"
)
"""CEL twin of :meth:`PodTemplateSpec.sets_gpus` (self = a GPUJob spec)."""
