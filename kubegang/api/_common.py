"""Building blocks shared by every kind: the model base, object metadata, conditions, CEL rules.

Why one base: every API model must refuse unknown fields (as kube-apiserver does under
``kubectl apply``'s default strict field validation), speak camelCase on the wire while staying
snake_case in Python, and carry its field docstrings into the CRD schema so ``kubectl explain``
shows the same text as the code. ``ApiModel`` sets that once.

CEL rules (``x-kubernetes-validations``) are attached to the model they constrain with
:func:`cel_rules`, right next to the Python validator that mirrors them, so the two are read (and
changed) together.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "kubegang.io"
"""The API group of every kubegang kind."""
VERSION = "v1alpha1"
"""The only served (and stored) version."""
API_VERSION = f"{GROUP}/{VERSION}"
"""``apiVersion`` of every kubegang object."""

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS-1123 subdomain: what Kubernetes accepts as an object name."""

INT32_MAX = 2**31 - 1
"""The bound of Kubernetes' own int32 fields (a batch Job's ``ttlSecondsAfterFinished``,
``activeDeadlineSeconds``); durations beyond it are typos, and the operator's timers stay within
what a date can hold."""


class ApiModel(BaseModel):
    """Base of every kubegang API model: strict about unknown fields, camelCase on the wire."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optional fields left out, timestamps as RFC 3339."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


PRESERVE_UNKNOWN: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
"""The schema of an :class:`OpenModel`: fields it does not declare are kept. A subclass that adds its own
``json_schema_extra`` (CEL rules) spreads this into it, since pydantic replaces that key, not merges it."""


class OpenModel(BaseModel):
    """Base of the partly typed, otherwise opaque parts (the pod template): unknown fields are kept.

    Only the fields kubegang reads are declared, so they are validated (in Python and in the schema)
    while the rest of a PodTemplateSpec passes through untouched for the pod that will carry it.
    """

    model_config = ConfigDict(
        extra="allow",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        json_schema_extra=PRESERVE_UNKNOWN,
    )


def cel(rule: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry; ``field_path`` points the error at a field."""
    entry = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` that attaches CEL ``rules`` to a model's schema."""
    return {"x-kubernetes-validations": list(rules)}


class ObjectMeta(BaseModel):
    """The parts of ``metadata`` kubegang reads; everything else the API server sets is kept as is."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True)

    name: str | None = None
    """Object name (absent only in a manifest that uses generateName)."""
    namespace: str | None = None
    """Namespace (namespaced kinds only)."""
    uid: str | None = None
    """Set by the API server."""
    generation: int | None = None
    """Incremented by the API server on every spec change."""
    labels: dict[str, str] | None = None
    """Labels."""
    annotations: dict[str, str] | None = None
    """Annotations."""
    creation_timestamp: dt.datetime | None = None
    """Set by the API server."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """A metav1.Condition: one observed aspect of an object, with a reason a human can act on."""

    type: str = Field(min_length=1, max_length=316)
    """The aspect (Queued, Admitted, Running, ...); at most one condition of each type."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """A CamelCase, machine-readable cause."""
    message: str = Field(default="", max_length=32768)
    """A sentence for humans: what happened and what to do about it."""
    last_transition_time: dt.datetime
    """When status last changed (not when the condition was last written)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed from."""


CONDITIONS_SCHEMA_EXTRA: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}
"""``json_schema_extra`` of a conditions list: one entry per type, merged by type on apply."""

SET_SCHEMA_EXTRA: dict[str, Any] = {"x-kubernetes-list-type": "set"}
"""``json_schema_extra`` of a list of unique scalars."""
