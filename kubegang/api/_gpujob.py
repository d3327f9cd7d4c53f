"""GPUJob: a gang of identical pods that starts all at once or not at all.

Every cross-field rule exists twice, side by side: a CEL rule in the schema (so ``kubectl apply``
refuses a bad manifest) and a pydantic validator (so the core and the operator can validate
without a cluster). A change to one must change the other; tests/unit/api checks both tables.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from typing import Annotated, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kubegang.api._common import (
    CONDITIONS_SCHEMA_EXTRA,
    INT32_MAX,
    NAME_PATTERN,
    SET_SCHEMA_EXTRA,
    ApiModel,
    Condition,
    cel,
    cel_rules,
)
from kubegang.api._levels import CEL_LEVEL_RANK, LEVEL_ORDER, LevelName, rank
from kubegang.api._podtemplate import HAS_TEMPLATE_GPU_LIMIT, PodTemplateSpec
from kubegang.api._requests import GPU_RESOURCE
from kubegang.api._resource import KindInfo, PrinterColumn, Resource

Framework = Literal["none", "torchrun", "mpi"]
"""How workers find each other: nothing, torchrun rendezvous env, or an MPI hostfile."""

MILLI = 1000
"""gpuFraction is counted in thousandths of one GPU."""


def replica_gpu_milli(gpu_fraction: int | None, whole_gpus: int) -> int:
    """One replica's GPU demand in thousandths of a GPU: its share of one GPU (``spec.gpuFraction``) when
    it has one, else its whole GPUs. The one rule, for the spec and for a reader that counted the whole
    GPUs once already (the operator's ``JobView``)."""
    return gpu_fraction if gpu_fraction is not None else whole_gpus * MILLI


class JobPhase(enum.StrEnum):
    """``status.phase``: the one-word summary printed by ``kubectl get``."""

    PENDING = "Pending"
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    UNSCHEDULABLE = "Unschedulable"


class JobConditionType(enum.StrEnum):
    """Condition types a GPUJob carries, at most one of each."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    UNSCHEDULABLE = "Unschedulable"
    SUSPENDED = "Suspended"


class Topology(ApiModel):
    """Where the gang may and should land, as topology level names (narrowest first: node, nvlink,
    leaf, spine, block, cluster)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                f"!has(self.required) || !has(self.preferred) || "
                f"{CEL_LEVEL_RANK}[self.preferred] <= {CEL_LEVEL_RANK}[self.required]",
                f"preferred must be narrower than or equal to required ({LEVEL_ORDER})",
                field_path=".preferred",
                reason="FieldValueInvalid",
            )
        )
    )

    required: LevelName | None = None
    """Every pod must be inside one domain of this level; the gang waits otherwise."""
    preferred: LevelName | None = None
    """Placement tries this (narrower or equal) level first and falls back to ``required``."""

    @model_validator(mode="after")
    def _preferred_not_wider(self) -> Self:
        if self.required and self.preferred and rank(self.preferred) > rank(self.required):
            raise ValueError(
                f"preferred ({self.preferred!r}) is wider than required ({self.required!r}); "
                f"preferred must be narrower than or equal to required ({LEVEL_ORDER})"
            )
        return self


class PodSourceKind(enum.StrEnum):
    """Which controller makes a gang's pods (``spec.podSource.kind``)."""

    RAY_CLUSTER = "RayCluster"
    POD_GROUP = "PodGroup"
    SCHEDULING_GROUP = "SchedulingGroup"
    """Kubernetes' own ``scheduling.k8s.io/v1alpha2`` PodGroup, named by the pods' ``spec.schedulingGroup``."""


class PodSource(ApiModel):
    """The gang's pods are made by another controller; kubegang admits, charges and places them.

    Written by the operator on the GPUJob that represents a labelled RayCluster or pod group
    (``kubegang.api._podsource``). With it the operator creates no pod, Service or ConfigMap: on
    admission it lets the source make its pods (a RayCluster is unsuspended), pins each GPU pod that
    appears to a slot of the placement, and on preemption or requeue takes them all away again (a
    RayCluster is suspended; a pod group's pods are deleted for their controller to make anew)."""

    kind: PodSourceKind
    """``RayCluster`` (KubeRay, ``ray.io/v1``), ``PodGroup`` (pods labelled ``kubegang.io/pod-group``) or
    ``SchedulingGroup`` (a ``scheduling.k8s.io/v1alpha2`` PodGroup the pods name in ``spec.schedulingGroup``)."""
    name: str = Field(min_length=1, max_length=253)
    """The RayCluster's name, the value of the pods' ``kubegang.io/pod-group`` label, or the PodGroup's name."""


