"""metav1-style conditions and the job phases they imply.

Conditions are the user-facing record of *why* a GPUJob is where it is, so every helper here takes a
reason (CamelCase, machine-readable) and a message (a sentence a human can act on).
``lastTransitionTime`` moves only when a condition's status flips, as Kubernetes conventions ask:
re-asserting "still Queued" with a fresher message must not reset the clock users read as "queued
since".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from kubegang.api import JobConditionType, JobPhase, QueueConditionType

# The API defines the vocabulary once; the operator only names it shortly.
Phase = JobPhase
CondType = JobConditionType


FINISHED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


def now_rfc3339(now: dt.datetime | None = None) -> str:
    """A Kubernetes timestamp (RFC 3339, UTC, seconds) for ``now`` or the current time."""
    moment = now or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> dt.datetime:
    """The datetime in a Kubernetes timestamp; ValueError names the value otherwise.

    RFC 3339 allows a lowercase ``t`` and ``z``, and the API server stores such a value as written; a
    time without a zone is refused here, since comparing it with an aware one would raise later."""
    try:
        parsed = dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"not an RFC 3339 timestamp (no zone): {value!r}")
    return parsed


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    cond_type: CondType | QueueConditionType,
    status: bool,
    reason: str,
    message: str,
    *,
    now: dt.datetime | None = None,
    observed_generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new condition list with ``cond_type`` set; the input is not modified.

    ``lastTransitionTime`` is kept when the status does not change, so it records the flip, not
    the latest write.
    """
    status_text = "True" if status else "False"
    result: list[dict[str, Any]] = []
    previous: Mapping[str, Any] | None = None
    for cond in conditions:
        if cond.get("type") == cond_type.value:
            previous = cond
        else:
            result.append(dict(cond))
    if previous is not None and previous.get("status") == status_text:
        transition = str(previous.get("lastTransitionTime") or now_rfc3339(now))
    else:
        transition = now_rfc3339(now)
    new: dict[str, Any] = {
        "type": cond_type.value,
        "status": status_text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    result.append(new)
    return result


def get_condition(conditions: Sequence[Mapping[str, Any]], cond_type: CondType) -> Mapping[str, Any] | None:
    """The condition of ``cond_type``, or None."""
    for cond in conditions:
        if cond.get("type") == cond_type.value:
            return cond
    return None


def is_true(conditions: Sequence[Mapping[str, Any]], cond_type: CondType) -> bool:
    """Whether ``cond_type`` is present with status True."""
    cond = get_condition(conditions, cond_type)
    return cond is not None and cond.get("status") == "True"


# What each phase asserts and clears, so that a phase change leaves no stale True condition behind
# (a Running job that still said Queued=True would mislead whoever reads `kubectl describe`).
_PHASE_CONDITION: dict[Phase, CondType | None] = {
    Phase.PENDING: None,
    Phase.QUEUED: CondType.QUEUED,
    Phase.ADMITTED: CondType.ADMITTED,
    Phase.RUNNING: CondType.RUNNING,
    Phase.SUCCEEDED: CondType.SUCCEEDED,
    Phase.FAILED: CondType.FAILED,
    Phase.SUSPENDED: CondType.SUSPENDED,
    Phase.UNSCHEDULABLE: CondType.UNSCHEDULABLE,
}
_CLEARED_BY: dict[Phase, tuple[CondType, ...]] = {
    Phase.PENDING: (),
    Phase.QUEUED: (CondType.ADMITTED, CondType.RUNNING, CondType.UNSCHEDULABLE, CondType.SUSPENDED),
    Phase.ADMITTED: (CondType.QUEUED, CondType.RUNNING, CondType.UNSCHEDULABLE, CondType.PREEMPTED),
    Phase.RUNNING: (CondType.QUEUED, CondType.UNSCHEDULABLE, CondType.PREEMPTED),
    Phase.SUCCEEDED: (CondType.QUEUED, CondType.RUNNING, CondType.FAILED),
    Phase.FAILED: (CondType.QUEUED, CondType.RUNNING, CondType.SUCCEEDED),
    Phase.SUSPENDED: (CondType.QUEUED, CondType.ADMITTED, CondType.RUNNING),
    Phase.UNSCHEDULABLE: (CondType.QUEUED, CondType.ADMITTED, CondType.RUNNING),
}


def transition(
    status: Mapping[str, Any],
    phase: Phase,
    reason: str,
    message: str,
    *,
    now: dt.datetime | None = None,
    observed_generation: int | None = None,
) -> dict[str, Any]:
    """A status patch that moves the job to ``phase`` with a reason a human can act on.

    The phase's own condition becomes True with ``reason``/``message``; conditions that contradict
    the new phase become False (kept, so their history stays readable). ``status.reason`` repeats the
    reason, so ``kubectl get gj`` can print it in a column (a printer column cannot pick the one
    condition that matches the phase). Preempted is set by the eviction path itself, which also moves
    the job back to Queued.
    """
    conditions: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or []]
    own = _PHASE_CONDITION[phase]
    if own is not None:
        conditions = set_condition(
            conditions, own, True, reason, message, now=now, observed_generation=observed_generation
        )
    for stale in _CLEARED_BY[phase]:
        if is_true(conditions, stale):
            conditions = set_condition(
                conditions, stale, False, reason, message, now=now, observed_generation=observed_generation
            )
    patch: dict[str, Any] = {"phase": phase.value, "reason": reason, "conditions": conditions}
    if observed_generation is not None:
        patch["observedGeneration"] = observed_generation
    return patch
