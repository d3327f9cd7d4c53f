"""Gangs whose pods another controller makes: labelled RayClusters and pod groups (issue 17).

Kueue admits the workloads people already have by representing each with a ``Workload``; kubegang does
the same with a GPUJob carrying ``spec.podSource`` (docs/ray-and-pod-groups.md). This module is the
leader's bridge between the sources and those GPUJobs, run once per leader step:

1. **Represent.** Every RayCluster labelled ``kubegang.io/queue``, every pod group (pods labelled
   ``kubegang.io/pod-group`` / ``kubegang.io/group-size`` / ``kubegang.io/queue``) and every native
   ``scheduling.k8s.io`` PodGroup that pods name in ``spec.schedulingGroup`` (size from its gang
   policy's ``minCount``, queue from a label on it, its Workload or the pods) gets one GPUJob in its
   namespace (``raycluster-<name>``, ``podgroup-<name>``, ``schedulinggroup-<name>``): its GPU pods as
   ``replicas``, their requests as the template, topology from the source's annotations. From there on the one admission
   path decides (quota, fair share, placement, preemption, status, ``kubectl gang why``).
2. **Hold.** A RayCluster whose GPUJob holds no admission is kept ``suspend: true`` (KubeRay then runs
   no pod; the chart's MutatingAdmissionPolicy sets it at creation, so no pod starts before this runs).
   A pod group's pods (labelled or native) cannot bind before they are pinned: the extender refuses them.
3. **Open** (the admission's step 5, :meth:`SourceBridge.open`): a RayCluster is unsuspended; a pod
   group's pods exist already.
4. **Pin.** Each GPU pod of an admitted source that appears is given a free slot of the recorded
   placement: the labels and annotations of a gang pod (job UID, replica index, attempt, node, GPUs) in
   one patch, which also lifts the ``kubegang.io/admission`` scheduling gate if the pod carries it. From
   then on the pod is a gang pod like any other (ledger, lifecycle, restarts). A Ray cluster's pods
   beyond its admitted size wait for a growth slice of their own (``operator/_growth.py``).
5. **Close** (:meth:`SourceBridge.close`, on requeue, preemption, suspend or finish): a RayCluster is
   suspended again (KubeRay deletes every pod), a pod group's pods are deleted (their controller makes
   them anew, and they wait again).

A source kubegang cannot count, or whose GPUJob the CRD would refuse (a queue label that is a valid label
value but no GPUQueue name, an empty ``nvidia.com/gpu.product`` selector), gets no GPUJob and a Warning
Event ``NotAdmissible`` on itself that names the source's own field and what it allows (the spec is
validated with the API model before it is written; an API server's 422 on the write is reported the same
way, with its message).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from kubegang.api import (
    GPU_RESOURCE,
    GROUP_SIZE_LABEL,
    QUEUE_LABEL,
    SCHEDULING_API_VERSION,
    SOURCE_KIND_LABEL,
    SOURCE_NAME_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    GPUJobSpec,
    PodSourceKind,
    RayGangError,
    RequestError,
    SourceError,
    native_pod_group,
    pod_group_member,
    pod_spec_requests,
    ray_cluster_gang,
    source_job_name,
    workload_name,
)
from kubegang.operator._cache import (
    FINISHED_POD_PHASES,
    GANG_KINDS,
    HOLDING_PHASES,
    ClusterCache,
    SourceKey,
    live_pod,
)
from kubegang.operator._growth import StepKind, plan_growth, slice_number
from kubegang.operator._job import JobView
from kubegang.operator._ports import KubePort
from kubegang.podcontract import (
    ADMISSION_GATE,
    ATTEMPT_LABEL,
    GPUS_ANNOTATION,
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    NODE_ANNOTATION,
    POD_INDEX_LABEL,
    label_value,
)
from kubegang.restclient import ApiStatusError

log = logging.getLogger("kubegang.operator.sources")

GROUP_GONE_SECONDS = 10.0
"""A pod group's GPUJob is deleted once the group has had no pod for this long: long enough for a
controller to make the pods of a group anew after kubegang deleted them (a requeue)."""
PRODUCT_LABEL = "nvidia.com/gpu.product"
REFUSED_RETRY_SECONDS = 60.0
"""A GPUJob write the API server refused as invalid (422) is not sent again unchanged for this long (the
source's Event says why); the same write every step would only be refused every step."""
_INVALID = 422


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the fields of a source's GPUJob spec come from in the source: what a message names, so that
    a user reads the field they wrote, not the GPUJob's. The source's own fields are named bare (the
    Event is on it); ``*_of`` names another object they are read from (`` of Workload 'w'``)."""

    queue: str = f"metadata.labels[{QUEUE_LABEL}]"
    """The queue label (``spec.queue``)."""
    pod_spec: str = "spec"
    """The pod spec ``template``, ``gpuProduct`` and ``priorityClassName`` are read from."""
    pod_of: str = ""
    annotations_of: str = ""
    """Whose ``kubegang.io/topology-*`` annotations give ``topology``."""
    size: str = "the group's size"
    """What gives ``replicas``."""

    def field(self, loc: Sequence[int | str]) -> str:
        """The source's field a GPUJob spec location (a pydantic error's ``loc``) was read from."""
        head, rest = (str(loc[0]), tuple(loc[1:])) if loc else ("", ())
        if head == "queue":
            return self.queue
        if head == "gpuProduct":
            return f"{self.pod_spec}.nodeSelector[{PRODUCT_LABEL}]{self.pod_of}"
        if head == "priorityClassName":
            return f"{self.pod_spec}.priorityClassName{self.pod_of}"
        if head == "template":
            inner = rest[1:] if rest[:1] == ("spec",) else rest
            return self.pod_spec + "".join(_step(part) for part in inner) + self.pod_of
        if head == "topology":
            key = {"required": TOPOLOGY_REQUIRED_ANNOTATION, "preferred": TOPOLOGY_PREFERRED_ANNOTATION}.get(
                str(rest[0]) if rest else "", f"{TOPOLOGY_REQUIRED_ANNOTATION}/-preferred")
            return f"metadata.annotations[{key}]{self.annotations_of}"
        if head == "replicas":
            return self.size
        if head == "podSource":
            return "metadata.name"
        return self.pod_spec + self.pod_of  # a rule across fields: the pods' GPU request


def _step(part: int | str) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if part.isidentifier() else f"[{part}]"


_WHAT = {"queue": "a GPUQueue's name", "priorityClassName": "a PriorityClass's name",
         "gpuProduct": f"a GPU model (the node label {PRODUCT_LABEL}, e.g. NVIDIA-H200)"}
_NAME_RULE = ("lowercase letters, digits, '-' and '.', beginning and ending with a letter or digit "
              "(an RFC 1123 subdomain, at most 253 characters)")


def _problem(error: Mapping[str, Any], origin: Origin) -> str:
    """One pydantic error of a source's GPUJob spec, told as the source's field and what it allows."""
    loc = tuple(error.get("loc") or ())
    field = origin.field(loc)
    kind, ctx, got = str(error.get("type")), error.get("ctx") or {}, error.get("input")
    what = _WHAT.get(str(loc[0])) if len(loc) == 1 else None
    if kind == "string_pattern_mismatch" and what is not None and loc[0] != "gpuProduct":
        allowed = f"it allows {_NAME_RULE}"
    elif kind == "string_too_short":
        allowed = "it must not be empty" if ctx.get("min_length") == 1 else \
            f"it needs at least {ctx.get('min_length')} characters"
    elif kind == "string_too_long":
        allowed = f"it allows at most {ctx.get('max_length')} characters"
    else:
        allowed = str(error.get("msg") or kind).removeprefix("Value error, ")
    if what is not None and isinstance(got, str):
        return f"{field}: {got!r} cannot be {what}: {allowed}"
    return f"{field}: {allowed}"


def representable(spec: Mapping[str, Any], origin: Origin) -> GPUJobSpec:
    """``spec`` as the GPUJob model (the CRD's twin) reads it; :class:`SourceError` names the source's
    field behind each problem (``origin``) and what it allows, instead of the GPUJob field the CRD
    would name in a 422."""
    try:
        return GPUJobSpec.model_validate({**spec, "topology": {k: v for k, v in spec["topology"].items() if v}})
    except pydantic.ValidationError as exc:
        problems = list(dict.fromkeys(_problem(e, origin) for e in exc.errors()))
        raise SourceError("; ".join(problems)) from None


def _template(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """What placement and quota read of a pod: its containers' requests, tolerations, selector, class."""
    def containers(key: str) -> list[dict[str, Any]]:
        # An init container's restartPolicy is kept: "Always" makes it a native sidecar (KEP-753),
        # which kube-scheduler (and kubegang.api.pod_requests) counts beside the app containers.
        return [{"name": str(c.get("name") or f"c{i}"), "image": str(c.get("image") or "none"),
                 **({"resources": c["resources"]} if c.get("resources") else {}),
                 **({"restartPolicy": c["restartPolicy"]}
                    if key == "initContainers" and isinstance(c.get("restartPolicy"), str) else {})}
                for i, c in enumerate(pod_spec.get(key) or []) if isinstance(c, Mapping)]

    spec: dict[str, Any] = {"containers": containers("containers")}
    if pod_spec.get("initContainers"):
        spec["initContainers"] = containers("initContainers")
    for key in ("tolerations", "nodeSelector", "priorityClassName"):
        if pod_spec.get(key):
            spec[key] = pod_spec[key]
    return {"spec": spec}


def _spec(replicas: int, queue: str, topology: Mapping[str, Any], pod_spec: Mapping[str, Any],
          kind: PodSourceKind, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas, "queue": queue, "template": _template(pod_spec),
        "podSource": {"kind": kind.value, "name": name},
        # Every key, so that a merge patch also removes a constraint the source dropped.
        "topology": {"required": topology.get("required"), "preferred": topology.get("preferred")},
        "gpuProduct": (pod_spec.get("nodeSelector") or {}).get(PRODUCT_LABEL),
        "priorityClassName": pod_spec.get("priorityClassName"),
    }
    return spec


def _manifest(namespace: str, kind: PodSourceKind, name: str, spec: Mapping[str, Any],
              owner: Mapping[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": source_job_name(kind, name), "namespace": namespace,
                            "labels": {SOURCE_KIND_LABEL: kind.value, SOURCE_NAME_LABEL: label_value(name)}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob", "metadata": meta,
            "spec": {k: v for k, v in spec.items() if v is not None and k != "topology"}
            | {"topology": {k: v for k, v in spec["topology"].items() if v is not None}}}


def ray_cluster_spec(rc: Mapping[str, Any]) -> tuple[dict[str, Any], Origin]:
    """The GPUJob spec of a labelled RayCluster, and where its fields come from; :class:`SourceError`
    names what cannot be counted.

    The gang is every pod that asks for GPUs (the head too, if it does); they must all ask for the same
    number, since a gang is identical pods. Pods without GPUs (a CPU head, CPU workers) start with the
    cluster once it is admitted and are placed by kube-scheduler alone. GPU groups that want no pod now
    (``replicas: 0``, ``numOfHosts: 0``, suspended) are not in it; a cluster with no other gets no GPUJob
    and an Event naming those groups' fields.
    """
    gang = ray_cluster_gang(rc)
    groups = gang.gpu_groups
    if not groups and gang.idle_gpu_groups:
        raise RayGangError(f"{gang.idle_message()}; kubegang admits the cluster once it asks for GPU pods (until "
                           f"then it has no GPUJob; while it is held suspended no head runs, so the Ray autoscaler "
                           f"cannot scale a group up from zero)")
    if not groups:
        raise RayGangError(f"spec.workerGroupSpecs: no group of RayCluster {gang.name!r} asks for {GPU_RESOURCE}; "
                           f"kubegang admits GPU gangs (remove the {QUEUE_LABEL} label to run it without kubegang)")
    counts = {g.requests.gpus for g in groups}
    if len(counts) > 1:
        named = ", ".join(f"{g.name!r}: {g.requests.gpus}" for g in groups)
        raise RayGangError(f"spec.workerGroupSpecs: kubegang places a Ray cluster whose GPU pods all ask for the "
                           f"same number of GPUs; this one's groups ask for {named}")
    spec = rc.get("spec") or {}
    first = groups[0]
    if first.node_type.value == "head":
        template = spec["headGroupSpec"]["template"]
    else:
        template = next(w for w in spec.get("workerGroupSpecs") or [] if w.get("groupName") == first.name)["template"]
    origin = Origin(pod_spec=f"{first.where}.template.spec",
                    size=", ".join(f"{g.where} (replicas/minReplicas/maxReplicas/numOfHosts)" for g in groups))
    return _spec(sum(g.pods for g in groups), gang.queue, gang.topology.model_dump(), template.get("spec") or {},
                 PodSourceKind.RAY_CLUSTER, gang.name), origin


def _by_name(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(pods, key=lambda p: str(p["metadata"].get("name")))


def _one_shape(group: str, pods: Sequence[Mapping[str, Any]], says: Callable[[Mapping[str, Any]], tuple[Any, ...]],
               what: str) -> None:
    """Every pod of a group says the same (``says``) as the first, and asks for GPUs: a gang is identical
    pods. :class:`SourceError` names the first pod that differs and ``what`` must agree."""
    first_pod, *rest = pods
    first = says(first_pod)
    for pod in rest:
        if says(pod) != first:
            raise SourceError(f"pod {pod['metadata'].get('name')}: every pod of group {group!r} must carry the same "
                              f"{what} as {first_pod['metadata'].get('name')} ({', '.join(map(repr, first))})")
    if not first[-1]:
        raise SourceError(f"spec.containers[*].resources: the pods of group {group!r} ask for no {GPU_RESOURCE}; "
                          "kubegang admits GPU gangs")


def pod_group_spec(namespace: str, group: str, pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], Origin]:
    """The GPUJob spec of a pod group from its live pods, and where its fields come from (the first pod,
    which the Event is on); :class:`SourceError` names the bad label."""
    ordered = _by_name(pods)
    members = {str(p["metadata"].get("name")): pod_group_member(p) for p in ordered}

    def says(pod: Mapping[str, Any]) -> tuple[Any, ...]:
        member = members[str(pod["metadata"].get("name"))]
        assert member is not None
        return member.size, member.queue, member.requests.gpus

    _one_shape(group, ordered, says, "group size, queue and GPU request")
    first = members[str(ordered[0]["metadata"].get("name"))]
    assert first is not None
    return _spec(first.size, first.queue, first.topology.model_dump(), ordered[0].get("spec") or {},
                 PodSourceKind.POD_GROUP, group), Origin(pod_of=f" of pod {ordered[0]['metadata'].get('name')}",
                                                         size=f"metadata.labels[{GROUP_SIZE_LABEL}]")


def scheduling_group_spec(group: str, podgroup: Mapping[str, Any] | None, workload: Mapping[str, Any] | None,
                          pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], Origin]:
    """The GPUJob spec of a native PodGroup from the object and its live pods (which name it in
    ``spec.schedulingGroup``), and where its fields come from (the Event is on the PodGroup);
    :class:`SourceError` names what cannot be used."""
    if podgroup is None:
        raise SourceError(f"spec.schedulingGroup.podGroupName: PodGroup {group!r} ({SCHEDULING_API_VERSION}) does "
                          f"not exist (yet); the pods wait for it")
    ordered = _by_name(pods)
    gang = native_pod_group(podgroup, workload, (ordered[0].get("metadata") or {}).get("labels") or {})

    def says(pod: Mapping[str, Any]) -> tuple[Any, ...]:
        try:
            return (pod_spec_requests(pod.get("spec") or {}, where="spec").gpus,)
        except RequestError as exc:
            raise SourceError(f"pod {pod['metadata'].get('name')}: {exc}") from None

    _one_shape(group, ordered, says, "GPU request")
    first = f" of pod {ordered[0]['metadata'].get('name')}"
    if _labels(podgroup).get(QUEUE_LABEL) == gang.queue:  # the order native_pod_group reads them in
        queue_of = ""
    elif _labels(workload).get(QUEUE_LABEL) == gang.queue:
        queue_of = f" of Workload {workload_name(podgroup)!r}"
    else:
        queue_of = first
    own = (podgroup.get("metadata") or {}).get("annotations") or {}
    annotations_of = "" if any(k in own for k in (TOPOLOGY_REQUIRED_ANNOTATION, TOPOLOGY_PREFERRED_ANNOTATION)) \
        else f" of Workload {workload_name(podgroup)!r}"
    origin = Origin(queue=f"metadata.labels[{QUEUE_LABEL}]{queue_of}", pod_spec="spec", pod_of=first,
                    annotations_of=annotations_of, size="spec.schedulingPolicy.gang.minCount")
    return _spec(gang.size, gang.queue, gang.topology.model_dump(), ordered[0].get("spec") or {},
                 PodSourceKind.SCHEDULING_GROUP, group), origin


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


Work = Callable[[], tuple[dict[str, Any], Mapping[str, Any] | None, Origin]]
"""How to compute a source's GPUJob spec, owner reference and the spec's origin (lazily)."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """A GPUJob write the API server refused as invalid: not sent again unchanged before ``until``."""

    name: str
    body: Mapping[str, Any]
    error: str
    until: float


class SourceBridge:
    """The leader's bridge from RayClusters and pod groups to the GPUJobs that represent them."""

    def __init__(self, cache: ClusterCache, kube: KubePort, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.kube = kube
        self.clock = clock
        self._reported: dict[SourceKey, str] = {}
        """The error last reported (by Event) per source: reported once, not every step."""
        self._refused: dict[SourceKey, _Refused] = {}
        """The GPUJob write per source the API server last refused as invalid (422)."""
        self._gone_since: dict[SourceKey, float] = {}
        self._pinned: dict[tuple[str, str], tuple[str, str, int]] = {}
        """(namespace, pod) -> (job UID, attempt, index) pinned by this leader and not yet echoed."""

    # -- the step ----------------------------------------------------------------------------------
    async def sync(self) -> None:
        """Represent, hold and pin (steps 1, 2 and 4 of the module docstring); never raises for one source."""
        jobs: dict[SourceKey, JobView] = {}
        slices: dict[SourceKey, list[JobView]] = {}
        # A Ray cluster's growth slices (operator/_growth.py).
        for uid in list(self.cache.sourced):  # not every job: a burst of GPUJobs costs this step nothing
            job = self.cache.job(uid)
            if job is not None and job.spec.pod_source is not None:
                key = (job.namespace, job.spec.pod_source.kind, job.spec.pod_source.name)
                if _slice_of(job) is not None:
                    slices.setdefault(key, []).append(job)
                else:
                    jobs[key] = job
        sources = self._sources()
        for key, work in sources.items():
            try:
                await self._represent(key, work, jobs.get(key), slices.get(key, []))
            except SourceError as exc:
                await self._report(key, str(exc))
            except Exception:
                log.exception("%s %s/%s: could not represent it; retrying next step", key[1].value, key[0], key[2])
            else:
                self._reported.pop(key, None)
                self._refused.pop(key, None)
        # A source that went (or stopped asking for kubegang) and comes back is reported afresh.
        self._reported = {k: v for k, v in self._reported.items() if k in sources}
        self._refused = {k: v for k, v in self._refused.items() if k in sources}
        for key, job in jobs.items():
            # The base first, then its slices oldest first: the oldest admission gets the pods first.
            for part in [job, *sorted(slices.get(key, []), key=lambda s: _slice_of(s) or 0)]:
                try:
                    await self._pin(key, part)
                except Exception:
                    log.exception("pinning the pods of %s failed; retrying next step", part.key)
        await self._delete_gone_groups(jobs)

    def _sources(self) -> dict[SourceKey, Work]:
        """Each labelled source, with how to compute its GPUJob spec and owner reference (lazily)."""
        out: dict[SourceKey, Work] = {}
        for (namespace, name), rc in self.cache.rayclusters.items():
            if ((rc.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL):
                out[(namespace, PodSourceKind.RAY_CLUSTER, name)] = functools.partial(_ray_work, rc)
        for key, pods in self.cache.source_pods.items():
            namespace, kind, name = key
            live = [p for p in pods.values() if live_pod(p)]
            if kind is PodSourceKind.POD_GROUP and live:
                out[key] = functools.partial(_group_work, namespace, name, live)
            elif kind is PodSourceKind.SCHEDULING_GROUP and any(_asks_for_gpus(p) for p in live):
                # A group of pods that ask for no GPU is not kubegang's: kube-scheduler places it.
                podgroup = self.cache.podgroups.get((namespace, name))
                workload = self.cache.workloads.get((namespace, workload_name(podgroup or {}) or ""))
                out[key] = functools.partial(_scheduling_group_work, name, podgroup, workload, live)
        return out

    async def _represent(self, key: SourceKey, work: Work, job: JobView | None, slices: Sequence[JobView] = ()) -> None:
        """Create or update the source's GPUJob; :class:`SourceError` (reported on the source) for one
        kubegang cannot count, or whose GPUJob the CRD refuses: validated before each write, naming the
        source's own field (``representable``), and a 422 on the write told the same way."""
        namespace, kind, name = key
        spec, owner, origin = work()
        if job is not None and kind is PodSourceKind.RAY_CLUSTER:
            await self._grow(key, job, slices, spec, owner, origin)
        holds = job is not None and job.phase in HOLDING_PHASES
        if kind is PodSourceKind.RAY_CLUSTER and not holds:
            await self._keep_suspended(namespace, name)
        if job is None:
            representable(spec, origin)
            manifest = _manifest(namespace, kind, name, spec, owner)
            if await self._write_job(key, manifest, create=True):
                log.info("%s %s/%s: represented by GPUJob %s", kind.value, namespace, name,
                         manifest["metadata"]["name"])
            return
        if holds:
            return  # the admitted size stands: pods past it wait for a growth slice (``_grow``)
        if representable(spec, origin) != job.spec:
            await self._write_job(key, {"metadata": {"name": job.name, "namespace": namespace}, "spec": spec})

    async def _write_job(self, key: SourceKey, body: Mapping[str, Any], *, create: bool = False) -> bool:
        """Create a GPUJob (``body`` its manifest) or merge-patch its spec (``body``'s metadata names it);
        the API server's 422 (the CRD refused it) is the source's :class:`SourceError`, and the same
        write is not sent again for ``REFUSED_RETRY_SECONDS``."""
        meta = body["metadata"]
        name = str(meta["name"])
        refused = self._refused.get(key)
        if refused is not None and (refused.name, refused.body) == (name, body) and self.clock() < refused.until:
            raise SourceError(refused.error)
        try:
            if create:
                return await self.kube.create(body)
            return await self.kube.patch("GPUJob", str(meta["namespace"]), name, {"spec": body["spec"]})
        except ApiStatusError as exc:
            if exc.code != _INVALID:
                raise
            error = f"cannot represent it as a GPUJob: the API server refused GPUJob {name!r}: {exc.message}"
            self._refused[key] = _Refused(name, body, error, self.clock() + REFUSED_RETRY_SECONDS)
            raise SourceError(error) from None

    async def _grow(self, key: SourceKey, base: JobView, slices: Sequence[JobView], spec: Mapping[str, Any],
                    owner: Mapping[str, Any] | None, origin: Origin) -> None:
        """Carry out :func:`kubegang.operator._growth.plan_growth` for one Ray cluster (a slice no longer
        needed goes even while the cluster's spec is not representable; a new or resized one is validated
        first)."""
        source = base.spec.pod_source
        assert source is not None
        for step in plan_growth(base, slices, int(spec["replicas"])):
            grown = {**spec, "replicas": step.replicas}
            if step.kind is StepKind.CREATE:
                representable(grown, origin)
                manifest = _manifest(base.namespace, source.kind, source.name, grown, owner)
                manifest["metadata"]["name"] = step.name
                if await self._write_job(key, manifest, create=True):
                    log.info("RayCluster %s/%s grew past its admission: %d more GPU pods wait for quota as %s",
                             base.namespace, source.name, step.replicas, step.name)
            elif step.kind is StepKind.RESIZE:
                representable(grown, origin)
                await self._write_job(key, {"metadata": {"name": step.name, "namespace": base.namespace},
                                            "spec": grown})
            else:
                log.info("RayCluster %s/%s: growth slice %s is no longer needed", base.namespace, source.name,
                         step.name)
                await self.kube.delete("GPUJob", base.namespace, step.name)

    async def _keep_suspended(self, namespace: str, name: str) -> None:
        rc = self.cache.rayclusters.get((namespace, name)) or {}
        if (rc.get("spec") or {}).get("suspend") is not True:
            log.info("RayCluster %s/%s: suspended until kubegang admits it", namespace, name)
            await self.kube.patch("RayCluster", namespace, name, {"spec": {"suspend": True}})

    async def _report(self, key: SourceKey, error: str) -> None:
        if self._reported.get(key) == error:
            return
        self._reported[key] = error
        namespace, kind, name = key
        log.error("%s %s/%s: %s", kind.value, namespace, name, error)
        podgroup = self.cache.podgroups.get((namespace, name)) if kind is PodSourceKind.SCHEDULING_GROUP else None
        if kind is PodSourceKind.RAY_CLUSTER:
            rc = self.cache.rayclusters.get((namespace, name)) or {}
            involved = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name, "namespace": namespace,
                        "uid": str((rc.get("metadata") or {}).get("uid") or "")}
        elif podgroup is not None:
            involved = {"apiVersion": SCHEDULING_API_VERSION, "kind": "PodGroup", "name": name,
                        "namespace": namespace, "uid": str((podgroup.get("metadata") or {}).get("uid") or "")}
        else:
            pods = sorted(self.cache.source_pods.get(key, {}).values(), key=lambda p: str(p["metadata"]["name"]))
            if not pods:
                return
            meta = pods[0]["metadata"]
            involved = {"apiVersion": "v1", "kind": "Pod", "name": str(meta.get("name")), "namespace": namespace,
                        "uid": str(meta.get("uid") or "")}
        await self.kube.event_on(involved, "NotAdmissible", error, warning=True)

    # -- pinning --------------------------------------------------------------------------------
    async def _pin(self, key: SourceKey, job: JobView) -> None:
        placement = job.placement
        if job.phase not in HOLDING_PHASES or not job.admitted_at or placement is None:
            return
        namespace = key[0]
        attempt = job.attempt
        taken: set[int] = set()
        waiting: list[Mapping[str, Any]] = []
        for pod in sorted(self.cache.source_pods.get(key, {}).values(), key=lambda p: str(p["metadata"]["name"])):
            meta = pod.get("metadata") or {}
            if not live_pod(pod) or not _asks_for_gpus(pod):
                continue
            labels = meta.get("labels") or {}
            pinned = self._pinned.get((namespace, str(meta.get("name"))))
            if labels.get(JOB_UID_LABEL) == job.uid and labels.get(ATTEMPT_LABEL) == attempt:
                taken.add(int(labels.get(POD_INDEX_LABEL, -1)))
                self._pinned.pop((namespace, str(meta.get("name"))), None)
            elif pinned is not None and pinned[:2] == (job.uid, attempt):
                taken.add(pinned[2])
            elif pinned is not None:
                continue  # pinned to another part of the cluster (a growth slice) this step, not echoed yet
            elif not labels.get(JOB_UID_LABEL) and not (pod.get("spec") or {}).get("nodeName"):
                waiting.append(pod)
        free = [slot for slot in sorted(placement.pods, key=lambda p: p.index) if slot.index not in taken]
        for pod, slot in zip(waiting, free, strict=False):
            name = str(pod["metadata"]["name"])
            gates = [g for g in (pod.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != ADMISSION_GATE]
            patch: dict[str, Any] = {"metadata": {
                "labels": {JOB_UID_LABEL: job.uid, JOB_NAME_LABEL: label_value(job.name),
                           POD_INDEX_LABEL: str(slot.index), ATTEMPT_LABEL: attempt},
                "annotations": {NODE_ANNOTATION: slot.node, GPUS_ANNOTATION: ",".join(str(g) for g in slot.gpus)}}}
            if len(gates) != len((pod.get("spec") or {}).get("schedulingGates") or []):
                patch["spec"] = {"schedulingGates": gates}
            self._pinned[(namespace, name)] = (job.uid, attempt, slot.index)
            try:
                if not await self.kube.patch("Pod", namespace, name, patch):
                    self._pinned.pop((namespace, name), None)
            except Exception:
                self._pinned.pop((namespace, name), None)
                raise
            log.info("%s: pod %s pinned to replica %d on %s", job.key, name, slot.index, slot.node)

    # -- open and close (admission step 5, teardown) -------------------------------------------
    async def open(self, job: JobView) -> None:
        """Let the source make its pods now that ``job`` is admitted (idempotent)."""
        source = job.spec.pod_source
        if source is None or source.kind is not PodSourceKind.RAY_CLUSTER:
            return  # a pod group's pods exist already; they are pinned by the next step
        rc = self.cache.rayclusters.get((job.namespace, source.name)) or {}
        if (rc.get("spec") or {}).get("suspend") is not False:
            await self.kube.patch("RayCluster", job.namespace, source.name, {"spec": {"suspend": False}})

    async def close(self, job: JobView, *, keep_finished_pods: bool = False) -> bool:
        """Take every pod of the source away (requeue, preemption, suspend, finish); True when the
        source's own controller deletes them, so the caller must not.

        A RayCluster is only suspended: KubeRay then deletes every pod of it. Deleting its pinned
        workers as well would race KubeRay, which, before it sees the suspension, makes new workers
        for the deleted ones and deletes those a moment later. Its scale expectations wait for each pod
        it made to be found, which a deleted one never is, so its worker group waits out their 30 s
        timeout and is reconciled again only at its next periodic requeue (5 min): a cluster preempted
        and admitted again soon after stayed without workers for minutes.
        """
        source = job.spec.pod_source
        if source is None:
            return False
        if source.kind is PodSourceKind.RAY_CLUSTER:
            if _slice_of(job) is not None:
                return False  # a growth slice takes only its own pods (teardown deletes them); the cluster runs on
            if (job.namespace, source.name) not in self.cache.rayclusters:
                return False  # gone: its pods go with it, and whatever is left is deleted by name
            await self.kube.patch("RayCluster", job.namespace, source.name, {"spec": {"suspend": True}})
            return True
        pods = self.cache.source_pods.get((job.namespace, source.kind, source.name), {})
        for name, pod in sorted(pods.items()):
            if keep_finished_pods and (pod.get("status") or {}).get("phase") in FINISHED_POD_PHASES:
                continue
            await self.kube.delete("Pod", job.namespace, name)
        return False

    async def _delete_gone_groups(self, jobs: Mapping[SourceKey, JobView]) -> None:
        now = self.clock()
        for key, job in jobs.items():
            if key[1] not in GANG_KINDS:
                continue
            if any(live_pod(p) for p in self.cache.source_pods.get(key, {}).values()):
                self._gone_since.pop(key, None)
                continue
            since = self._gone_since.setdefault(key, now)
            if now - since >= GROUP_GONE_SECONDS and job.phase not in HOLDING_PHASES:
                log.info("pod group %s/%s has no pods left: deleting GPUJob %s", key[0], key[2], job.name)
                await self.kube.delete("GPUJob", job.namespace, job.name)
                self._gone_since.pop(key, None)
        self._gone_since = {k: t for k, t in self._gone_since.items() if k in jobs}


def _ray_work(rc: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any] | None, Origin]:
    spec, origin = ray_cluster_spec(rc)
    return spec, _owner(rc), origin


def _group_work(namespace: str, name: str, live: Sequence[Mapping[str, Any]]
                ) -> tuple[dict[str, Any], Mapping[str, Any] | None, Origin]:
    spec, origin = pod_group_spec(namespace, name, live)
    return spec, None, origin


def _scheduling_group_work(name: str, podgroup: Mapping[str, Any] | None, workload: Mapping[str, Any] | None,
                           live: Sequence[Mapping[str, Any]]
                           ) -> tuple[dict[str, Any], Mapping[str, Any] | None, Origin]:
    spec, origin = scheduling_group_spec(name, podgroup, workload, live)
    assert podgroup is not None  # scheduling_group_spec refuses a missing one
    return spec, _owner(podgroup, SCHEDULING_API_VERSION, "PodGroup"), origin


def _slice_of(job: JobView) -> int | None:
    """The growth slice number of ``job`` (``operator/_growth.py``), or None for its source's GPUJob itself."""
    source = job.spec.pod_source
    return None if source is None else slice_number(job.name, source_job_name(source.kind, source.name))


def _owner(obj: Mapping[str, Any], api_version: str = "ray.io/v1", kind: str = "RayCluster") -> dict[str, Any]:
    """An owner reference to the source, so that deleting it deletes its GPUJob (garbage collector)."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "name": str(meta.get("name")),
            "uid": str(meta.get("uid")), "controller": True, "blockOwnerDeletion": False}


def _asks_for_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether the pod asks for whole GPUs, by the one rule (``kubegang.api.pod_spec_requests``)."""
    try:
        return pod_spec_requests(pod.get("spec") or {}, where="spec").gpus > 0
    except RequestError:
        return False  # the extender refuses such a pod with the message; nothing to pin