_EXPLICIT_GPUS = "(has(self.gpusPerReplica) || has(self.gpuFraction))"
_FRACTION_SINGLE = "gpuFraction (a share of one GPU) is allowed only with replicas: 1"
_ONE_OF = "set gpusPerReplica or gpuFraction, not both"
_SOURCE_NO_FRAMEWORK = "podSource: the source's controller makes the pods, so framework must be none"
MAX_LABEL_NAME = 63
"""A GPUJob's name is the value of its pods' ``kubegang.io/job-name`` label, and label values are
at most 63 characters (a batch Job's name is limited for the same reason)."""
_NAME_LENGTH = (f"metadata.name: at most {MAX_LABEL_NAME} characters, since it is the value of the pods' "
                "kubegang.io/job-name label")
_FRAMEWORK_NAME = ("metadata.name: with framework torchrun or mpi the name is the headless Service's and "
                   "'<name>-<replica index>' each pod's hostname: lowercase letters, digits and '-', starting "
                   f"with a letter, and '<name>-<last index>' at most {MAX_LABEL_NAME} characters")
_DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_COUNT_ONCE = (
    f"gpusPerReplica and gpuFraction cannot be combined with a {GPU_RESOURCE} limit or request in "
    "template.spec.containers[*].resources or template.spec.initContainers[*].resources; "
    "give the GPU count in one place"
)


class GPUJobSpec(ApiModel):
    """The desired gang: how many pods, what each runs and needs, and where it may go."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel(
                "!has(self.gpuFraction) || self.replicas == 1",
                _FRACTION_SINGLE,
                field_path=".gpuFraction",
                reason="FieldValueForbidden",
            ),
            cel(
                "!(has(self.gpuFraction) && has(self.gpusPerReplica))",
                _ONE_OF,
                field_path=".gpuFraction",
                reason="FieldValueForbidden",
            ),
            cel(
                f"!{_EXPLICIT_GPUS} || !({HAS_TEMPLATE_GPU_LIMIT})",
                _COUNT_ONCE,
                field_path=".template",
                reason="FieldValueForbidden",
            ),
            cel(
                "!has(self.podSource) || self.framework == 'none'",
                _SOURCE_NO_FRAMEWORK,
                field_path=".framework",
                reason="FieldValueForbidden",
            ),
        )
    )

    replicas: int = Field(default=1, ge=1, strict=True)
    """Pods in the gang; all start together or none does."""
    template: PodTemplateSpec
    """The pod template of every replica (a PodTemplateSpec). Its containers' ``nvidia.com/gpu``
    limits give the GPUs per replica unless ``gpusPerReplica`` or ``gpuFraction`` is set."""
    gpus_per_replica: int | None = Field(default=None, ge=0, strict=True)
    """Whole GPUs per replica; the operator adds the limit to the first container. Exclusive with a
    GPU limit in the template."""
    gpu_fraction: int | None = Field(default=None, ge=1, le=999, strict=True)
    """A share of one GPU in thousandths (250 = a quarter), for a single-replica job that shares a
    GPU; only with ``replicas: 1``."""
    gpu_product: str | None = Field(default=None, min_length=1, max_length=128)
    """GPU model the job needs (the node label ``nvidia.com/gpu.product``, e.g. ``NVIDIA-H200``)."""
    queue: str = Field(min_length=1, max_length=253, pattern=NAME_PATTERN)
    """The leaf GPUQueue the job enters."""
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=NAME_PATTERN)
    """PriorityClass of the job and its pods; orders jobs in a queue and decides who may preempt."""
    priority: int | None = Field(default=None, ge=-2147483648, le=1000000000, strict=True)
    """Explicit priority; overrides the value of ``priorityClassName`` for queueing and preemption."""
    topology: Topology = Field(default_factory=Topology, json_schema_extra={"default": {}})
    """Topology constraints of the gang."""
    framework: Framework = "none"
    """``torchrun`` or ``mpi`` add a headless Service and the environment workers need
    (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK / hostfile)."""
    restart_limit: int = Field(default=3, ge=0, strict=True)
    """Whole-gang restarts after a pod fails, before the job is Failed."""
    gang_timeout_seconds: int = Field(default=300, ge=1, le=INT32_MAX, strict=True)
    """Seconds from pod creation until every pod must be bound and started (Running, or already
    finished); otherwise the gang is deleted whole and requeued with the nodes that did not bind or
    start their pod excluded."""
    time_limit_seconds: int | None = Field(default=None, ge=1, le=31_536_000, strict=True)
    """Seconds the gang may run, counted from the moment every replica is Running (``status.startedAt``,
    afresh after each restart): then its pods are deleted and the job Failed (``TimeLimitExceeded``),
    as Slurm's ``--time``. Backfill plans with it: a job with a limit may run on nodes reserved for a
    blocked gang when it will end before that gang could start there, and the reservation picks the
    nodes whose gangs end first. Unset: no limit, and backfill cannot plan around the job."""
    suspend: bool = Field(default=False, strict=True)
    """A suspended job holds no pods and no quota; set it back to false to queue it again."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=INT32_MAX, strict=True)
    """Delete the job this many seconds after it Succeeded or Failed."""
    pod_source: PodSource | None = None
    """The pods are made by another controller (a RayCluster, a pod group): kubegang admits and places
    them instead of creating them. Written by the operator for labelled RayClusters and pod groups."""

    @model_validator(mode="after")
    def _gpu_count_given_once(self) -> Self:
        if self.gpu_fraction is not None and self.replicas != 1:
            raise ValueError(f"{_FRACTION_SINGLE}, got replicas: {self.replicas}")
        if self.gpu_fraction is not None and self.gpus_per_replica is not None:
            raise ValueError(_ONE_OF)
        explicit = self.gpus_per_replica is not None or self.gpu_fraction is not None
        if explicit and self.template.sets_gpus():
            raise ValueError(_COUNT_ONCE)
        if self.pod_source is not None and self.framework != "none":
            raise ValueError(_SOURCE_NO_FRAMEWORK)
        return self

    def whole_gpus_per_replica(self) -> int:
        """Whole GPUs each replica gets (0 for a fractional or CPU-only job)."""
        if self.gpus_per_replica is not None:
            return self.gpus_per_replica
        return self.template.requests().gpus

    def gpu_milli_per_replica(self) -> int:
        """GPU demand of one replica in thousandths of a GPU."""
        return replica_gpu_milli(self.gpu_fraction, self.whole_gpus_per_replica())

    def total_gpus(self) -> float:
        """GPUs the whole gang asks for (``status.totalGPUs``)."""
        return self.replicas * self.gpu_milli_per_replica() / MILLI


