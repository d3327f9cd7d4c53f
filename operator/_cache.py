"""The operator's long-lived view of the cluster, fed by watches (Kueue's cache, in small).

Every replica keeps it current from Kopf's watch events, so a standby that becomes leader already
knows every job, pod and queue. The leader's cycles read it instead of listing the API; writes go to
the API and come back through the watch. Between a write and its echo, ``assume`` records what the
leader just decided (assume-then-confirm), so the next cycle does not admit the same job twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import itertools
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pydantic

from kubegang.admission import WaitReason
from kubegang.api import (
    GROUP_SIZE_LABEL,
    QUEUE_LABEL,
    Placement,
    PodSourceKind,
    scheduling_group_name,
    selected_source,
)
from kubegang.operator._changes import ChangedJobs
from kubegang.operator._conditions import FINISHED_PHASES, CondType, Phase, parse_rfc3339
from kubegang.operator._job import JobSpecError, JobView, job_view
from kubegang.operator._lifecycle import PodState, pod_state
from kubegang.placement import MILLI
from kubegang.podcontract import JOB_UID_LABEL

log = logging.getLogger("kubegang.operator.cache")

SourceKey = tuple[str, PodSourceKind, str]
"""(namespace, kind, name) of a RayCluster, a labelled pod group or a native (``scheduling.k8s.io``) PodGroup."""
GANG_KINDS = frozenset({PodSourceKind.POD_GROUP, PodSourceKind.SCHEDULING_GROUP})
"""Sources whose pods exist before admission (a controller made them): admitted once all of them exist,
deleted on requeue for their controller to make anew."""
FINISHED_POD_PHASES = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class UnreadHolding:
    """What a job that holds an admission says it holds, read without its spec (which the operator's
    model refuses, and which it never read): its queue and its status. Counted in the quota tree as a
    holder (``QuotaBook.record_holder``), so that its queue's quota is not given to another gang; never a
    JobView, so never a preemption candidate nor among the running gangs (the cycle cannot evict, place
    again or supervise what it cannot read)."""

    uid: str
    """metadata.uid."""
    key: str
    """namespace/name (logs)."""
    queue: str
    """spec.queue."""
    milli: int
    """status.totalGPUs (the whole gang's GPUs, a fraction for shared GPUs) in thousandths of a GPU."""
    nodes: frozenset[str] = frozenset()
    """The nodes of status.placement (its quota flavour is derived from their GPU product); empty when
    absent or malformed."""

    @property
    def gpus(self) -> str:
        """status.totalGPUs as a person writes it (8, 0.25)."""
        return f"{self.milli / MILLI:g}"


def unread_holding(uid: str, body: Mapping[str, Any]) -> UnreadHolding | str:
    """What ``body`` (a job that holds an admission) says it holds without the spec model, or why even
    that cannot be read (the field, and what is wrong with it)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec")
    raw = body.get("status")
    status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    queue = spec.get("queue") if isinstance(spec, Mapping) else None
    if not isinstance(queue, str) or not queue:
        return "spec.queue is missing" if queue is None else f"spec.queue is not a queue name: {queue!r}"
    total = status.get("totalGPUs")
    if isinstance(total, bool) or not isinstance(total, int | float) or not math.isfinite(total) or total < 0:
        return "status.totalGPUs is missing" if total is None else \
            f"status.totalGPUs is not a number of GPUs: {total!r}"
    nodes: frozenset[str] = frozenset()
    placement = status.get("placement")
    if isinstance(placement, Mapping):
        # Malformed: the first flavour of its queue's path, as for an admission placed on no known node.
        with contextlib.suppress(pydantic.ValidationError):
            nodes = Placement.model_validate(placement).nodes
    return UnreadHolding(uid=uid, key=f"{meta.get('namespace')}/{meta.get('name')}", queue=queue,
                         milli=round(total * MILLI), nodes=nodes)


@dataclasses.dataclass(frozen=True)
class InvalidJob:
    """A GPUJob the operator cannot act on: what is needed to tell its owner, on the job itself.

    Two kinds: a job whose object the operator cannot read (``ClusterCache.invalid_jobs``), and a
    readable one that waits on something its spec names and the cluster lacks (a PriorityClass:
    ``ClusterCache.waiting_on_priority_class``); ``reason`` tells them apart."""

    namespace: str
    """metadata.namespace."""
    name: str
    """metadata.name."""
    uid: str
    """metadata.uid."""
    generation: int | None
    """metadata.generation of the spec that was read."""
    error: str
    """What is wrong, naming the field."""
    status: Mapping[str, Any]
    """Its status as read (the report's conditions are built on it, and it says whether the report is
    already there)."""
    reason: WaitReason = WaitReason.INVALID_SPEC
    """The reason of the Unschedulable report (and of its Event)."""
    leave_phase: bool = False
    """Its status says it holds an admission (Admitted, Running: its pods may run) or has finished (its
    outcome stands), so the report must not move it to Unschedulable: it is a Warning Event only, and the
    spec's new generation stays unobserved in its status."""
    kept_generation: int | None = None
    """The generation of the last readable spec the cache keeps for it: a job that holds an admission
    goes on being counted and supervised as that spec until its spec can be read again (None: nothing
    kept, the operator does not act on it)."""
    counted: UnreadHolding | None = None
    """A holding job with nothing kept: what its quota is counted as, read from its status (None with
    ``uncounted``: not counted, since even that cannot be read)."""
    uncounted: str | None = None
    """Why a holding job with nothing kept is not counted (its queue or totalGPUs cannot be read)."""

    @property
    def reported(self) -> bool:
        """Whether the status already says this error (so nothing needs writing). A report that is an
        Event only leaves nothing in the status: the reporter's own memory stands for it."""
        if self.leave_phase or self.status.get("reason") != self.reason:
            return False
        return any(c.get("type") == "Unschedulable" and c.get("message") == self.error
                   and c.get("observedGeneration") == self.generation
                   for c in self.status.get("conditions") or [] if isinstance(c, Mapping))

    @property
    def report_key(self) -> tuple[str, int | None, str, bool]:
        """What one report is written for: a new generation, error or kind of report is a new one (a job
        that stops holding while still unreadable is then moved to Unschedulable, after its Event)."""
        return self.uid, self.generation, self.error, self.leave_phase


@dataclasses.dataclass
class UnseenPods:
    """The pods of one attempt of a gang that were created and not yet delivered by the watch."""

    attempt: str
    names: set[str]
    created_at: dt.datetime


def pod_source(pod: Mapping[str, Any]) -> tuple[PodSourceKind, str] | None:
    """The source a pod (as the watch delivered it) belongs to, by its labels and ``spec.schedulingGroup``."""
    return selected_source(((pod.get("metadata") or {}).get("labels") or {}),
                           scheduling_group_name(pod.get("spec") or {}))


def live_pod(pod: Mapping[str, Any]) -> bool:
    """A pod (as the watch delivered it) that is neither being deleted nor finished."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") not in FINISHED_POD_PHASES

HOLDING_PHASES = frozenset({Phase.ADMITTED, Phase.RUNNING})
WAITING_PHASES = frozenset({Phase.PENDING, Phase.QUEUED, Phase.UNSCHEDULABLE})
LISTED_PRIORITY_CLASSES = 8
"""A missing PriorityClass's report lists the existing ones up to this many (else it says how many)."""
TERMINATING_OVERDUE_SECONDS = 30.0
"""A pod of an earlier attempt still there this long after its ``deletionTimestamp`` (the end of its
grace period) is reported as what its gang waits for (``held_back``): within that, it is the normal
end of a requeue, and the requeue's own reason (which worker failed) stays the one the job shows."""
FORMING_REPORT_SECONDS = 30.0
"""A pod group whose job has waited this long (since it was created, or since its Queued condition last
turned True) with pods still missing is reported as waiting for them (``held_back``): a controller that
makes its pods within seconds costs no status write."""
NAMED_PODS = 3
"""A report names up to this many pods (and counts the rest)."""


@dataclasses.dataclass(frozen=True)
class HeldBack:
    """A job that would wait for admission but is not offered to the cycle yet (``pending`` leaves it
    out), and what its Queued condition should say."""

    job: JobView
    """The job, with assumptions applied."""
    reason: WaitReason
    """``WAITING_FOR_PODS`` (an incomplete pod group) or ``PREVIOUS_PODS_TERMINATING``."""
    message: str
    """Names the pods, the group and the label or field its size comes from."""
    subject: tuple[str, ...] = ()
    """What the wait is for (the pods waited for to terminate): a new subject is a new Event."""


@dataclasses.dataclass
class ClusterCache:
    """Jobs, their pods, queues and priority classes as last seen, plus the leader's assumptions."""

    jobs: dict[str, JobView] = dataclasses.field(default_factory=dict)
    """GPUJobs by UID."""
    invalid_jobs: dict[str, InvalidJob] = dataclasses.field(default_factory=dict)
    """GPUJobs the operator cannot read, by UID (the leader reports each on the job: ``_invalid_jobs``).
    One that holds an admission is also in ``jobs``, as its last readable spec (``upsert_job``)."""
    pods: dict[str, dict[str, PodState]] = dataclasses.field(default_factory=dict)
    """Pods per job UID, by pod name."""
    queues: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """GPUQueue objects by name."""
    priorities: dict[str, int] = dataclasses.field(default_factory=dict)
    """PriorityClass values by name."""
    priority_classes_listed: bool = True
    """Whether ``priorities`` holds every PriorityClass, so a ``priorityClassName`` it lacks names none
    (the leader's watch lists them all before its first cycle). False where they cannot be listed (a
    ``kubectl gang`` user without the right): a name is then taken on trust. Set before jobs are added."""
    gpu_products: dict[str, str] = dataclasses.field(default_factory=dict)
    """GPU product (label nvidia.com/gpu.product) by node name: which flavour names are products."""
    assumed: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Status the leader wrote but has not yet seen echoed, by job UID."""
    deleted: set[str] = dataclasses.field(default_factory=set)
    """UIDs of deleted jobs whose reservation and quota the leader has still to release."""
    unseen_pods: dict[str, UnseenPods] = dataclasses.field(default_factory=dict)
    """Pods this leader created that the watch has not delivered yet, by job UID (controller-runtime's
    "expectations"): under a saturated API server a pod's ADDED event can come seconds after its
    create returned, and without this the supervisor took the gang for half-created and sent every
    pod again (342 POSTs answered AlreadyExists in a full-size run)."""
    _readers: list[ChangedJobs] = dataclasses.field(default_factory=list, repr=False)
    """Every reader's set of changed jobs (``changes``): each change of a job is marked in all of them."""
    _order: dict[str, int] = dataclasses.field(default_factory=dict, repr=False)
    """UID -> when the job entered ``jobs``: the order every reader sees jobs in, kept for a subset."""
    _entered: Iterator[int] = dataclasses.field(default_factory=itertools.count, repr=False)
    _waiting: set[str] = dataclasses.field(default_factory=set, repr=False)
    """UIDs that waited for admission when last evaluated (``pending``)."""
    _lingering: set[str] = dataclasses.field(default_factory=set, repr=False)
    """UIDs that would wait for admission when last evaluated (``pending``) but still have pods (of an
    earlier attempt, being deleted): ``held_back`` says so once one is overdue."""
    _unsure: set[str] = dataclasses.field(default_factory=set, repr=False)
    """UIDs changed since ``pending`` last evaluated them."""
    queues_changed: bool = True
    """The queue tree must be rebuilt before the next admission."""
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set by every change; the leader's loops wait on it."""
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    """Newest resourceVersion known per job UID: the watch's, or a status write's answer (shared with
    the StatusWriter, whose fenced writes use it as their precondition)."""
    rayclusters: dict[tuple[str, str], Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Every RayCluster, by (namespace, name); those labelled ``kubegang.io/queue`` are sources of gangs
    (``_sources``)."""
    sourced: set[str] = dataclasses.field(default_factory=set)
    """UIDs of GPUJobs with ``spec.podSource`` (the bridge looks at these only, not at every job)."""
    source_pods: dict[SourceKey, dict[str, Mapping[str, Any]]] = dataclasses.field(default_factory=dict)
    """Pods of pod groups and RayClusters (as the watch delivered them) by source, then pod name."""
    podgroups: dict[tuple[str, str], Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Kubernetes' own PodGroups (``scheduling.k8s.io/v1alpha2``) by (namespace, name): each one its pods
    name is a gang source once a queue is found (``_sources``). Empty where the API does not serve them."""
    workloads: dict[tuple[str, str], Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Their Workloads by (namespace, name): a PodGroup's queue may be a label of its Workload."""
    _parsed: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict, repr=False)
    """(generation, spec) each cached view was parsed from, by UID."""
    _missing_class: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """UID -> ``spec.priorityClassName`` of readable jobs whose PriorityClass is not in ``priorities``
    (``unknown_priority_class``): they wait, not admissible, until it appears."""
    unread_holding: dict[str, UnreadHolding] = dataclasses.field(default_factory=dict)
    """Jobs that hold an admission and were never readable, by UID, as their status says what they hold
    (``_unreadable``): the leader counts their quota (``Admission._count_holding``). Never in ``jobs``."""
    _uncounted: set[str] = dataclasses.field(default_factory=set, repr=False)
    """UIDs of holding jobs never readable whose queue or totalGPUs cannot be read either (logged once)."""

    # -- fed by watches -------------------------------------------------------------------------
    def upsert_job(self, body: Mapping[str, Any]) -> JobView | None:
        """Record a GPUJob; returns None (and remembers the error) when its spec is unusable.

        An unusable spec of a job that holds an admission does not make the operator forget the gang:
        see ``_unreadable``."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        known = self.jobs.get(uid)
        try:
            parsed = self._parsed.get(uid)
            if known is not None and parsed == (meta.get("generation"), body.get("spec")):
                # Status-only change (most watch events of a burst are echoes of status writes): the
                # spec parsed last time still holds, so skip the schema validation.
                view = dataclasses.replace(known, status=body.get("status") or {},
                                           resource_version=str(meta.get("resourceVersion") or ""))
            else:
                view = job_view(body)
        except Exception as exc:  # whatever the object holds, it is this job's problem only
            self._unreadable(uid, body, str(exc) if isinstance(exc, JobSpecError) else f"cannot read the job: {exc!r}")
            return None
        self.invalid_jobs.pop(uid, None)
        self._forget_unread(uid)
        self._keep(view)
        self._parsed[view.uid] = (meta.get("generation"), body.get("spec"))
        self._changed(view.uid)
        self.wake.set()
        return view

    def _keep(self, view: JobView) -> None:
        """Store ``view`` as the job's current one (its order, its source, its resourceVersion, whether
        its PriorityClass is known) and confirm the assumption its status echoes."""
        if view.uid not in self.jobs:
            self._order[view.uid] = next(self._entered)
        self.jobs[view.uid] = view
        if view.spec.pod_source is not None:
            self.sourced.add(view.uid)
        else:
            self.sourced.discard(view.uid)
        if view.resource_version:
            self.versions[view.uid] = view.resource_version
        self._track_priority_class(view)
        # The echo confirms the assumption once the API shows what was assumed.
        assumed = self.assumed.get(view.uid)
        if assumed is not None and all(view.status.get(k) == v for k, v in assumed.items()):
            self.assumed.pop(view.uid, None)

    def _unreadable(self, uid: str, body: Mapping[str, Any], error: str) -> None:
        """Remember that the job ``uid`` cannot be read (``error`` names the field), for its report.

        A job that waits holds nothing: it leaves ``jobs`` (it is in no queue until its spec is fixed)
        and the report moves it to Unschedulable. A job that holds an admission (Admitted or Running
        in its status or in this leader's assumption) has pods and quota: an edit the CRD let through
        (a template quantity like ``cpu: "two"``), or an object kept from an older, laxer CRD, must not
        make the operator forget the gang. Forgotten, its quota was no longer counted once the tree was
        rebuilt (a second gang was admitted over it), its failed pods were not handled, mending the
        spec did not bring it back (its status said Unschedulable while its pods ran), and deleting it
        left its quota taken. So it keeps its last readable view, with the new status and
        resourceVersion (status writes are fenced on it), and goes on being counted and supervised as
        that spec; the user is told by a Warning Event, and the new generation stays unobserved in its
        status. When the spec is readable again, ``upsert_job`` replaces the view as for any edit. A
        holding job never read before (an operator upgraded over an object the new model refuses, or a new
        leader meeting a job edited while no operator ran) has no view to keep: its phase is left alone
        and it is not supervised, but its quota is counted from what is readable without the spec model
        (``unread_holding``: ``spec.queue``, ``status.totalGPUs``, the nodes of ``status.placement``),
        or not counted (logged once) when even that cannot be read."""
        meta = body.get("metadata") or {}
        raw = body.get("status")
        status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        known = self.jobs.get(uid)
        phase = {**status, **self.assumed.get(uid, {})}.get("phase")
        holds = phase in {p.value for p in HOLDING_PHASES}
        kept: JobView | None = None
        counted: UnreadHolding | None = None
        uncounted: str | None = None
        if holds and known is not None:
            kept = dataclasses.replace(known, status=status, resource_version=str(meta.get("resourceVersion") or ""))
            self._keep(kept)
            self._forget_unread(uid)
        else:
            self._drop(uid)
            read = unread_holding(uid, body) if holds else None
            counted = read if isinstance(read, UnreadHolding) else None
            uncounted = read if isinstance(read, str) else None
            if counted is not None:
                self.unread_holding[uid] = counted
            else:
                self.unread_holding.pop(uid, None)
            if uncounted is None:
                self._uncounted.discard(uid)
            elif uid not in self._uncounted:
                self._uncounted.add(uid)
                log.warning("GPUJob %s/%s holds an admission, but neither its spec (%s) nor what it holds (%s) "
                            "can be read: its quota is not counted", meta.get("namespace"), meta.get("name"),
                            error, uncounted)
        generation = meta.get("generation")
        self.invalid_jobs[uid] = InvalidJob(
            namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), uid=uid,
            generation=generation if isinstance(generation, int) else None, error=error, status=status,
            leave_phase=holds or phase in {p.value for p in FINISHED_PHASES},
            kept_generation=None if kept is None else kept.generation, counted=counted, uncounted=uncounted)
        self._changed(uid)
        self.wake.set()

    def _forget_unread(self, uid: str) -> None:
        """``uid`` is no longer a holding job counted from its status alone (it is readable, kept as a
        view, holds nothing or is deleted): the leader's next count releases that quota (``_changed``)."""
        self.unread_holding.pop(uid, None)
        self._uncounted.discard(uid)

    def _drop(self, uid: str) -> None:
        """Take an unreadable job out of ``jobs``: the operator does not act on it until it is readable."""
        self.jobs.pop(uid, None)
        self._order.pop(uid, None)
        self._missing_class.pop(uid, None)

    def remove_job(self, uid: str) -> None:
        """Forget a deleted GPUJob and remember to release what it held (an unreadable one too: it may
        hold a reservation, or an admission from before its spec became unreadable)."""
        known = self.jobs.pop(uid, None) is not None
        unreadable = self.invalid_jobs.pop(uid, None) is not None
        if known or unreadable:
            self.deleted.add(uid)
        self.sourced.discard(uid)
        self.versions.pop(uid, None)
        self._parsed.pop(uid, None)
        self._missing_class.pop(uid, None)
        self._forget_unread(uid)
        self.assumed.pop(uid, None)
        self.unseen_pods.pop(uid, None)
        self._order.pop(uid, None)
        self._changed(uid)
        self.wake.set()

    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        """Record a pod of a gang (pods without the job-uid label are ignored)."""
        uid = ((body.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
        if not uid:
            return
        state = pod_state(body)
        self.pods.setdefault(uid, {})[state.name] = state
        unseen = self.unseen_pods.get(uid)
        if unseen is not None:
            unseen.names.discard(state.name)
            if not unseen.names:
                del self.unseen_pods[uid]
        self._changed(uid)
        self.wake.set()

    def remove_pod(self, body: Mapping[str, Any]) -> None:
        """Forget a deleted pod."""
        meta = body.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(JOB_UID_LABEL)
        if not uid:
            return
        pods = self.pods.get(uid, {})
        pods.pop(str(meta.get("name", "")), None)
        if not pods:
            self.pods.pop(uid, None)
        self._changed(uid)
        self.wake.set()

    def upsert_raycluster(self, body: Mapping[str, Any]) -> None:
        """Record a RayCluster (a change of an unlabelled one wakes nobody: it is not kubegang's)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        old = self.rayclusters.get(key)
        self.rayclusters[key] = body
        if (meta.get("labels") or {}).get(QUEUE_LABEL) or (old and ((old.get("metadata") or {}).get("labels")
                                                                    or {}).get(QUEUE_LABEL)):
            self.wake.set()

    def remove_raycluster(self, namespace: str, name: str) -> None:
        """Forget a deleted RayCluster."""
        self.rayclusters.pop((namespace, name), None)
        self.wake.set()

    def record_scheduling_object(self, kind: str, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """Record (or, ``deleted``, forget) a native ``PodGroup`` or ``Workload`` (``kind``)."""
        meta = body.get("metadata") or {}
        store = self.workloads if kind == "Workload" else self.podgroups
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if deleted:
            store.pop(key, None)
        else:
            store[key] = body
        self.wake.set()

    def upsert_source_pod(self, body: Mapping[str, Any]) -> None:
        """Record a pod of a pod group or a RayCluster (the others are ignored)."""
        meta = body.get("metadata") or {}
        source = pod_source(body)
        if source is None:
            return
        key = (str(meta.get("namespace") or ""), *source)
        self.source_pods.setdefault(key, {})[str(meta.get("name") or "")] = body
        self.wake.set()

    def remove_source_pod(self, body: Mapping[str, Any]) -> None:
        """Forget a deleted pod of a pod group or a RayCluster."""
        meta = body.get("metadata") or {}
        source = pod_source(body)
        if source is None:
            return
        key = (str(meta.get("namespace") or ""), *source)
        pods = self.source_pods.get(key, {})
        pods.pop(str(meta.get("name") or ""), None)
        if not pods:
            self.source_pods.pop(key, None)
        self.wake.set()

    def upsert_queue(self, body: Mapping[str, Any]) -> None:
        """Record a GPUQueue; a spec change marks the tree for a rebuild."""
        name = str((body.get("metadata") or {}).get("name", ""))
        old = self.queues.get(name)
        if old is None or old.get("spec") != body.get("spec"):
            self.queues_changed = True
        self.queues[name] = body
        self.wake.set()

    def remove_queue(self, name: str) -> None:
        """Forget a deleted GPUQueue."""
        if self.queues.pop(name, None) is not None:
            self.queues_changed = True
        self.wake.set()

    def set_priority(self, name: str, value: int | None) -> None:
        """Record (or, with None, forget) a PriorityClass value.

        A class that appears or goes changes whether the jobs naming it may be admitted, so they are
        looked at again (and the leader woken): a class created after its job lets the job in at once."""
        existed = name in self.priorities
        if value is None:
            self.priorities.pop(name, None)
        else:
            self.priorities[name] = value
        if existed == (name in self.priorities):
            return
        for view in self.jobs.values():
            if view.spec.priority_class_name == name:
                self._track_priority_class(view)
                self._changed(view.uid)
        self.wake.set()

    def set_node_product(self, node: str, product: str | None) -> None:
        """Record (or, with None, forget) the GPU product of a node."""
        if product:
            self.gpu_products[node] = product
        else:
            self.gpu_products.pop(node, None)

    # -- read by the leader ---------------------------------------------------------------------
    def assume(self, job: JobView, status: Mapping[str, Any]) -> JobView:
        """Overlay ``status`` on ``job`` until the watch echoes it; returns the assumed view."""
        base = self.jobs.get(job.uid, job).status
        merged = {**base, **self.assumed.get(job.uid, {}), **status}
        self.assumed[job.uid] = merged
        self._changed(job.uid)
        return dataclasses.replace(job, status=merged)

    def expect_pods(self, job: JobView, names: Iterable[str], at: dt.datetime) -> None:
        """Remember that the pods ``names`` of ``job``'s attempt were created at ``at`` and are on their way
        through the watch (those already delivered are not waited for)."""
        seen = self.pods.get(job.uid, {})
        waiting = {name for name in names if name not in seen}
        if waiting:
            self.unseen_pods[job.uid] = UnseenPods(job.attempt, waiting, at)
        else:
            self.unseen_pods.pop(job.uid, None)

    def unseen_pods_of(self, job: JobView, *, created_after: dt.datetime) -> set[str]:
        """Pods of ``job``'s attempt that were created after ``created_after`` and not yet delivered."""
        unseen = self.unseen_pods.get(job.uid)
        if unseen is None or unseen.attempt != job.attempt or unseen.created_at <= created_after:
            return set()
        return set(unseen.names)

    def forget(self, uid: str) -> None:
        """Drop an assumption that was not confirmed (the write failed)."""
        if self.assumed.pop(uid, None) is None:
            return
        invalid = self.invalid_jobs.get(uid)
        view = self.jobs.get(uid)
        if invalid is not None and view is not None and view.phase not in HOLDING_PHASES:
            # Kept for an admission this leader assumed but could not record (the user's unreadable edit
            # moved the job's resourceVersion, so the fenced write was refused): it holds nothing after
            # all, and no echo will come to say so. It is reported like any unreadable waiting job.
            self._drop(uid)
            self.invalid_jobs[uid] = dataclasses.replace(invalid, leave_phase=view.phase in FINISHED_PHASES,
                                                         kept_generation=None)
            self.wake.set()
        self._changed(uid)

    def changes(self) -> ChangedJobs:
        """A new reader's set of changed jobs: from now on every change of a job marks its UID there."""
        reader = ChangedJobs()
        self._readers.append(reader)
        return reader

    def _changed(self, uid: str) -> None:
        self._unsure.add(uid)
        for reader in self._readers:
            reader.mark(uid)

    def job(self, uid: str) -> JobView | None:
        """The job with ``uid``, with any assumption applied."""
        view = self.jobs.get(uid)
        assumed = self.assumed.get(uid)
        if view is not None and assumed is not None:
            return dataclasses.replace(view, status={**view.status, **assumed})
        return view

    def all_jobs(self) -> Iterator[JobView]:
        """Every readable job, with assumptions applied."""
        for uid in list(self.jobs):
            view = self.job(uid)
            if view is not None:
                yield view

    def jobs_among(self, uids: Iterable[str]) -> list[JobView]:
        """The readable jobs of ``uids`` (others are skipped), in the order of ``all_jobs``."""
        known = sorted((uid for uid in uids if uid in self.jobs), key=self._order.__getitem__)
        return [view for uid in known if (view := self.job(uid)) is not None]

    def pods_of(self, uid: str) -> list[PodState]:
        """The pods of job ``uid`` as last seen."""
        return list(self.pods.get(uid, {}).values())

    def pending(self) -> list[JobView]:
        """Jobs waiting for admission: not suspended, holding nothing, no pods of theirs left, readable,
        naming no PriorityClass that does not exist (``waiting_on_priority_class``); a pod group's job
        once all its pods exist (Kueue's rule: a group is admitted when it is complete).

        Only the jobs changed since the last call are looked at again (a burst's step changes a few of
        2,000); whether a pod group is complete is asked afresh each time, since its pods are not the
        job's own."""
        for uid in self._unsure:
            view = self.job(uid)
            # An unreadable job kept for its admission waits once it gives it back (a requeue not echoed
            # yet): it must not be admitted again as its old spec.
            waits = view is not None and view.phase in WAITING_PHASES and not view.spec.suspend \
                and uid not in self.invalid_jobs and uid not in self._missing_class
            has_pods = bool(self.pods.get(uid))
            for group, member in ((self._waiting, waits and not has_pods), (self._lingering, waits and has_pods)):
                if member:
                    group.add(uid)
                else:
                    group.discard(uid)
        self._unsure.clear()
        return [job for job in self.jobs_among(self._waiting) if self.source_complete(job)]

    def source_complete(self, job: JobView) -> bool:
        """Whether a pod group's job has all of its pods (always true for every other job)."""
        return self.missing_source_pods(job) <= 0

    def missing_source_pods(self, job: JobView) -> int:
        """How many pods a pod group's job still lacks (0 for every other job)."""
        source = job.spec.pod_source
        if source is None or source.kind not in GANG_KINDS:
            return 0
        pods = self.source_pods.get((job.namespace, source.kind, source.name), {})
        return job.replicas - sum(1 for p in pods.values() if live_pod(p))

    def held_back(self, now: dt.datetime) -> list[HeldBack]:
        """The waiting jobs ``pending`` leaves out for a while now, with what their Queued condition
        should say (the leader writes it: ``Admission``), so that their owner can tell why they wait:

        - a pod group that has waited ``FORMING_REPORT_SECONDS`` with pods still missing (its label
          ``kubegang.io/group-size``, or its PodGroup's ``minCount``, asks for more than exist);
        - a gang whose earlier attempt's pods are still there ``TERMINATING_OVERDUE_SECONDS`` past their
          grace period (a finalizer holds them, or their node does not confirm they stopped).

        A job found Unschedulable is left out: that report stands (it can never fit as is), and the cycle,
        which does not try it again until its spec or the queues change, would not replace this one.
        Up to date as of the last ``pending`` call (the leader calls it first)."""
        out: list[HeldBack] = []
        for job in self.jobs_among(self._lingering):
            if job.phase is Phase.UNSCHEDULABLE:
                continue
            overdue = sorted((p for p in self.pods_of(job.uid) if p.deleting and p.deletion_deadline is not None
                              and (now - p.deletion_deadline).total_seconds() >= TERMINATING_OVERDUE_SECONDS),
                             key=lambda p: p.name)
            if overdue:
                out.append(HeldBack(job, WaitReason.PREVIOUS_PODS_TERMINATING, _terminating(job.namespace, overdue),
                                    tuple(p.name for p in overdue)))
        for job in self.jobs_among(self._waiting & self.sourced):
            missing = self.missing_source_pods(job)
            if missing <= 0 or job.phase is Phase.UNSCHEDULABLE:
                continue
            # The grace delays the first report only: once written, the report goes on (its own write
            # turned the Queued condition True, which the grace would otherwise count from).
            if job.status.get("reason") == WaitReason.WAITING_FOR_PODS or \
                    (now - _waiting_since(job)).total_seconds() >= FORMING_REPORT_SECONDS:
                out.append(HeldBack(job, WaitReason.WAITING_FOR_PODS, _forming(job, missing)))
        return out

    def holding(self) -> list[JobView]:
        """Jobs that hold quota and a placement (Admitted or Running)."""
        return [job for job in self.all_jobs() if job.phase in HOLDING_PHASES]

    def priority_of(self, job: JobView) -> int:
        """The job's priority value (0 without, or with an unknown, priorityClassName). A job whose class
        is unknown is not admitted (``waiting_on_priority_class``): 0 is only ever the value of one that
        was admitted before its class was deleted, when it is weighed as a preemption victim."""
        return self.priorities.get(job.spec.priority_class_name or "", 0)

    # -- PriorityClasses a job names ----------------------------------------------------------------
    def unknown_priority_class(self, job: JobView) -> str | None:
        """The ``spec.priorityClassName`` of ``job`` when no PriorityClass of that name is known, else None.

        The operator writes it on every pod it creates (and a RayCluster's controller on its pods): the
        API server refuses a pod whose class does not exist, so admitting the job would take its quota
        and GPUs (and maybe preempt others for them) for pods that cannot be created. The pods of a pod
        group exist before admission, so their class existed then: such a job is not held back."""
        name = job.spec.priority_class_name
        if not name or not self.priority_classes_listed or name in self.priorities:
            return None
        source = job.spec.pod_source
        if source is not None and source.kind in GANG_KINDS:
            return None
        return name

    def _track_priority_class(self, view: JobView) -> None:
        name = self.unknown_priority_class(view)
        if name is None:
            self._missing_class.pop(view.uid, None)
        else:
            self._missing_class[view.uid] = name

    def waiting_on_priority_class(self) -> list[InvalidJob]:
        """The jobs that would wait for admission but name a PriorityClass that does not exist, each with
        the Unschedulable ``PriorityClassNotFound`` report its owner needs (``_invalid_jobs`` writes it).

        They are left out of ``pending``, so the cycle neither admits nor orders them; the class's
        creation (``set_priority``) lets them in without a restart."""
        out = []
        for uid, name in self._missing_class.items():
            view = self.job(uid)
            if view is None or view.phase not in WAITING_PHASES or view.spec.suspend or self.pods.get(uid):
                continue
            out.append(InvalidJob(namespace=view.namespace, name=view.name, uid=uid, generation=view.generation,
                                  error=self._no_priority_class(name), status=view.status,
                                  reason=WaitReason.PRIORITY_CLASS_NOT_FOUND))
        return out

    def _no_priority_class(self, name: str) -> str:
        known = sorted(self.priorities)
        if not known:
            listed = "there is none"
        elif len(known) <= LISTED_PRIORITY_CLASSES:
            listed = f"PriorityClasses: {', '.join(known)}"
        else:
            listed = f"{len(known)} exist: kubectl get priorityclasses"
        return (f"spec.priorityClassName: no PriorityClass named {name!r} ({listed}); the job waits until it "
                "is created or the field is changed, since the API server refuses pods that name it")


def _waiting_since(job: JobView) -> dt.datetime:
    """Since when ``job`` has waited as it does now: the last time its Queued condition turned True
    (a requeue), else its creation."""
    for cond in job.status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == CondType.QUEUED.value and cond.get("status") == "True":
            try:
                return parse_rfc3339(str(cond.get("lastTransitionTime")))
            except ValueError:
                break
    return job.created


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED_PODS])
    return shown if len(names) <= NAMED_PODS else f"{shown} and {len(names) - NAMED_PODS} more"


def _terminating(namespace: str, pods: Sequence[PodState]) -> str:
    """Why a gang waits for pods of an earlier attempt: each named (up to ``NAMED_PODS``), with what
    holds it, and what ends the wait."""
    def why(pod: PodState) -> str:
        if pod.finalizers:
            return f"finalizer {', '.join(pod.finalizers)} keeps it (its controller has not removed it)"
        if pod.bound_node:
            return f"node {pod.bound_node} has not confirmed that it stopped (the node is down, unreachable or gone)"
        return "the API server has not removed it"

    names = [p.name for p in pods]
    one = len(pods) == 1
    deadline = min(p.deletion_deadline for p in pods if p.deletion_deadline is not None)
    causes = why(pods[0]) if one else "; ".join(f"{p.name}: {why(p)}" for p in pods[:NAMED_PODS])
    unconfirmed = [p.name for p in pods if not p.finalizers and p.bound_node]
    hint = (f"; once the node is gone for good, `kubectl delete pod -n {namespace} --force {unconfirmed[0]}` "
            "removes it") if unconfirmed else ""
    return (f"waiting for {'pod' if one else 'pods'} {_named(names)} of the previous attempt to finish "
            f"terminating: {'its' if one else 'their'} grace period ended at "
            f"{deadline.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}, but {causes}{hint}; the gang is "
            f"placed again once {'it is' if one else 'they are'} gone")


def _forming(job: JobView, missing: int) -> str:
    """Why a pod group's job waits for its pods: how many, of which group, and where its size is read."""
    source = job.spec.pod_source
    assert source is not None
    if source.kind is PodSourceKind.SCHEDULING_GROUP:
        group, size = f"PodGroup {source.name}", f"its spec.schedulingPolicy.gang.minCount is {job.replicas}"
    else:
        group, size = f"pod group {source.name}", f"label {GROUP_SIZE_LABEL}={job.replicas}"
    exist = job.replicas - missing
    return (f"waiting for {missing} more {'pod' if missing == 1 else 'pods'} of {group} ({size}; "
            f"{exist} {'exists' if exist == 1 else 'exist'}, not counting finished or terminating ones): "
            f"it is admitted once all {job.replicas} exist")
