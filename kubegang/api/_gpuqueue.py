"""GPUQueue: one node of the quota tree (``spec.parent``), with per-flavour quotas and a weight.

One kind serves every level of the tree; jobs enter leaves only. What the schema can see (a queue
that is its own parent, a lending limit above nominal, limits on a root that has no one to borrow
from) is refused at ``kubectl apply``; a longer cycle through several queues needs the whole tree,
so the operator reports it as a condition instead. As in GPUJob, every CEL rule has a Python twin.
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kubegang.api._common import (
    CONDITIONS_SCHEMA_EXTRA,
    NAME_PATTERN,
    SET_SCHEMA_EXTRA,
    ApiModel,
    Condition,
    cel,
    cel_rules,
)
from kubegang.api._resource import KindInfo, PrinterColumn, Resource

FLAVOR_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$"
"""A GPU flavour: a product (``nvidia-h200``) or a MIG profile (``nvidia.com/mig-1g.18gb``)."""

NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1123 label: what Kubernetes accepts as a namespace name."""


_LEND_OWNED = "lendingLimit cannot exceed nominal (a queue lends only what it owns)"
_LIMITS_NEED_PARENT = (
    "borrowingLimit and lendingLimit need spec.parent: a root queue has no one to borrow from or lend to"
)
_OWN_PARENT = "a GPUQueue cannot be its own parent"


class FlavorQuota(ApiModel):
    """The queue's quota for one GPU flavour, in GPUs."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "!has(self.lendingLimit) || self.lendingLimit <= self.nominal",
                _LEND_OWNED,
                field_path=".lendingLimit",
                reason="FieldValueInvalid",
            )
        )
    )

    flavor: str = Field(min_length=1, max_length=253, pattern=FLAVOR_PATTERN)
    """The GPU flavour (product or MIG profile) this quota counts."""
    nominal: int = Field(ge=0, strict=True)
    """GPUs the queue is guaranteed."""
    borrowing_limit: int | None = Field(default=None, ge=0, strict=True)
    """GPUs the queue may borrow above nominal from its parent's pool; unset means unlimited."""
    lending_limit: int | None = Field(default=None, ge=0, strict=True)
    """GPUs of its nominal quota the queue lends to siblings when idle; unset means all of it."""

    @model_validator(mode="after")
    def _lend_only_owned(self) -> Self:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise ValueError(f"{_LEND_OWNED}: lendingLimit {self.lending_limit} > nominal {self.nominal}")
        return self


WithinQueuePolicy = Literal["Never", "LowerPriority"]
ReclaimPolicy = Literal["Never", "Any", "LowerPriority"]


class PreemptionPolicy(ApiModel):
    """Which running gangs a waiting gang of this queue may preempt."""

    within_queue: WithinQueuePolicy = "Never"
    """``LowerPriority``: gangs of lower priority in this queue."""
    reclaim_from_borrowers: ReclaimPolicy = "Never"
    """To get its nominal quota back: ``Any`` borrower, or only ``LowerPriority`` ones."""
    borrow_within_parent: WithinQueuePolicy = "Never"
    """``LowerPriority``: while borrowing, gangs of lower priority elsewhere under the parent."""


class BackfillSettings(ApiModel):
    """When a blocked job at the head of this leaf reserves the nodes it needs (EASY backfill)."""

    reserve_after_seconds: int | None = Field(default=None, ge=0, le=7 * 86400, strict=True)
    """Seconds a job that fits in quota may wait for GPUs before it reserves its nodes, so later jobs
    stop taking them; unset: the operator's ``--backfill-reserve-after`` (48 h by default)."""


class GPUQueueSpec(ApiModel):
    """A queue's place in the tree, its quotas and its policy."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                # ``has`` first: the schema gives ``resources`` no default, and CEL refuses a missing key
                # ("no such key"), which turned a root queue without resources into this error.
                "has(self.parent) || !has(self.resources) "
                "|| self.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))",
                _LIMITS_NEED_PARENT,
                field_path=".resources",
                reason="FieldValueForbidden",
            )
        )
    )

    parent: str | None = Field(default=None, min_length=1, max_length=253, pattern=NAME_PATTERN)
    """The parent GPUQueue; unset for a root."""
    weight: float = Field(default=1.0, gt=0, strict=True)
    """Fair-share weight among siblings: a queue with twice the weight gets twice the share."""
    namespaces: list[Annotated[str, Field(max_length=63, pattern=NAMESPACE_PATTERN)]] = Field(
        default_factory=list, max_length=256, json_schema_extra=SET_SCHEMA_EXTRA
    )
    """Namespaces whose GPUJobs may use this queue (leaves only); empty: every namespace."""
    priority: int | None = Field(default=None, ge=-2147483648, le=1000000000, strict=True)
    """Priority of this queue's jobs that set neither priority nor priorityClassName."""
    resources: list[FlavorQuota] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["flavor"]},
    )
    """Quota per GPU flavour, at most one entry per flavour."""
    preemption: PreemptionPolicy = Field(default_factory=PreemptionPolicy, json_schema_extra={"default": {}})
    """Preemption policy (every threshold defaults to Never)."""
    backfill: BackfillSettings = Field(default_factory=BackfillSettings, json_schema_extra={"default": {}})
    """Backfill reservations of this leaf's blocked jobs."""

    @model_validator(mode="after")
    def _limits_need_parent(self) -> Self:
        if self.parent is None:
            limited = [q.flavor for q in self.resources if q.borrowing_limit is not None or q.lending_limit is not None]
            if limited:
                raise ValueError(f"resources ({', '.join(limited)}): {_LIMITS_NEED_PARENT}")
        flavors = [q.flavor for q in self.resources]
        duplicates = sorted({f for f in flavors if flavors.count(f) > 1})
        if duplicates:
            raise ValueError(f"resources: flavor {', '.join(duplicates)} listed more than once")
        if len(set(self.namespaces)) != len(self.namespaces):
            raise ValueError("namespaces: a namespace is listed more than once")
        return self


