"""The gang state machine: from what a gang's pods are doing to the one thing to do about it.

Pure: the supervisor feeds it a job, the pods observed for it and the time, and carries out the
decision (delete, release, patch status). Keeping the rules here makes "the gang stays whole" one
readable function with tests, instead of logic spread across event handlers.

Rules, in the order they are checked:

1. ``suspend`` on a job that holds anything: release everything (Suspended).
2. A finished job past ``ttlSecondsAfterFinished``: delete it.
3. The gang's shape was edited while it holds an admission (``spec.replicas``, or the GPUs per replica
   through ``gpusPerReplica``, ``gpuFraction`` or the template's limit, differ from the admitted ones:
   ``status.placement`` has one slot per admitted replica, ``status.totalGPUs`` the admitted GPUs):
   requeue the whole gang at its new size (``Resized``). Not a restart, so ``restartLimit`` is not
   spent; without this rule a gang grown by an edit read its new replicas as pods that disappeared.
4. Any pod of the current attempt Failed (or gone after the gang ran): restart the whole gang, or
   fail the job once ``restartLimit`` restarts are spent.
5. Every replica Succeeded: the job Succeeded.
6. Not every pod started within ``gangTimeoutSeconds`` of creation (``podsCreatedAt``, else
   ``admittedAt``): delete the gang and requeue it with the nodes that did not bind or start it
   excluded. Started means bound and past Pending (Running, or already finished), as Kueue's
   ``waitForPodsReady`` counts: a pod a kubelet never starts holds its GPUs as surely as one
   kube-scheduler never binds, and the rest of the gang cannot run without it.
7. A Running gang past ``timeLimitSeconds`` since ``startedAt``: delete its pods, the job Failed
   (``TimeLimitExceeded``, Slurm's TIMEOUT; no restart: it would only run out of time again).
8. Otherwise report progress (ready replicas, Running once all run).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from kubegang.admission import WaitReason
from kubegang.operator._conditions import FINISHED_PHASES, Phase, parse_rfc3339
from kubegang.operator._job import JobView
from kubegang.placement import MILLI
from kubegang.podcontract import ATTEMPT_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL


@dataclasses.dataclass(frozen=True)
class PodState:
    """What the supervisor needs to know about one pod of a gang."""

    name: str
    """Pod name."""
    index: int
    """Replica index (label kubegang.io/replica-index)."""
    attempt: str
    """Admission the pod belongs to (label kubegang.io/attempt, see ``JobView.attempt``)."""
    phase: str
    """status.phase: Pending, Running, Succeeded, Failed or Unknown."""
    planned_node: str | None
    """The kubegang.io/node annotation."""
    bound_node: str | None
    """spec.nodeName once kube-scheduler bound it."""
    ready: bool
    """Ready condition is True."""
    exit_code: int | None = None
    """First non-zero container exit code of a Failed pod."""
    failure_reason: str | None = None
    """status.reason or the container's terminated reason (OOMKilled, Evicted, ...)."""
    deleting: bool = False
    """metadata.deletionTimestamp is set."""
    deletion_deadline: dt.datetime | None = None
    """metadata.deletionTimestamp: when its grace period ends (the API server sets it to the time of the
    delete plus the grace period); None when not being deleted, or unreadable."""
    finalizers: tuple[str, ...] = ()
    """metadata.finalizers: what must let go before the API server removes it once deleted."""


