from __future__ import annotations

import datetime as dt
from typing import Any

from kubegang.operator._job import job_view
from kubegang.operator._lifecycle import Action, PodState, decide, pod_state

T0 = dt.datetime(2025, 1, 1, 0, 0, 0, tzinfo=dt.UTC)


def admitted(job_body: Any, phase: str = "Admitted", restarts: int = 0, **spec: Any) -> Any:
    status = {
        "phase": phase,
        "restarts": restarts,
        "admittedAt": f"2025-01-01T00:00:0{restarts}Z",
        "podsCreatedAt": "2025-01-01T00:00:00Z",
    }
    return job_view(job_body(replicas=3, status=status, **spec))


def pod(i: int, phase: str = "Running", *, bound: bool = True, attempt: int = 0, **kw: Any) -> PodState:
    """A pod of the admission made ``attempt`` seconds after midnight (see ``admitted``)."""
    return PodState(
        name=f"train-{i}",
        index=i,
        attempt=f"20250101T00000{attempt}Z",
        phase=phase,
        planned_node=f"node-{i}",
        bound_node=f"node-{i}" if bound else None,
        ready=phase == "Running",
        **kw,
    )


def test_all_running_is_progress(job_body: Any) -> None:
    d = decide(admitted(job_body), [pod(0), pod(1), pod(2)], T0)
    assert d.action is Action.PROGRESS and d.running and d.ready == 3


def test_failure_restarts_whole_gang_until_limit(job_body: Any) -> None:
    pods = [pod(0, attempt=1), pod(1, attempt=1), pod(2, "Failed", attempt=1, exit_code=1)]
    d = decide(admitted(job_body, "Running", restarts=1, restartLimit=3), pods, T0)
    assert d.action is Action.RESTART
    assert "worker 2 failed (exit code 1)" in d.message
    d = decide(
        admitted(job_body, "Running", restarts=3, restartLimit=3),
        [pod(0, attempt=3), pod(1, attempt=3), pod(2, "Failed", attempt=3, exit_code=1)],
        T0,
    )
    assert d.action is Action.FAIL
    assert d.message == "restartLimit 3 reached: worker 2 failed (exit code 1)"


def test_pods_of_an_earlier_attempt_are_ignored_and_reported_stale(job_body: Any) -> None:
    job = admitted(job_body, "Running", restarts=1)
    pods = [pod(0, "Failed", attempt=0, exit_code=2), *(pod(i, attempt=1) for i in range(3))]
    d = decide(job, pods, T0)
    assert d.action is Action.PROGRESS
    assert d.stale_pods == ("train-0",)


def test_vanished_pod_of_running_gang_counts_as_failure(job_body: Any) -> None:
    d = decide(admitted(job_body, "Running"), [pod(0), pod(1)], T0)
    assert d.action is Action.RESTART and "worker 2 disappeared" in d.message


def test_unbound_gang_times_out_and_excludes_failing_nodes(job_body: Any) -> None:
    job = admitted(job_body, gangTimeoutSeconds=60)
    pods = [pod(0), pod(1, "Pending", bound=False), pod(2, "Pending", bound=False)]
    early = decide(job, pods, T0 + dt.timedelta(seconds=30))
    assert early.action is Action.PROGRESS and early.recheck_after == 30
    late = decide(job, pods, T0 + dt.timedelta(seconds=61))
    assert late.action is Action.TIMEOUT
    assert late.excluded_nodes == {"node-1", "node-2"}


def test_a_bound_pod_its_kubelet_never_starts_times_the_gang_out_and_excludes_its_node(job_body: Any) -> None:
    job = admitted(job_body, gangTimeoutSeconds=60)
    # Worker 0 already finished, worker 1 runs, worker 2 is bound and stays Pending: the gang never
    # ran together, and worker 2's GPUs are held for nothing.
    pods = [pod(0, "Succeeded"), pod(1), pod(2, "Pending")]
    early = decide(job, pods, T0 + dt.timedelta(seconds=45))
    assert early.action is Action.PROGRESS and early.recheck_after == 15
    late = decide(job, pods, T0 + dt.timedelta(seconds=60))
    assert late.action is Action.TIMEOUT and late.reason == "GangTimeout"
    assert late.excluded_nodes == {"node-2"}
    assert "1 of 3 pods not running" in late.message and "1 bound but not started" in late.message
    # Once every pod has started, the gang timeout no longer applies.
    started = decide(job, [pod(0, "Succeeded"), pod(1), pod(2)], T0 + dt.timedelta(days=1))
    assert started.action is Action.PROGRESS and started.recheck_after is None