class ReplicaPlacement(ApiModel):
    """Where one replica of the gang runs."""

    index: int = Field(ge=0, strict=True)
    """Replica index (0 is the torchrun master / MPI launcher)."""
    node: str = Field(min_length=1, max_length=253)
    """Node the replica is pinned to."""
    gpus: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=64)
    """GPU indices on that node, when known."""
    gpu_milli: int | None = Field(default=None, ge=1, le=999, strict=True)
    """For a shared-GPU job (``gpuFraction``): the thousandths of the one GPU in ``gpus`` it holds."""


class Placement(ApiModel):
    """The gang's place: the domain that holds it and one entry per replica."""

    level: LevelName | None = None
    """Level of the narrowest domain that holds the whole gang."""
    domain: str | None = None
    """That domain's name (preferred again when the gang restarts)."""
    pods: list[ReplicaPlacement] = Field(default_factory=list)
    """One entry per replica, by index."""

    @property
    def nodes(self) -> frozenset[str]:
        """Every node the gang uses."""
        return frozenset(pod.node for pod in self.pods)


class QueuePosition(ApiModel):
    """Where a waiting job stands in the admission order (``kubegang.quota.queue_positions``).

    Refreshed by the leader at most every few seconds, and only when it moved, so a burst of jobs costs
    no write storm; cleared when the job is admitted."""

    queue: int = Field(ge=1, strict=True)
    """1-based place among the waiting jobs of its leaf queue (priority, then creation time)."""
    cohort: int = Field(ge=1, strict=True)
    """1-based place of its queue's head among the heads of every leaf queue of its tree (fair-share order)."""
    ahead: int = Field(ge=0, strict=True)
    """Jobs the admission cycle considers before this one: those ahead in its queue, then the heads of
    the leaves before its own."""
    ahead_gpus: float = Field(ge=0, alias="aheadGPUs")
    """GPUs those jobs ask for in total."""
    updated_at: dt.datetime | None = None
    """When this position was computed."""
    reserved_nodes: list[str] = Field(default_factory=list, max_length=4096, json_schema_extra=SET_SCHEMA_EXTRA)
    """Nodes this job holds by backfill reservation (``spec.backfill.reserveAfterSeconds``): later jobs
    are placed around them until it starts."""


