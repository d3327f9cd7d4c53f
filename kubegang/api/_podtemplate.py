"""The per-replica pod template: opaque except for what kubegang reads (containers' GPU limits).

Why partly typed: the template is a whole PodTemplateSpec that the operator copies into every pod,
and kube-apiserver validates it properly only when a pod is created, which for a gang is after
admission. The one thing kubegang needs from it, the ``nvidia.com/gpu`` limit, is declared (and
checked at ``kubectl apply`` time by a CEL rule) so a bad GPU count fails early; every other field
is preserved unknown.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from pydantic import Field, StrictInt, StrictStr, field_validator

from kubegang.api._common import OpenModel, cel, cel_rules
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


class ResourceRequirements(OpenModel):
    """A container's ``resources``; only ``limits`` is read."""

    limits: dict[str, QuantityValue] | None = Field(
        default=None, max_length=64, json_schema_extra=cel_rules(GPU_LIMIT_RULE)
    )
    """Resource limits; ``nvidia.com/gpu`` gives the replica's GPU count."""

    @field_validator("limits")
    @classmethod
    def _gpu_limit_is_whole(cls, limits: dict[str, int | str] | None) -> dict[str, int | str] | None:
        if limits is not None and GPU_RESOURCE in limits:
            try:
                whole_count(limits[GPU_RESOURCE])
            except ValueError as error:
                raise ValueError(f"{GPU_LIMIT_MESSAGE}: {error}") from None
        return limits

    def gpus(self) -> int | None:
        """The ``nvidia.com/gpu`` limit, or None when there is none."""
        if self.limits is None or GPU_RESOURCE not in self.limits:
            return None
        return whole_count(self.limits[GPU_RESOURCE])


class Container(OpenModel):
    """One container of the template; only ``name`` and ``resources`` are read."""

    name: str = Field(min_length=1, max_length=63)
    """Container name."""
    resources: ResourceRequirements | None = None
    """Compute resources."""


class PodSpec(OpenModel):
    """The template's pod spec; only ``containers`` is read."""

    containers: list[Container] = Field(min_length=1, max_length=256)
    """The pod's containers (at least one)."""


class PodTemplateSpec(OpenModel):
    """A PodTemplateSpec (``metadata`` and ``spec``), kept whole for the pods the operator creates."""

    spec: PodSpec
    """The pod spec."""

    def sets_gpus(self) -> bool:
        """Whether some container names an ``nvidia.com/gpu`` limit (the count is then given here)."""
        return any(c.resources is not None and c.resources.gpus() is not None for c in self.spec.containers)

    def requests(self) -> PodRequests:
        """What one pod of this template asks for (:func:`kubegang.api.pod_requests`, the one rule)."""
        return pod_spec_requests(self.as_dict()["spec"], where="spec.template.spec")

    def as_dict(self) -> dict[str, Any]:
        """The template as the operator copies it into a pod (unknown fields included)."""
        return self.model_dump(mode="json", exclude_none=True)


HAS_TEMPLATE_GPU_LIMIT = (
    "self.template.spec.containers.exists(c, has(c.resources) && has(c.resources.limits)"
    f" && '{GPU_RESOURCE}' in c.resources.limits)"
)
"""CEL: whether some container of ``self.template`` (self = a GPUJob spec) sets a GPU limit."""