def pod_state(body: Mapping[str, Any]) -> PodState:
    """The PodState of a pod object (as the watch delivers it)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    exit_code: int | None = None
    failure_reason = status.get("reason")
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if isinstance(code, int) and code != 0 and exit_code is None:
            exit_code = code
            failure_reason = failure_reason or terminated.get("reason")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    finalizers = meta.get("finalizers")
    return PodState(
        name=str(meta.get("name", "")),
        index=_int_or(labels.get(POD_INDEX_LABEL), -1),
        attempt=str(labels.get(ATTEMPT_LABEL, "")),
        phase=str(status.get("phase") or "Pending"),
        planned_node=(meta.get("annotations") or {}).get(NODE_ANNOTATION),
        bound_node=spec.get("nodeName"),
        ready=ready,
        exit_code=exit_code,
        failure_reason=failure_reason,
        deleting=meta.get("deletionTimestamp") is not None,
        deletion_deadline=_timestamp(meta, "deletionTimestamp"),
        finalizers=tuple(str(f) for f in finalizers if f) if isinstance(finalizers, list) else (),
    )


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class Action(enum.StrEnum):
    """What the supervisor does for a gang."""

    NONE = "None"
    PROGRESS = "Progress"
    SUCCEED = "Succeed"
    RESTART = "Restart"
    FAIL = "Fail"
    TIMEOUT = "Timeout"
    SUSPEND = "Suspend"
    EXPIRE = "Expire"
    RESUME = "Resume"
    RESIZE = "Resize"


@dataclasses.dataclass(frozen=True)
class Decision:
    """The state machine's answer for one gang."""

    action: Action
    """What to do."""
    reason: str = ""
    """Condition reason (CamelCase)."""
    message: str = ""
    """Condition message for humans."""
    ready: int = 0
    """Ready replicas of the current attempt (status.readyReplicas)."""
    running: bool = False
    """Every replica is Running."""
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes to exclude when the gang is placed again (timeouts)."""
    stale_pods: tuple[str, ...] = ()
    """Pods of earlier attempts still present (deleted before a re-admission)."""
    recheck_after: float | None = None
    """Seconds until this gang needs another look even if nothing changes (timeouts, TTL)."""


def _timestamp(status: Mapping[str, Any], *path: str) -> dt.datetime | None:
    node: Any = status
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    if not isinstance(node, str):
        return None
    try:
        return parse_rfc3339(node)
    except ValueError:
        return None  # written by another client: unknown, as if absent (one job's bad field stops nothing)


def _describe_failure(pod: PodState) -> str:
    detail = f"exit code {pod.exit_code}" if pod.exit_code is not None else (pod.failure_reason or "failed")
    if pod.exit_code is not None and pod.failure_reason and pod.failure_reason != "Error":
        detail += f", {pod.failure_reason}"
    return f"worker {pod.index} failed ({detail})"


def _gpus(milli: int) -> str:
    """GPUs per replica as a person writes them (8, 0.25)."""
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli / MILLI:g}"


def resized(job: JobView) -> str | None:
    """What of the gang's shape differs from its admission (a sentence), or None when nothing does or the
    admitted shape is not recorded (``status.placement``: one slot per admitted replica; ``totalGPUs``)."""
    placement = job.placement
    if placement is None or not placement.pods:
        return None
    admitted = len(placement.pods)
    changes = []
    if admitted != job.replicas:
        changes.append(f"spec.replicas changed {admitted} -> {job.replicas}")
    total = job.status.get("totalGPUs")
    if isinstance(total, int | float) and not isinstance(total, bool):
        was = round(total * MILLI / admitted)
        now = job.gpu_milli_per_replica
        if was != now:
            spec = job.spec
            field = ("spec.gpuFraction" if spec.gpu_fraction is not None else
                     "spec.gpusPerReplica" if spec.gpus_per_replica is not None else
                     "the template's nvidia.com/gpu limit")
            changes.append(f"GPUs per replica ({field}) changed {_gpus(was)} -> {_gpus(now)}")
    return " and ".join(changes) or None


def decide(job: JobView, pods: Sequence[PodState], now: dt.datetime) -> Decision:
    """The one thing to do for ``job`` given its ``pods`` at ``now`` (see the module docstring)."""
    phase = job.phase
    current = {p.index: p for p in pods if p.attempt == job.attempt and not p.deleting}
    stale = tuple(sorted(p.name for p in pods if p.attempt != job.attempt and not p.deleting))
    holds = phase in (Phase.ADMITTED, Phase.RUNNING)

    if job.spec.suspend and (holds or phase in (Phase.QUEUED, Phase.PENDING, Phase.UNSCHEDULABLE)):
        return Decision(
            Action.SUSPEND,
            "Suspended",
            "spec.suspend is true: the gang's pods, reservation and quota are released",
            stale_pods=stale,
        )

    if phase is Phase.SUSPENDED and not job.spec.suspend:
        return Decision(Action.RESUME, "Resumed", "spec.suspend is false: back in queue " + job.queue)

    if phase in FINISHED_PHASES:
        finished = _timestamp(job.status, "finishedAt")
        if job.spec.ttl_seconds_after_finished is not None and finished is not None:
            left = (finished - now).total_seconds() + job.spec.ttl_seconds_after_finished
            if left <= 0:
                return Decision(
                    Action.EXPIRE,
                    "TTLExpired",
                    f"ttlSecondsAfterFinished ({job.spec.ttl_seconds_after_finished}s) elapsed",
                )
            return Decision(Action.NONE, recheck_after=left)
        return Decision(Action.NONE)

    if not holds:
        return Decision(Action.NONE, stale_pods=stale)

    change = resized(job)
    if change is not None:
        return Decision(
            Action.RESIZE,
            WaitReason.RESIZED,
            f"{change} while {phase.value}: the whole gang is requeued at its new size "
            "(not counted as a restart)",
            stale_pods=stale,
        )

    # podsCreatedAt is written lazily (with the gang's next status write); a leader that never saw it
    # counts from admittedAt, which is earlier: the timeout can only come sooner, never be skipped.
    created = _timestamp(job.status, "podsCreatedAt") or _timestamp(job.status, "admittedAt")
    ready = sum(1 for p in current.values() if p.ready)
    all_running = len(current) == job.replicas and all(p.phase == "Running" for p in current.values())

    failed = sorted((p for p in current.values() if p.phase == "Failed"), key=lambda p: p.index)
    missing = [i for i in range(job.replicas) if i not in current]
    if not failed and missing and phase is Phase.RUNNING:
        # A pod that vanished after the gang ran (deleted, node lost) breaks the gang like a failure.
        failed_msg = f"worker {missing[0]} disappeared (pod deleted or node lost)"
    elif failed:
        failed_msg = _describe_failure(failed[0])
    else:
        failed_msg = ""
    if failed_msg:
        if job.restarts >= job.spec.restart_limit:
            return Decision(
                Action.FAIL,
                "RestartLimitReached",
                f"restartLimit {job.spec.restart_limit} reached: {failed_msg}",
                ready=ready,
                stale_pods=stale,
            )
        return Decision(
            Action.RESTART,
            "GangRestarting",
            f"{failed_msg}; restarting the whole gang ({job.restarts + 1} of {job.spec.restart_limit})",
            ready=ready,
            stale_pods=stale,
        )

    if len(current) == job.replicas and all(p.phase == "Succeeded" for p in current.values()):
        return Decision(Action.SUCCEED, "AllReplicasSucceeded", f"all {job.replicas} replicas succeeded", ready=ready)

    unbound = [p for p in current.values() if not p.bound_node]
    # Bound, and the kubelet has not started it: a broken node, or an image that cannot be pulled.
    unstarted = [p for p in current.values() if p.bound_node and p.phase == "Pending"]
    if created is not None and (unbound or unstarted or missing):
        left = (created - now).total_seconds() + job.spec.gang_timeout_seconds
        if left <= 0:
            nodes = frozenset(
                [p.planned_node for p in unbound if p.planned_node] + [p.bound_node for p in unstarted if p.bound_node]
            )
            names = ", ".join(sorted(nodes)) or "none"
            waiting = len(unbound) + len(unstarted) + len(missing)
            return Decision(
                Action.TIMEOUT,
                "GangTimeout",
                f"{waiting} of {job.replicas} pods not running within gangTimeoutSeconds "
                f"({job.spec.gang_timeout_seconds}s): {len(unbound) + len(missing)} not bound, "
                f"{len(unstarted)} bound but not started; requeued with nodes excluded: {names}",
                ready=ready,
                excluded_nodes=nodes,
                stale_pods=stale,
            )
        return Decision(Action.PROGRESS, ready=ready, running=all_running, stale_pods=stale, recheck_after=left)

    limit = job.spec.time_limit_seconds
    started = job.started_at if limit is not None and phase is Phase.RUNNING else None
    if limit is not None and started is not None:
        left = (started - now).total_seconds() + limit
        if left <= 0:
            return Decision(
                Action.FAIL,
                "TimeLimitExceeded",
                f"ran past timeLimitSeconds ({limit}s) since {started.isoformat()}: its pods were deleted",
                ready=ready,
                stale_pods=stale,
            )
        return Decision(Action.PROGRESS, ready=ready, running=all_running, stale_pods=stale, recheck_after=left)
    return Decision(Action.PROGRESS, ready=ready, running=all_running, stale_pods=stale)
