"""What turns a model into a Kubernetes kind: the root model base and its CRD facts.

A kind is a :class:`Resource` subclass with ``apiVersion``, ``kind``, ``metadata``, ``spec`` and
(optionally) ``status``, plus a ``crd`` class attribute (:class:`KindInfo`) holding what the schema
cannot say: plural, short names, scope, printer columns. The CRD generator reads nothing else.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from kubegang.api._common import API_VERSION, ApiModel, ObjectMeta

ColumnType = Literal["string", "integer", "number", "boolean", "date"]


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry of ``kubectl get``."""

    name: str
    """Column header."""
    type: ColumnType
    """How kubectl formats the value (``date`` prints an age)."""
    json_path: str
    """Where the value is, e.g. ``.status.phase``."""
    description: str = ""
    """Shown by ``kubectl explain``-like tools."""
    priority: int = 0
    """0: always shown; 1: only with ``-o wide``."""


@dataclasses.dataclass(frozen=True)
class KindInfo:
    """The facts about a kind that live in the CRD but not in its schema."""

    kind: str
    """CamelCase kind, e.g. ``GPUJob``."""
    plural: str
    """Lower-case plural, the resource name in URLs (``gpujobs``)."""
    short_names: tuple[str, ...]
    """``kubectl get gj``."""
    scope: Literal["Namespaced", "Cluster"]
    """Whether objects live in a namespace."""
    printer_columns: tuple[PrinterColumn, ...] = ()
    """Extra ``kubectl get`` columns (AGE is appended by the generator)."""
    selectable_fields: tuple[str, ...] = ()
    """JSON paths usable with ``--field-selector`` (e.g. ``.spec.queue``)."""
    categories: tuple[str, ...] = ("kubegang",)
    """``kubectl get kubegang`` lists every kind in this category."""

    @property
    def singular(self) -> str:
        """Lower-case singular name."""
        return self.kind.lower()


class Resource(ApiModel):
    """Base of every kind's root model."""

    crd: ClassVar[KindInfo]
    """Set by each kind; read by the CRD generator and by :func:`kubegang.api.parse_manifest`."""

    api_version: str = API_VERSION
    """Always ``kubegang.io/v1alpha1``."""
    kind: str
    """The kind's name."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""

    @field_validator("api_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        if value != API_VERSION:
            raise ValueError(f"must be {API_VERSION!r}, got {value!r}")
        return value