class GPUJobStatus(ApiModel):
    """What the operator observed and decided; written by the operator only."""

    reason: str | None = Field(default=None, max_length=1024)
    """The reason of the current phase's condition (``kubectl get gj`` shows it): why the job is where it is."""
    queue_position: QueuePosition | None = None
    """While the job waits: its place in the admission order."""

    phase: JobPhase | None = None
    """Pending, Queued, Admitted, Running, Succeeded, Failed, Suspended or Unschedulable."""
    conditions: list[Condition] = Field(default_factory=list, max_length=32, json_schema_extra=CONDITIONS_SCHEMA_EXTRA)
    """Why the job is where it is (Queued, Admitted, Running, Succeeded, Failed, Preempted,
    Unschedulable, Suspended), each with a reason."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation this status describes."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Replicas of the current attempt that are Ready."""
    total_gpus: float | None = Field(default=None, ge=0, alias="totalGPUs")
    """GPUs the gang asks for in total (a fraction for a shared-GPU job)."""
    restarts: int | None = Field(default=None, ge=0)
    """Whole-gang restarts so far."""
    placement: Placement | None = None
    """The current admission's placement."""
    excluded_nodes: list[str] = Field(default_factory=list, max_length=1024, json_schema_extra=SET_SCHEMA_EXTRA)
    """Nodes excluded from later placements (they failed to bind the gang in time)."""
    admitted_at: dt.datetime | None = None
    """When the current admission was made (quota and places reserved)."""
    pods_created_at: dt.datetime | None = None
    """When the current attempt's pods were created (the gang timeout counts from here)."""
    started_at: dt.datetime | None = None
    """When every pod of the current attempt was running."""
    finished_at: dt.datetime | None = None
    """When the job Succeeded or Failed."""


class GPUJob(Resource):
    """A gang of ``replicas`` identical pods, admitted through a GPUQueue and placed whole."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            # No fieldPath: the API server accepts only paths into the schema, and metadata has none; the
            # messages name the field. A job made for a RayCluster or a pod group names no pod: its
            # source's pods keep their names.
            cel(
                f"has(self.spec.podSource) || size(self.metadata.name) <= {MAX_LABEL_NAME}",
                _NAME_LENGTH,
                reason="FieldValueInvalid",
            ),
            cel(
                "!(self.spec.framework in ['torchrun', 'mpi']) || "
                f"(self.metadata.name.matches('{_DNS_1035_LABEL}') && "
                f"size(self.metadata.name) + size(string(self.spec.replicas - 1)) < {MAX_LABEL_NAME})",
                _FRAMEWORK_NAME,
                reason="FieldValueInvalid",
            ),
        )
    )

    crd: ClassVar[KindInfo] = KindInfo(
        kind="GPUJob",
        plural="gpujobs",
        short_names=("gj",),
        scope="Namespaced",
        printer_columns=(
            PrinterColumn("Queue", "string", ".spec.queue", "The GPUQueue the job is in"),
            PrinterColumn("Phase", "string", ".status.phase", "Where the job is in its lifecycle"),
            PrinterColumn("Reason", "string", ".status.reason", "Why the job is in its phase"),
            PrinterColumn("Ready", "integer", ".status.readyReplicas", "Ready replicas"),
            PrinterColumn("Replicas", "integer", ".spec.replicas", "Replicas in the gang"),
            PrinterColumn("GPUs", "number", ".status.totalGPUs", "GPUs of the whole gang"),
            PrinterColumn("Domain", "string", ".status.placement.domain", "Domain holding the gang", 1),
            PrinterColumn("Restarts", "integer", ".status.restarts", "Whole-gang restarts", 1),
        ),
        selectable_fields=(".spec.queue",),
    )

    kind: Literal["GPUJob"] = "GPUJob"
    """Always ``GPUJob``."""
    spec: GPUJobSpec
    """The desired gang."""
    status: GPUJobStatus | None = None
    """Observed state, written by the operator."""

    @model_validator(mode="after")
    def _name_fits_its_pods(self) -> Self:
        name = self.metadata.name
        if name is None or self.spec.pod_source is not None:
            return self
        if len(name) > MAX_LABEL_NAME:
            raise ValueError(f"{_NAME_LENGTH}; {name!r} has {len(name)}")
        if self.spec.framework in ("torchrun", "mpi") and (
                not re.fullmatch(_DNS_1035_LABEL, name)
                or len(f"{name}-{self.spec.replicas - 1}") > MAX_LABEL_NAME):
            raise ValueError(f"{_FRAMEWORK_NAME}; got {name!r} with replicas: {self.spec.replicas}")
        return self