class FlavorAmount(ApiModel):
    """GPUs of one flavour."""

    flavor: str
    """The GPU flavour."""
    gpus: float = Field(ge=0)
    """GPUs (fractions count shared-GPU jobs)."""


class QueueConditionType(enum.StrEnum):
    """Condition types a GPUQueue carries."""

    ACTIVE = "Active"
    """True: the queue is in the quota tree and its jobs are admitted; False: it is left out of the
    tree (the reason says why), and so is every queue under it."""


class QueueConditionReason(enum.StrEnum):
    """Reasons of a GPUQueue's ``Active`` condition."""

    IN_TREE = "InQuotaTree"
    PARENT_NOT_FOUND = "ParentNotFound"
    PARENT_CYCLE = "ParentCycle"
    INVALID_SPEC = "InvalidSpec"
    PARENT_INACTIVE = "ParentInactive"
    """A queue above it is left out of the tree: its subtree's quota cannot be counted without it."""


class GPUQueueStatus(ApiModel):
    """What the operator counts for this queue (its subtree included)."""

    usage: list[FlavorAmount] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["flavor"]},
    )
    """GPUs in use per flavour by admitted jobs."""
    borrowed: list[FlavorAmount] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["flavor"]},
    )
    """GPUs in use above nominal per flavour."""
    used_gpus: float | None = Field(default=None, ge=0, alias="usedGPUs")
    """GPUs in use, all flavours together."""
    pending: int | None = Field(default=None, ge=0)
    """Jobs waiting for admission."""
    admitted: int | None = Field(default=None, ge=0)
    """Jobs admitted and not finished."""
    fair_share: float | None = Field(default=None, ge=0)
    """Weighted dominant share (Kueue's): 0 while the queue uses no more than its nominal quota, then
    what it borrows over its parent's reach, divided by weight; lower is served first."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation this status describes."""
    conditions: list[Condition] = Field(default_factory=list, max_length=32, json_schema_extra=CONDITIONS_SCHEMA_EXTRA)
    """Conditions: ``Active`` says whether the queue is in the quota tree, and if not, why (a parent
    that does not exist, a cycle of parents)."""


class GPUQueue(Resource):
    """A node of the GPU quota tree; jobs name a leaf in ``spec.queue``."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
                _OWN_PARENT,
                field_path=".spec.parent",
                reason="FieldValueInvalid",
            )
        )
    )

    crd: ClassVar[KindInfo] = KindInfo(
        kind="GPUQueue",
        plural="gpuqueues",
        short_names=("gq",),
        scope="Cluster",
        printer_columns=(
            PrinterColumn("Parent", "string", ".spec.parent", "Parent queue"),
            PrinterColumn("Weight", "number", ".spec.weight", "Fair-share weight"),
            PrinterColumn("Usage", "number", ".status.usedGPUs", "GPUs in use"),
            PrinterColumn("Pending", "integer", ".status.pending", "Jobs waiting"),
            PrinterColumn("Admitted", "integer", ".status.admitted", "Jobs admitted", 1),
            PrinterColumn("Share", "number", ".status.fairShare", "Fair-share value", 1),
        ),
        selectable_fields=(".spec.parent",),
    )

    kind: Literal["GPUQueue"] = "GPUQueue"
    """Always ``GPUQueue``."""
    spec: GPUQueueSpec
    """Place in the tree, quotas, policy."""
    status: GPUQueueStatus | None = None
    """Observed usage, written by the operator."""

    @model_validator(mode="after")
    def _not_own_parent(self) -> Self:
        if self.spec.parent is not None and self.spec.parent == self.metadata.name:
            raise ValueError(f"spec.parent: {_OWN_PARENT} ({self.spec.parent!r})")
        return self