def test_running_gang_past_its_time_limit_fails_and_is_rechecked_before(job_body: Any) -> None:
    body = job_body(replicas=3, timeLimitSeconds=600, status={
        "phase": "Running", "restarts": 0, "admittedAt": "2025-01-01T00:00:00Z",
        "podsCreatedAt": "2025-01-01T00:00:00Z", "startedAt": "2025-01-01T00:01:00Z"})
    job = job_view(body)
    pods = [pod(i) for i in range(3)]
    early = decide(job, pods, T0 + dt.timedelta(seconds=60 + 400))
    assert early.action is Action.PROGRESS and early.recheck_after == 200
    late = decide(job, pods, T0 + dt.timedelta(seconds=60 + 600))
    assert late.action is Action.FAIL and late.reason == "TimeLimitExceeded"
    assert "timeLimitSeconds (600s)" in late.message
    # A gang that finished in time succeeds, whatever the clock says afterwards.
    done = decide(job, [pod(i, "Succeeded") for i in range(3)], T0 + dt.timedelta(hours=1))
    assert done.action is Action.SUCCEED
    # Without a limit nothing is timed once the gang runs.
    free = decide(admitted(job_body, "Running"), pods, T0 + dt.timedelta(days=30))
    assert free.action is Action.PROGRESS and free.recheck_after is None


def test_when_rules_collide_the_first_in_the_documented_order_decides(job_body: Any) -> None:
    """docs/operator.md: the gang rules are checked in order. A failed worker (rule 3: a restart, counted)
    comes before the gang timeout (no restart counted) and before the time limit (Failed)."""
    failed = [pod(0), pod(1, "Pending"), pod(2, "Failed", exit_code=1)]
    past_timeout = decide(admitted(job_body, gangTimeoutSeconds=60), failed, T0 + dt.timedelta(seconds=120))
    assert past_timeout.action is Action.RESTART, past_timeout
    body = job_body(replicas=3, timeLimitSeconds=600, status={
        "phase": "Running", "restarts": 0, "admittedAt": "2025-01-01T00:00:00Z",
        "podsCreatedAt": "2025-01-01T00:00:00Z", "startedAt": "2025-01-01T00:01:00Z"})
    over_limit = decide(job_view(body), [pod(0), pod(1), pod(2, "Failed", exit_code=1)],
                        T0 + dt.timedelta(hours=1))
    assert over_limit.action is Action.RESTART, over_limit


def test_all_succeeded(job_body: Any) -> None:
    d = decide(admitted(job_body, "Running"), [pod(i, "Succeeded") for i in range(3)], T0)
    assert d.action is Action.SUCCEED


def test_suspend_releases_admitted_and_queued_jobs(job_body: Any) -> None:
    assert decide(admitted(job_body, suspend=True), [pod(0)], T0).action is Action.SUSPEND
    queued = job_view(job_body(suspend=True, status={"phase": "Queued"}))
    assert decide(queued, [], T0).action is Action.SUSPEND
    done = job_view(job_body(suspend=True, status={"phase": "Succeeded"}))
    assert decide(done, [], T0).action is Action.NONE


def test_ttl_after_finished(job_body: Any) -> None:
    job = job_view(
        job_body(ttlSecondsAfterFinished=100, status={"phase": "Failed", "finishedAt": "2025-01-01T00:00:00Z"})
    )
    wait = decide(job, [], T0 + dt.timedelta(seconds=40))
    assert wait.action is Action.NONE and wait.recheck_after == 60
    assert decide(job, [], T0 + dt.timedelta(seconds=100)).action is Action.EXPIRE


def test_pod_state_reads_exit_code_and_labels() -> None:
    body = {
        "metadata": {
            "name": "train-1",
            "labels": {"kubegang.io/replica-index": "1", "kubegang.io/attempt": "2"},
            "annotations": {"kubegang.io/node": "n1"},
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        },
    }
    state = pod_state(body)
    assert (state.index, state.attempt, state.exit_code, state.failure_reason) == (1, "2", 137, "OOMKilled")
    assert state.planned_node == "n1" and state.bound_node == "n1"


def test_suspended_job_resumes_when_unsuspended(job_body: Any) -> None:
    job = job_view(job_body(status={"phase": "Suspended"}))
    assert decide(job, [], T0).action is Action.RESUME
