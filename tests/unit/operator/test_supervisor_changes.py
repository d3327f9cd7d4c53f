"""The leader's per-step work follows what changed: the supervisor's pass and the pending list look only at
jobs whose object, assumed status or pods changed (or whose timer is due), and decide the same."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubegang.operator._cache import ClusterCache
from kubegang.operator._job import job_view
from kubegang.operator._supervisor import FULL_PASS_SECONDS

from .conftest import make_job_body

NODES = {f"node-{i}": 8 for i in range(8)}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _at(w: Any, seconds: float) -> None:
    w.admission.clock = lambda: T0 + dt.timedelta(seconds=seconds)


async def _running_world(make_world: Any, job_body: Any, jobs: int) -> Any:
    """``jobs`` one-pod gangs admitted, their pods Running, reported Running; the passes settled."""
    w = make_world({"team-a": 64}, NODES)
    _at(w, 0)
    for i in range(jobs):
        w.submit(job_body(f"job-{i}", replicas=1, gpus=8, created=f"2025-01-01T00:00:0{i}Z"))
    await w.cycle()
    w.echo_pods()
    for _ in range(3):
        await w.supervisor.run_pass()
        await w.admission.settle()
    assert {w.last_status(f"team-a/job-{i}")["phase"] for i in range(jobs)} == {"Running"}
    return w


async def test_a_pass_looks_only_at_the_jobs_that_changed(make_world: Any, job_body: Any) -> None:
    w = await _running_world(make_world, job_body, jobs=4)
    await w.supervisor.run_pass()
    assert w.supervisor.looked_at == 0  # nothing changed: nothing to look at
    pod = next(p for p in w.kube.pods() if p["metadata"]["name"] == "job-2-0")
    w.see_pod({**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
               "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.supervisor.looked_at == 1
    assert w.last_status("team-a/job-2")["phase"] == "Queued"  # restarted whole, as a full pass would
    assert {w.last_status(f"team-a/job-{i}")["phase"] for i in (0, 1, 3)} == {"Running"}


async def test_a_timer_brings_back_a_job_that_did_not_change(make_world: Any, job_body: Any) -> None:
    w = make_world({"team-a": 64}, NODES)
    _at(w, 0)
    finished = {"phase": "Succeeded", "finishedAt": T0.strftime("%Y-%m-%dT%H:%M:%SZ")}
    w.submit(job_body("done", replicas=1, gpus=8, ttlSecondsAfterFinished=5, status=finished))
    assert await w.supervisor.run_pass() == 5.0
    _at(w, 3)
    assert await w.supervisor.run_pass() == 2.0  # not looked at again, yet its timer is still counted
    assert w.supervisor.looked_at == 0
    _at(w, 5)
    await w.supervisor.run_pass()
    assert w.supervisor.looked_at == 1
    assert ("GPUJob", "team-a", "done") in w.kube.deleted


async def test_a_full_pass_catches_a_change_nobody_reported(make_world: Any, job_body: Any) -> None:
    w = await _running_world(make_world, job_body, jobs=2)
    uid = "uid-job-1"
    # A change that bypasses the cache's upserts (a bug the full pass is the safety net for).
    [(name, state)] = w.cache.pods[uid].items()
    w.cache.pods[uid][name] = dataclasses.replace(state, phase="Failed", exit_code=1)
    await w.supervisor.run_pass()
    assert w.last_status("team-a/job-1")["phase"] == "Running"
    _at(w, FULL_PASS_SECONDS)
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.supervisor.looked_at == 2
    assert w.last_status("team-a/job-1")["phase"] == "Queued"


def test_pending_keeps_the_order_of_all_jobs_through_changes(job_body: Any) -> None:
    cache = ClusterCache()
    a, b, c = (cache.upsert_job(job_body(name)) for name in "abc")
    assert a and b and c
    names = lambda: [job.name for job in cache.pending()]  # noqa: E731
    assert names() == ["a", "b", "c"]
    cache.assume(b, {"phase": "Admitted"})
    assert names() == ["a", "c"]
    cache.forget(b.uid)
    assert names() == ["a", "b", "c"]
    cache.upsert_pod({"metadata": {"name": "c-0", "labels": {"kubegang.io/job-uid": c.uid}}})
    assert names() == ["a", "b"]
    cache.remove_pod({"metadata": {"name": "c-0", "labels": {"kubegang.io/job-uid": c.uid}}})
    invalid = job_body("a")
    invalid["spec"]["replicas"] = 0
    assert cache.upsert_job(invalid) is None
    assert names() == ["b", "c"]
    cache.upsert_job(job_body("a"))  # readable again: last, as in ``all_jobs``
    assert names() == ["b", "c", "a"] == [job.name for job in cache.all_jobs()]


_PHASES = ("Pending", "Queued", "Unschedulable", "Admitted", "Running", "Succeeded", "Suspended")
_op = st.one_of(
    st.tuples(st.just("upsert"), st.integers(0, 4), st.sampled_from(_PHASES), st.booleans()),
    st.tuples(st.just("remove"), st.integers(0, 4)),
    st.tuples(st.just("pod"), st.integers(0, 4), st.booleans()),
    st.tuples(st.just("assume"), st.integers(0, 4), st.sampled_from(_PHASES)),
    st.tuples(st.just("forget"), st.integers(0, 4)),
    st.tuples(st.just("look"),),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_op, max_size=40))
def test_pending_after_any_changes_is_what_a_fresh_cache_finds(ops: list[tuple[Any, ...]]) -> None:
    cache = ClusterCache()
    for op in ops:
        kind, *args = op
        if kind == "upsert":
            i, phase, suspend = args
            cache.upsert_job(make_job_body(f"j{i}", suspend=suspend, status={"phase": phase}))
        elif kind == "remove":
            cache.remove_job(f"uid-j{args[0]}")
        elif kind == "pod":
            pod = {"metadata": {"name": f"j{args[0]}-0", "labels": {"kubegang.io/job-uid": f"uid-j{args[0]}"}}}
            (cache.upsert_pod if args[1] else cache.remove_pod)(pod)
        elif kind == "assume":
            view = cache.jobs.get(f"uid-j{args[0]}")
            if view is not None:
                cache.assume(view, {"phase": args[1]})
        elif kind == "forget":
            cache.forget(f"uid-j{args[0]}")
        else:
            cache.pending()
    fresh = ClusterCache()
    for view in cache.jobs.values():
        fresh.upsert_job(make_job_body(view.name, suspend=view.spec.suspend, status=dict(view.status)))
    for uid, pods in cache.pods.items():
        for name in pods:
            fresh.upsert_pod({"metadata": {"name": name, "labels": {"kubegang.io/job-uid": uid}}})
    fresh.assumed.update({uid: dict(status) for uid, status in cache.assumed.items()})
    assert [job.uid for job in cache.pending()] == [job.uid for job in fresh.pending()]


async def test_a_gang_that_succeeds_gives_its_run_time_to_backfill_predictions(make_world: Any, job_body: Any) -> None:
    w = await _running_world(make_world, job_body, jobs=1)
    started = w.last_status("team-a/job-0")["startedAt"]
    assert started == T0.strftime("%Y-%m-%dT%H:%M:%SZ")
    _at(w, 600)
    pod = next(p for p in w.kube.pods() if p["metadata"]["name"] == "job-0-0")
    w.see_pod({**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
               "status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}})
    await w.supervisor.run_pass()
    await w.admission.settle()
    assert w.last_status("team-a/job-0")["phase"] == "Succeeded"
    view = job_view(job_body("another", replicas=1, gpus=8))
    assert w.admission.quota.predicted_run_seconds(view) == 600.0  # same queue, GPUs and limit (none)
